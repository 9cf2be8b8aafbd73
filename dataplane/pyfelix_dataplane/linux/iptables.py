"""The iptables writer: one table of one IP version, through ``iptables-restore --noflush``.

Each apply reads the table back (``iptables-save``), compares every cali chain's rule ids (the
``cali:`` comments) with the desired chains', and writes one transaction that rewrites only the
chains that differ, adds the hooks from the kernel's chains that are missing (at the top, or at
the end in append mode) and deletes cali chains nobody wants any more. A table is therefore
never half-applied, and anything someone changed behind our back is put right on the next
refresh.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from pyfelix_dataplane.linux.commands import run
from pyfelix_dataplane.rules.model import Chain, Rule

_HASH = re.compile(r'--comment "?cali:([A-Za-z0-9_-]+)"?')
PREFIX = "cali-"


@attrs.frozen
class TableState:
    """What the kernel holds: rule ids per chain (every chain, ours and the kernel's)."""

    chains: Mapping[str, tuple[str, ...]]
    hooks: frozenset[tuple[str, str]]


def parse_save(text: str) -> TableState:
    chains: dict[str, list[str]] = {}
    hooks: set[tuple[str, str]] = set()
    for line in text.splitlines():
        if line.startswith(":"):
            chains.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A "):
            chain = line.split()[1]
            match = _HASH.search(line)
            chains.setdefault(chain, []).append(match.group(1) if match else "")
            jump = re.search(r"-j (cali-\S+)", line)
            if not chain.startswith(PREFIX) and jump:
                hooks.add((chain, jump.group(1)))
    return TableState({k: tuple(v) for k, v in chains.items()}, frozenset(hooks))


@attrs.define
class IptablesWriter:
    """Writes one table for one IP version with one backend ("legacy" or "nft")."""

    table: str
    version: int = 4
    backend: str = "nft"
    insert_mode: str = "insert"

    @property
    def _tool(self) -> str:
        return f"ip{'6' if self.version == 6 else ''}tables-{self.backend}"

    async def read(self) -> TableState:
        return parse_save(await run([f"{self._tool}-save", "-t", self.table]))

    def plan(
        self, state: TableState, chains: Sequence[Chain], hooks: Sequence[tuple[str, str]]
    ) -> str:
        """The restore transaction that takes ``state`` to the desired chains and hooks."""
        wanted = {chain.name: chain for chain in chains}
        changed = [chain for chain in chains if chain.hashes != state.chains.get(chain.name)]
        stale = sorted(
            name for name in state.chains if name.startswith(PREFIX) and name not in wanted
        )
        missing_hooks = [h for h in hooks if h not in state.hooks]
        if not (changed or stale or missing_hooks):
            return ""
        lines = [f"*{self.table}"]
        lines += [f":{chain.name} - [0:0]" for chain in changed]
        lines += [f":{name} - [0:0]" for name in stale]
        for chain in changed:
            lines += chain.lines()
        for kernel_chain, target in reversed(missing_hooks):
            (rule,) = Chain(kernel_chain, (_jump(target),)).lines()
            verb = "-I" if self.insert_mode == "insert" else "-A"
            lines.append(rule.replace("-A ", f"{verb} ", 1))
        lines += [f"-X {name}" for name in stale]
        lines.append("COMMIT")
        return "\n".join(lines) + "\n"

    async def apply(self, chains: Sequence[Chain], hooks: Sequence[tuple[str, str]]) -> str:
        script = self.plan(await self.read(), chains, hooks)
        if script:
            argv = [f"{self._tool}-restore", "--noflush"]
            if self.backend == "legacy":
                argv += ["-w", "10"]
            await run(argv, script)
        return script


def _jump(target: str) -> Rule:
    return Rule(action=f"--jump {target}")


async def detect_backend(configured: str = "auto") -> str:
    """legacy or nft: as configured, else whichever already holds rules (nft by default)."""
    if configured.lower() in ("legacy", "nft"):
        return configured.lower()
    counts = {}
    for backend in ("legacy", "nft"):
        try:
            text = await run([f"iptables-{backend}-save"], check=False)
        except OSError:
            continue
        counts[backend] = sum(1 for line in text.splitlines() if line.startswith("-A"))
    if counts.get("legacy", 0) > counts.get("nft", 0):
        return "legacy"
    return "nft"
