"""The nftables writer: one family's ``calico`` table, a transaction (``nft -f`` input, run by
libnftables in this process: linux/libnftables.py) a write.

What the kernel holds is known from the last write, or read back (``nft list table``, its text)
when the refresh asks or a write failed. A write brings the table from there to the desired one:
new sets, maps and chains are added, every chain whose rule ids (the ``cali:`` comments)
differ is flushed and written whole, set and map elements are added and deleted one by one,
and what is no longer wanted (or was never ours: another tool's chain in our table) is
flushed and deleted last, once nothing refers to it. Nothing is read back after a write, as
Felix does not. A failed write makes the next one replace the whole table, atomically, in
one transaction (``table``, ``delete table``, then its definition): never a window in which
the table is half there.
"""

from __future__ import annotations

import logging
import operator
import re
import time
from collections.abc import Collection, Iterable, Mapping

import attrs
import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.commands import CALLS, ERRORS, KERNEL_ERRORS
from pyfelix_dataplane.linux.libnftables import Nft
from pyfelix_dataplane.linux.nft_elements import ElementChange, ElementWriter
from pyfelix_dataplane.linux.reading import Reading
from pyfelix_dataplane.rules.nft import TABLE, NftChain, NftSet, NftTable

log = logging.getLogger(__name__)

_RULE_ID = re.compile(r'comment "cali:([A-Za-z0-9_-]+);')


@attrs.frozen
class KernelTable:
    """What one family's table holds, as far as a write needs it."""

    #: chain -> its rules' ids ("" for a rule without one), and its hook ("" for none).
    chains: Mapping[str, tuple[tuple[str, ...], str]]
    sets: Mapping[str, NftSet]
    maps: Mapping[str, Mapping[str, str]]

    @classmethod
    def of(cls, table: NftTable) -> KernelTable:
        """What writing ``table`` leaves in the kernel."""
        return cls(
            {name: (chain.hashes, chain.hook) for name, chain in table.chains.items()},
            dict(table.sets),
            {name: dict(entries) for name, entries in table.maps.items()},
        )


def _unquoted(text: str) -> str:
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] == '"' else text


def _element_list(text: str) -> list[str]:
    """The elements between an ``elements = {`` and its ``}``, as listed."""
    inner = text[text.index("{") + 1 : text.rindex("}")]
    return [item.strip() for item in inner.split(",") if item.strip()]


def parse_listing(text: str) -> KernelTable:
    """The table from ``nft --stateless --numeric-priority list table FAMILY calico``.

    nft's own text, read line by line: a chain's rules one a line, its hook first; a set's or
    map's elements between ``elements = {`` and ``}``, over several lines. A line this does
    not know is taken for a rule without an id (its chain then differs from ours and is
    rewritten), never for agreement."""
    chains: dict[str, tuple[list[str], str]] = {}
    sets: dict[str, NftSet] = {}
    maps: dict[str, dict[str, str]] = {}
    lines = iter(text.splitlines())
    for line in lines:
        words = line.split()
        if len(words) < 3 or words[-1] != "{" or words[0] not in ("chain", "set", "map"):
            continue
        kind, name = words[0], _unquoted(words[1])
        if kind == "chain":
            rules: list[str] = []
            hook = ""
            for body in lines:
                stripped = body.strip()
                if stripped == "}":
                    break
                if stripped.startswith("type ") and " hook " in stripped and not rules:
                    hook = stripped
                    continue
                match = _RULE_ID.search(stripped)
                rules.append(match.group(1) if match else "")
            chains[name] = (rules, hook)
            continue
        set_type, interval, elements = "", False, []
        for body in lines:
            stripped = body.strip()
            if stripped == "}":
                break
            if stripped.startswith("type "):
                set_type = stripped.removeprefix("type ")
            elif stripped.startswith("flags "):
                interval = "interval" in stripped.removeprefix("flags ").split(",")
            elif stripped.startswith("elements = {"):
                while not stripped.endswith("}"):
                    # A listing cut short ends the elements where it ends.
                    stripped += " " + next(lines, "}").strip()
                elements = _element_list(stripped)
        if kind == "set":
            members = frozenset(_unquoted(element) for element in elements)
            sets[name] = NftSet(set_type, interval, members)
        else:
            entries = {}
            for element in elements:
                key, _, verdict = element.partition(" : ")
                entries[_unquoted(key)] = verdict
            maps[name] = entries
    return KernelTable({k: (tuple(v), hook) for k, (v, hook) in chains.items()}, sets, maps)


def _elements(items: Iterable[str]) -> str:
    return "{ " + ", ".join(sorted(items)) + " }"


def _map_elements(entries: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f'"{k}" : {v}' for k, v in sorted(entries.items())) + " }"


