"""The iptables writer: the tables of one IP version, through ``iptables-restore --noflush``.

Each apply reads the tables back (one ``iptables-save``), compares every cali chain's rule ids
(the ``cali:`` comments) with the desired chains', and writes one restore with a transaction
per table that rewrites only the chains that differ, adds the hooks from the kernel's chains
that are missing (at the top, or at the end in append mode), keeps the rules Felix appends to
kernel chains at their very end (moving them back behind anything another tool appended), and
deletes cali chains nobody wants any more. A table is therefore never half-applied, and
anything someone changed behind our back is put right on the next refresh.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs
import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.commands import run
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule

_HASH = re.compile(r'--comment "?cali:([A-Za-z0-9_-]+)"?')
PREFIX = "cali-"
#: ``iptables-nft-restore --noflush`` files every chain a command names in a sorted list, one
#: walk of it per command: O(commands x chains), 1.5x the plain restore for a 20k-rule filter
#: table. One table-wide command turns that off (the tool then reads the table's chains at
#: once), so a large write into a small table opens with a listing of the table (``-S``, its
#: output discarded). Into a large table the listing would cost more than it saves.
LISTING = "-S"
LISTING_MIN_RULES = 1000
LISTING_MAX_KERNEL_SHARE = 0.25


@attrs.frozen
class TableState:
    """What the kernel holds: rule ids per chain (every chain, ours and the kernel's)."""

    chains: Mapping[str, tuple[str, ...]]
    hooks: frozenset[tuple[str, str]]
    #: The kernel chains' policy and counters as iptables-save prints them ("ACCEPT [0:0]").
    policies: Mapping[str, str] = attrs.Factory(dict)


def parse_save(text: str) -> dict[str, TableState]:
    """Every table of an iptables-save dump."""
    tables: dict[str, tuple[dict[str, list[str]], set[tuple[str, str]], dict[str, str]]] = {}
    chains: dict[str, list[str]] = {}
    hooks: set[tuple[str, str]] = set()
    policies: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("*"):
            chains, hooks, policies = {}, set(), {}
            tables[line[1:]] = (chains, hooks, policies)
        elif line.startswith(":"):
            name, _, policy = line[1:].partition(" ")
            chains.setdefault(name, [])
            if not policy.startswith("-"):
                policies[name] = policy
        elif line.startswith("-A "):
            chain = line.split()[1]
            match = _HASH.search(line)
            chains.setdefault(chain, []).append(match.group(1) if match else "")
            jump = re.search(r"-j (cali-\S+)", line)
            if not chain.startswith(PREFIX) and jump:
                hooks.add((chain, jump.group(1)))
    return {
        table: TableState({k: tuple(v) for k, v in chains.items()}, frozenset(hooks), policies)
        for table, (chains, hooks, policies) in tables.items()
    }


#: A table iptables-save does not show: nothing in it, not even the kernel's chains.
ABSENT = TableState({}, frozenset())

#: What one table should hold: our chains, the hooks (kernel chain, our chain) into them, and
#: the rules kept at the end of kernel chains (a Chain named after the kernel chain).
Desired = tuple[Sequence[Chain], Sequence[tuple[str, str]], Sequence[Chain]]


@attrs.frozen
class Script:
    """An iptables-restore script: text, and chains whose rule lines (and so their rule ids)
    are only produced when the script is written."""

    parts: tuple[str | Chain, ...] = ()
    #: Opens a table with a listing (then restored with --counters).
    listing: bool = False

    @classmethod
    def join(cls, scripts: Iterable[Script]) -> Script:
        scripts = list(scripts)
        parts = tuple(part for script in scripts for part in script.parts)
        return cls(parts, any(script.listing for script in scripts))

    def __bool__(self) -> bool:
        return bool(self.parts)

    def chunks(self) -> Iterator[str]:
        for part in self.parts:
            yield part if isinstance(part, str) else "".join(f"{line}\n" for line in part.lines())

    def text(self) -> str:
        return "".join(self.chunks())

    def lines_by_table(self) -> dict[str, int]:
        """How many lines the tool executes for each table (Felix's
        felix_iptables_lines_executed), counted without producing the chains' lines."""
        counts: dict[str, int] = {}
        table = ""
        for part in self.parts:
            if isinstance(part, Chain):
                counts[table] = counts.get(table, 0) + len(part.rules)
                continue
            for line in part.splitlines():
                if line.startswith("*"):
                    table = line[1:]
                counts[table] = counts.get(table, 0) + 1
        return counts


#: Felix's xtables lock timeout for iptables-restore, in seconds (its lock timeout of 0 means 10).
LOCK_TIMEOUT = 10


@attrs.define
class IptablesWriter:
    """Writes the tables of one IP version with one backend ("legacy" or "nft")."""

    version: int = 4
    backend: str = "nft"
    insert_mode: str = "insert"
    #: IptablesLockProbeIntervalMillis, in seconds: how often a restore retries the xtables
    #: lock while another program holds it.
    lock_probe_interval: float = 0.05

    @property
    def _tool(self) -> str:
        return f"ip{'6' if self.version == 6 else ''}tables-{self.backend}"

    async def read(self, tables: Collection[str]) -> dict[str, TableState]:
        argv = [f"{self._tool}-save"]
        if len(tables) == 1:
            argv += ["-t", *tables]
        return _states(await run(argv), tables)

    def plan(
        self,
        table: str,
        state: TableState,
        chains: Sequence[Chain],
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain] = (),
    ) -> Script:
        """The restore transaction that takes ``table`` from ``state`` to the desired chains,
        hooks and appended rules (empty when there is nothing to do). A chain the kernel does
        not have is written without computing its rule ids first: they are computed as its
        lines are."""
        wanted = {chain.name: chain for chain in chains}
        changed = [
            chain
            for chain in chains
            if chain.name not in state.chains or chain.hashes != state.chains[chain.name]
        ]
        stale = sorted(
            name for name in state.chains if name.startswith(PREFIX) and name not in wanted
        )
        rewritten = self._misplaced(state, hooks, appends)
        if not (changed or stale or rewritten):
            return Script()
        head = [f"*{table}"]
        written = sum(len(chain.rules) for chain in changed)
        in_kernel = sum(map(len, state.chains.values()))
        listing = (
            self.backend == "nft"
            and written >= LISTING_MIN_RULES
            and in_kernel <= written * LISTING_MAX_KERNEL_SHARE
        )
        if listing:
            # After a listing the tool no longer creates the kernel chains it is missing, and
            # iptables-save shows absent ones as present; so the chains we hook into are
            # declared, with the policy and counters just read (restored with --counters).
            head.append(LISTING)
            head += [f":{k} {state.policies.get(k, 'ACCEPT [0:0]')}" for k in rewritten]
        head += [f":{chain.name} - [0:0]" for chain in changed]
        head += [f":{name} - [0:0]" for name in stale]
        # Deletions first, by the positions just read, before any insertion moves them.
        tail = [
            f"-D {kernel_chain} {position}"
            for kernel_chain, positions in rewritten.items()
            for position in sorted(positions, reverse=True)
        ]
        for kernel_chain in rewritten:
            tail += self._hook_lines(kernel_chain, hooks)
            tail += [
                line for chain in appends if chain.name == kernel_chain for line in chain.lines()
            ]
        tail += [f"-X {name}" for name in stale]
        tail.append("COMMIT")
        parts: list[str | Chain] = ["\n".join(head) + "\n", *changed, "\n".join(tail) + "\n"]
        return Script(tuple(parts), listing)

    def _hook_lines(self, kernel_chain: str, hooks: Sequence[tuple[str, str]]) -> list[str]:
        """The restore lines that put ``kernel_chain``'s hooks in place, in their order: each
        inserted at the top (the last first), or appended."""
        lines = [
            Chain(kernel, (_jump(target),)).lines()[0]
            for kernel, target in hooks
            if kernel == kernel_chain
        ]
        if self.insert_mode == "insert":
            return [line.replace("-A ", "-I ", 1) for line in reversed(lines)]
        return lines

    def _layout(
        self,
        kernel_chain: str,
        current: Sequence[str],
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain],
    ) -> tuple[str, ...]:
        """The rule ids ``kernel_chain`` holds when laid out as Felix lays it out, around the
        other programs' rules it holds now (``current``): the hooks at the top (at the end of
        the others' in append mode), the appended rules at the very end."""
        hook_ids = tuple(
            Chain(kernel, (_jump(target),)).hashes[0]
            for kernel, target in hooks
            if kernel == kernel_chain
        )
        appended = tuple(
            rule_id for chain in appends if chain.name == kernel_chain for rule_id in chain.hashes
        )
        others = ("",) * sum(1 for rule_id in current if not rule_id)
        if self.insert_mode == "insert":
            return hook_ids + others + appended
        return others + hook_ids + appended

    def _misplaced(
        self,
        state: TableState,
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain],
    ) -> dict[str, list[int]]:
        """The kernel chains whose rules of ours are not laid out as Felix lays them, each
        with the (1-based) positions of every rule of ours there, to delete before they are
        written anew. A hook left above the other rules after a switch to append mode, a rule
        another program inserted above the hooks, or appended behind Felix's last rules, all
        make the chain misplaced."""
        out: dict[str, list[int]] = {}
        hooked = [kernel for kernel, _ in hooks] + [chain.name for chain in appends]
        # A kernel chain with rules of ours and none wanted (a hook of a feature turned off)
        # is laid out wrong too: every rule of ours there goes.
        unwanted = [
            name
            for name, ids in state.chains.items()
            if not name.startswith(PREFIX) and any(ids) and name not in hooked
        ]
        for kernel_chain in dict.fromkeys(hooked + unwanted):
            current = state.chains.get(kernel_chain, ())
            if current != self._layout(kernel_chain, current, hooks, appends):
                out[kernel_chain] = [i + 1 for i, rule_id in enumerate(current) if rule_id]
        return out

    def rewrites(
        self, state: TableState, hooks: Sequence[tuple[str, str]], appends: Sequence[Chain]
    ) -> bool:
        """Whether a plan against ``state`` rewrites a kernel chain (deleting by positions
        that other programs' rules move: a plan that does must be made against a reading)."""
        return bool(self._misplaced(state, hooks, appends))

    def after(
        self,
        table: str,
        state: TableState,
        chains: Sequence[Chain],
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain] = (),
    ) -> TableState:
        """What ``table`` holds once ``plan``'s script for the same arguments is written: the
        next plan can start from it instead of reading the table back (as Felix keeps the
        hashes it wrote, and reads only on its refresh)."""
        wanted = {chain.name for chain in chains}
        held = {
            name: ids
            for name, ids in state.chains.items()
            if not name.startswith(PREFIX) or name in wanted
        }
        held.update((chain.name, chain.hashes) for chain in chains)
        rewritten = self._misplaced(state, hooks, appends)
        for kernel_chain in rewritten:
            current = state.chains.get(kernel_chain, ())
            held[kernel_chain] = self._layout(kernel_chain, current, hooks, appends)
        kept = {(k, t) for k, t in state.hooks if k not in rewritten}
        placed = {(k, t) for k, t in hooks if k in rewritten}
        return TableState(held, frozenset(kept | placed), state.policies)

    async def prepare(
        self, desired: Mapping[str, Desired], states: Mapping[str, TableState] | None = None
    ) -> Script:
        """The restore script (a transaction per table) that brings the ``desired`` tables
        into the kernel as it is now, or as ``states`` found it (read for every desired table
        by ``read`` a moment before)."""
        if states is None:
            states = await self.read(desired.keys())
        return Script.join(
            self.plan(table, states[table], chains, hooks, appends)
            for table, (chains, hooks, appends) in desired.items()
        )

    async def differing(self, desired: Mapping[str, Desired]) -> set[str]:
        """The ``desired`` tables the kernel no longer holds as desired (read in one save):
        the refresh's and post-write checks' question, asked without writing."""
        states = await self.read(desired.keys())
        return {
            table
            for table, (chains, hooks, appends) in desired.items()
            if self.plan(table, states[table], chains, hooks, appends)
        }

    async def write(self, script: Script) -> None:
        """Stream the script into the tool, which parses its start while the rest (with the
        rule ids) is still being produced."""
        if not script:
            return
        argv = [f"{self._tool}-restore", "--noflush"]
        if script.listing:
            argv.append("--counters")
        # As Felix: wait up to 10 s for the xtables lock (legacy takes it; nft accepts the
        # options), probing every IptablesLockProbeIntervalMillis (iptables 1.8.8 and later
        # ignore the interval and say so on stderr).
        probe = max(1, round(self.lock_probe_interval * 1_000_000))
        argv += ["--wait", str(LOCK_TIMEOUT), "--wait-interval", str(probe)]
        await run(argv, script.chunks())

    async def remove_ours(self, tables: Collection[str]) -> bool:
        """Take every rule of ours out of the kernel's chains and delete every cali chain (the
        nftables mode's start, once its own table is in place); whether there was any."""
        states = await self.read(tables)
        lines = []
        for table, state in states.items():
            ours = sorted(name for name in state.chains if name.startswith(PREFIX))
            deletions = [
                f"-D {chain} {position}"
                for chain, ids in state.chains.items()
                if not chain.startswith(PREFIX)
                for position in range(len(ids), 0, -1)
                if ids[position - 1]
            ]
            if not ours and not deletions:
                continue
            lines += [f"*{table}", *(f":{name} - [0:0]" for name in ours), *deletions]
            lines += [f"-X {name}" for name in ours]
            lines.append("COMMIT")
        if lines:
            await self.write(Script(("\n".join(lines) + "\n",)))
        return bool(lines)

    async def apply(self, desired: Mapping[str, Desired]) -> str:
        """Prepare and write at once; returns the script written."""
        script = await self.prepare(desired)
        await self.write(script)
        return script.text()


