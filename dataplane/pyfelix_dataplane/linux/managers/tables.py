"""The iptables tables of each IP version: rendered from the state, planned against the kernel,
written as one restore per version (a transaction per table), and checked against the kernel
beside the applies (``check``)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import attrs
import trio

from pyfelix_dataplane.linux.iptables import Script
from pyfelix_dataplane.linux.kernel import TableWriting
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import HOOKS, TABLES, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.state import NodeState

Tables = dict[str, tuple[Chain, ...]]


@attrs.define(eq=False)
class TablesManager:
    writers: Mapping[int, TableWriting]
    area: str = "iptables"
    # What the last successful writes left in each table, so steady state writes only the
    # tables that changed.
    _written: dict[tuple[int, str], tuple[Chain, ...]] = attrs.Factory(dict)
    _rendered: tuple[Hashable, dict[int, dict[str, tuple[Chain, ...]]]] | None = None
    #: The rules kept at the end of kernel chains, per table (the same in every version).
    _appends: dict[str, tuple[Chain, ...]] = attrs.Factory(dict)
    #: Counts each write's start and end: a reading that one overlapped proves nothing.
    _writes: int = 0

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(self.writers)

    @property
    def written(self) -> bool:
        """Whether any table is known written (a check has something to compare)."""
        return bool(self._written)

    def invalidate(self) -> None:
        self._written.clear()

    def render(
        self, rendering: NodeState, key: Hashable
    ) -> dict[int, dict[str, tuple[Chain, ...]]]:
        """Every version's chains; rendered again only when ``key`` (what the chains depend
        on: the state's rules generation and the host endpoints' placement) changed."""
        if self._rendered is None or self._rendered[0] != key:
            settings = Settings.from_config(rendering.config)
            chains = {
                version: render_chains(rendering, version, settings) for version in self.versions
            }
            self._rendered = (key, chains)
            self._appends = kernel_appends(settings)
        return self._rendered[1]

    async def plan(
        self, version: int, chains: Mapping[str, tuple[Chain, ...]]
    ) -> tuple[Script, Tables]:
        """The restore script for the tables of ``version`` that changed since last written."""
        desired = {}
        for table in TABLES:
            if self._written.get((version, table)) == chains[table]:
                continue
            appends = self._appends.get(table, ())
            desired[table] = (chains[table], HOOKS[table], appends)
        writer = self.writers[version]
        script = await writer.prepare(desired) if desired else Script()
        return script, {table: chains[table] for table in desired}

    async def write(self, version: int, script: Script, tables: Tables) -> None:
        if script:
            self._writes += 1
            try:
                await self.writers[version].write(script)
            finally:
                self._writes += 1
        for table, chains in tables.items():
            self._written[(version, table)] = chains

    async def check(self) -> list[str]:
        """The refresh and Felix's post-write checks without holding up the applies: every
        table written is read back (each version in one save, the versions at once) and each
        one that differs is forgotten, so the next apply rewrites it; returns those. Reading
        a large node's tables takes 0.1-0.3 s, which a label change (an IP set member, no
        table written) need not wait for. A reading overlapped by a write of ours is dropped:
        that write has post-write checks of its own."""
        before = self._writes
        written = dict(self._written)
        versions = sorted({version for version, _ in written})
        found: dict[int, set[str]] = {}

        async def read(version: int) -> None:
            desired = {
                table: (chains, HOOKS[table], self._appends.get(table, ()))
                for (v, table), chains in written.items()
                if v == version
            }
            found[version] = await self.writers[version].differing(desired)

        async with trio.open_nursery() as nursery:
            for version in versions:
                nursery.start_soon(read, version)
        if self._writes != before:
            return []
        stale = [
            (version, table)
            for version in versions
            for table in sorted(found[version])
            if self._written.get((version, table)) is written[(version, table)]
        ]
        for key in stale:
            del self._written[key]
        return [f"the IPv{version} {table} table" for version, table in stale]