def _chain_head(where: str, chain: NftChain) -> str:
    return f"add chain {where} {chain.name}" + (f" {{ {chain.hook} }}" if chain.hook else "")


def delta(
    current: KernelTable | None,
    desired: NftTable,
    changed_sets: Collection[str] | None = None,
    same_layout: bool = False,
) -> str:
    """The ``nft -f`` transaction from ``current`` (None: unknown, or absent) to ``desired``
    ("" when they agree). ``changed_sets``: the only sets whose elements may differ (None:
    any may); ``same_layout``: ``current`` was written from these very chains and maps, so
    only sets are compared."""
    where = f"{desired.family} {TABLE}"
    if current is None:
        return desired.script()
    head: list[str] = []
    body: list[str] = []
    tail: list[str] = []
    names = desired.sets.keys() if changed_sets is None else changed_sets
    for name in sorted(names):
        wanted = desired.sets.get(name)
        if wanted is None:
            continue
        present = current.sets.get(name)
        if present is None or (present.type, present.interval) != (wanted.type, wanted.interval):
            if present is not None:
                return desired.script()  # a set's type cannot change in place
            head.append(f"add set {where} {name} {wanted.declaration()}")
            present = NftSet(wanted.type, wanted.interval, frozenset())
        gone, new = present.elements - wanted.elements, wanted.elements - present.elements
        if gone:
            body.append(f"delete element {where} {name} {_elements(gone)}")
        if new:
            body.append(f"add element {where} {name} {_elements(new)}")
    for name, entries in () if same_layout else sorted(desired.maps.items()):
        present_map = current.maps.get(name)
        if present_map is None:
            head.append(f"add map {where} {name} {{ type ifname : verdict; }}")
            present_map = {}
        changed = {k for k, v in present_map.items() if entries.get(k) != v}
        if changed:
            keys = ", ".join(f'"{key}"' for key in sorted(changed))
            head.append(f"delete element {where} {name} {{ {keys} }}")
        new_entries = {k: v for k, v in entries.items() if present_map.get(k) != v}
        if new_entries:
            tail.append(f"add element {where} {name} {_map_elements(new_entries)}")
    for name, chain in () if same_layout else sorted(desired.chains.items()):
        present_chain = current.chains.get(name)
        if present_chain is not None and present_chain[1] != chain.hook:
            return desired.script()  # a base chain's hook cannot change in place
        if present_chain is None:
            head.append(_chain_head(where, chain))
        if present_chain is None or present_chain[0] != chain.hashes:
            body.append(f"flush chain {where} {name}")
            body.extend(f"add rule {where} {name} {line}" for line in chain.rule_lines())
    if not same_layout:
        stale_chains = sorted(set(current.chains) - set(desired.chains))
        tail += [f"flush chain {where} {name}" for name in stale_chains]
        tail += [f"delete chain {where} {name}" for name in stale_chains]
        stale_maps = sorted(set(current.maps) - set(desired.maps))
        tail += [f"delete map {where} {name}" for name in stale_maps]
    stale_sets = current.sets.keys() - desired.sets.keys()
    tail += [f"delete set {where} {name}" for name in sorted(stale_sets)]
    lines = head + body + tail
    return "\n".join(lines) + "\n" if lines else ""


def _element_changes(
    current: KernelTable | None, desired: NftTable, script: str
) -> list[ElementChange] | None:
    """When ``script`` only adds and deletes members of existing sets (no chain, map or set
    of its own changes), those changes, for the nfnetlink fast path; else None."""
    if current is None:
        return None
    touched = []
    for line in script.splitlines():
        verb, _, rest = line.partition(" element ")
        if verb not in ("add", "delete") or not rest:
            return None
        name = rest.split()[2]
        if name not in desired.sets or name not in current.sets:
            return None
        touched.append(name)
    changes = []
    for name in dict.fromkeys(touched):
        wanted, present = desired.sets[name], current.sets[name]
        gone = tuple(sorted(present.elements - wanted.elements))
        new = tuple(sorted(wanted.elements - present.elements))
        if gone:
            changes.append(ElementChange(False, name, wanted, gone))
        if new:
            changes.append(ElementChange(True, name, wanted, new))
    return changes