def _jump(target: str) -> Rule:
    return Rule(action=mt.Jump(target))


#: Chains kubelet and kube-proxy create in the mangle table of the backend they use.
KUBERNETES_HINTS = ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY")
#: Present once the legacy backend's modules are loaded, per IP version: its tools would load
#: them, so an unloaded legacy backend is not asked what it holds.
LEGACY_LOADED = {4: Path("/proc/net/ip_tables_names"), 6: Path("/proc/net/ip6_tables_names")}


@attrs.frozen
class Detected:
    """The backend chosen, and each IP version's whole save output of that backend if the
    detection read it (a restarted node's tables, which need not be read again)."""

    backend: str
    saved: Mapping[int, str] = attrs.Factory(dict)


async def _saves(backend: str) -> dict[int, str]:
    """Each IP version's save output of ``backend``, the versions at once; only those its
    tool gave (not where it is missing or failed, or the legacy backend is not loaded)."""
    found: dict[int, str] = {}

    async def save(version: int) -> None:
        if backend == "legacy" and not LEGACY_LOADED[version].exists():
            return
        tool = f"ip{'6' if version == 6 else ''}tables-{backend}-save"
        with contextlib.suppress(OSError, DataplaneWriteError):
            found[version] = await run([tool])

    async with trio.open_nursery() as nursery:
        for version in (4, 6):
            nursery.start_soon(save, version)
    return found


async def detect_backend(configured: str = "auto") -> Detected:
    """legacy or nft: as configured, else as Felix detects it: the backend whose mangle table
    holds kubelet's or kube-proxy's hint chains (nft asked first), else the one holding more
    rules in both versions' tables; on a tie nft, where Felix chooses legacy (this agent's
    tools and tests are nft's; Debian's iptables is nft). Felix reads the mangle tables
    first; here every table is read at once, as the first apply needs the chosen backend's
    tables: a mangle table alone took iptables-nft-save half as long as all of them."""
    if configured.lower() in ("legacy", "nft"):
        return Detected(configured.lower())
    saved = {backend: await _saves(backend) for backend in ("nft", "legacy")}
    hinted = [
        backend
        for backend, texts in saved.items()
        if any(hint in _mangle(text) for text in texts.values() for hint in KUBERNETES_HINTS)
    ]
    if hinted:
        chosen = hinted[0]
    else:
        rules = {
            backend: sum(_count_rules(text) for text in texts.values())
            for backend, texts in saved.items()
        }
        chosen = "legacy" if rules["legacy"] > rules["nft"] else "nft"
    return Detected(chosen, saved[chosen])


def _mangle(text: str) -> str:
    """The mangle table's part of a save's output."""
    start = text.find("*mangle\n")
    return "" if start < 0 else text[start : text.find("\nCOMMIT", start)]


def _count_rules(text: str) -> int:
    """The rules in a save's output (its lines that start with a dash), as Felix counts them."""
    return text.startswith("-") + text.count("\n-")


@attrs.frozen
class SavedTables:
    """Tables read from a save's output already taken (by ``detect_backend``)."""

    text: str

    async def read(self, tables: Collection[str]) -> dict[str, TableState]:
        return _states(self.text, tables)


def _states(text: str, tables: Collection[str]) -> dict[str, TableState]:
    states = parse_save(text)
    return {table: states.get(table, ABSENT) for table in tables}