@attrs.define(eq=False)
class NftablesWriter:
    """One family's table; ``invalidate`` makes the next apply read the kernel first."""

    family: str
    _nft: Nft = attrs.Factory(Nft)
    _elements: ElementWriter = attrs.Factory(
        lambda self: ElementWriter(self.family), takes_self=True
    )
    _current: KernelTable | None = None
    _known: bool = False
    #: The chains and maps ``_current`` holds, as the objects last applied: while the same
    #: objects come again (the manager translates chains only when they change), a label
    #: change compares only sets (not 2,500 chains and their rule ids).
    _layout: tuple[object, object] | None = None
    #: Read since the last apply: that apply compares every set.
    _reread: bool = False
    #: The table last written (or found already in place): what ``check`` compares with.
    _desired: NftTable | None = None
    #: Counts each write's start and end: a reading that one overlapped proves nothing.
    _writes: int = 0
    #: A reading made before this writer was (``adopt``), for its first ``know``.
    _adopted: Reading[KernelTable | None] | None = None

    @property
    def written(self) -> bool:
        """Whether a table is known written (``check`` has something to compare)."""
        return self._known and self._desired is not None

    def invalidate(self) -> None:
        self._known = False

    def adopt(self, reading: Reading[KernelTable | None]) -> None:
        """The table read before this writer existed (the driver reads a restarted node's
        table while the snapshot loads): the next ``know`` (the first apply's: the refresh
        schedule invalidates every writer before it) takes it instead of reading."""
        self._adopted = reading

    async def read(self) -> KernelTable | None:
        """The table as the kernel has it (None when there is none)."""
        listing = await self._nft.listing(f"list table {self.family} {TABLE}")
        if not listing.strip():
            return None
        try:
            return parse_listing(listing)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("cannot read nft table %s %s (%s): replacing it", self.family, TABLE, exc)
            return None

    async def know(self) -> bool:
        """Read the table if what the kernel holds is not known; whether it was read (then
        every set is compared at the next apply)."""
        if self._known:
            return self._reread
        reading, self._adopted = self._adopted, None
        if reading is not None:
            await reading.done.wait()
        if reading is not None and reading.ok:
            self._current = reading.value
        else:
            self._current = await self.read()
        self._layout = None
        self._known = self._reread = True
        return True

    async def apply(self, desired: NftTable, changed_sets: Collection[str] | None = None) -> bool:
        """Write what differs; whether anything was written. ``changed_sets``: the only
        sets whose members may have changed since the last apply (None: any)."""
        if await self.know():
            changed_sets = None
        self._reread = False
        layout = (desired.chains, desired.maps)
        same = self._layout is not None and all(map(operator.is_, self._layout, layout))
        script = delta(self._current, desired, changed_sets, same)
        if not script:
            self._layout = layout if self._current is not None else None
            self._desired = desired if self._current is not None else None
            return False
        started = time.perf_counter()
        changes = _element_changes(self._current, desired, script)
        self._writes += 1
        try:
            if changes is not None:
                await self._write_elements(changes)
            else:
                await self._nft.transaction(script)
        except DataplaneWriteError:
            # What the kernel holds is unknown now: the next write replaces the table.
            self._current, self._known, self._layout, self._desired = None, True, None, None
            raise
        finally:
            self._writes += 1
        self._desired = desired
        if same and self._current is not None:
            self._current = attrs.evolve(self._current, sets=dict(desired.sets))
        else:
            self._current = KernelTable.of(desired)
        self._layout = layout
        log.debug(
            "%s %s: %d lines in %.1f ms",
            self.family,
            TABLE,
            script.count("\n"),
            (time.perf_counter() - started) * 1000,
        )
        return True

    async def check(self, attempts: int) -> bool:
        """The refresh beside the applies: read the table back and compare it with the one
        last written; whether it differs (then the next apply reads it again and repairs it;
        logged). Reading a large table takes 0.05-0.1 s, which a label change need not wait
        for. A reading that a write of ours overlapped is taken again; after ``attempts``
        the next apply reads the table itself (an apply that wrote nothing, as another
        area's refresh makes, does not count)."""
        for _ in range(attempts):
            if not self._known or self._desired is None:
                return False
            before = self._writes
            kernel = await self.read()
            if self._writes == before:
                break
        else:
            log.info("%s %s kept changing under its check: re-reading it", self.family, TABLE)
            self._known = False
            return True
        if not self._known or self._desired is None or not delta(kernel, self._desired):
            return False
        log.warning(
            "nft table %s %s no longer holds what was written (another program changed it):"
            " rewriting it",
            self.family,
            TABLE,
        )
        self._known = False
        return True

    async def _write_elements(self, changes: list[ElementChange]) -> None:
        CALLS["nft-set"] += 1
        try:
            await trio.to_thread.run_sync(self._elements.write, changes)
        except KERNEL_ERRORS as exc:
            ERRORS["nft-set"] += 1
            raise DataplaneWriteError(f"nft set elements ({self.family})", str(exc)) from exc

    async def remove(self) -> None:
        """No table (the iptables mode's start, after nftables mode)."""
        if await self.read() is not None:
            log.info("removing nft table %s %s (iptables mode)", self.family, TABLE)
            await self._nft.transaction(f"delete table {self.family} {TABLE}\n")
        self._current, self._known, self._layout, self._desired = None, True, None, None
