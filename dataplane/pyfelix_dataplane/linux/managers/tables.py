"""The iptables tables of each IP version: rendered from the state, planned against the kernel,
written as one restore per version (a transaction per table), and checked against the kernel
beside the applies (``check``)."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from functools import partial

import attrs
import trio

from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.linux.iptables import Desired, Script, TableState
from pyfelix_dataplane.linux.kernel import TableReader, TableWriting
from pyfelix_dataplane.linux.managers import CHECK_ATTEMPTS
from pyfelix_dataplane.linux.reading import Reading, start_reading
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import HOOKS, TABLES, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)

Tables = dict[str, tuple[Chain, ...]]


#: A version's tables read ahead of its plan.
TableReading = Reading[Mapping[str, TableState]]


def read_tables(
    readers: Mapping[int, TableReader], nursery: trio.Nursery
) -> dict[int, TableReading]:
    """Each version's tables read in the background (the versions at once), for a plan to
    take when it comes (``TablesManager.adopt``, ``TablesManager.read_ahead``)."""
    return {
        version: start_reading(partial(reader.read, TABLES), nursery, f"IPv{version} tables")
        for version, reader in readers.items()
    }


@attrs.define(eq=False)
class TablesManager:
    writers: Mapping[int, TableWriting]
    #: Where the chains and rules written are counted, for the metrics.
    stats: DataplaneStats | None = None
    area: str = "iptables"
    # What the last successful writes left in each table, so steady state writes only the
    # tables that changed.
    _written: dict[tuple[int, str], tuple[Chain, ...]] = attrs.Factory(dict)
    #: Per IP version, the key its chains were rendered for, and the chains.
    _rendered: dict[int, tuple[Hashable, Tables]] = attrs.Factory(dict)
    #: The rules kept at the end of kernel chains, per table (the same in every version).
    _appends: dict[str, tuple[Chain, ...]] = attrs.Factory(dict)
    #: Counts each write's start and end: a reading that one overlapped proves nothing.
    _writes: int = 0
    #: This apply's readings ahead of the plans, per version (``read_ahead``).
    _ahead: dict[int, TableReading] = attrs.Factory(dict)
    #: Readings made before this manager was (``adopt``), for the first apply's plans.
    _adopted: dict[int, TableReading] = attrs.Factory(dict)
    #: What each table holds as far as this manager knows (read, then kept up to date with
    #: what it wrote): a plan starts from it rather than reading the table back, as Felix
    #: keeps the hashes it wrote. A refresh, a failed write or a check that found the
    #: table changed forgets it.
    _kernel: dict[tuple[int, str], TableState] = attrs.Factory(dict)
    #: Per version, what its planned write leaves in each table (``write`` keeps it).
    _planned: dict[int, dict[str, TableState]] = attrs.Factory(dict)

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(self.writers)

    @property
    def written(self) -> bool:
        """Whether any table is known written (a check has something to compare)."""
        return bool(self._written)

    def invalidate(self) -> None:
        self._written.clear()
        self._kernel.clear()

    def adopt(self, readings: Mapping[int, TableReading]) -> None:
        """Readings of this manager's versions made before it existed (the driver reads a
        restarted node's tables while the snapshot loads): the next apply plans from them
        instead of reading again. Only that apply: a later one reads for itself."""
        self._adopted = {v: reading for v, reading in readings.items() if v in self.writers}

    def read_ahead(self, nursery: trio.Nursery) -> None:
        """At an apply's start, read the tables of each version none of whose tables is known
        written (its plan needs them all: the first apply, or after ``invalidate``) in the
        background: beside the rendering, and before the other version's restore, which
        slowed such a read from 4 to 25-35 ms (both tools wait on the kernel's table lock).
        A version with an adopted reading takes that instead. The readings serve this apply's
        plans only."""
        known = {version for version, _ in self._written}
        adopted, self._adopted = self._adopted, {}
        unread = [v for v in self.versions if v not in known and v not in adopted]
        self._ahead = read_tables({v: self.writers[v] for v in unread}, nursery)
        self._ahead.update((v, r) for v, r in adopted.items() if v not in known)

    def rendered(self, key: Hashable) -> bool:
        """Whether every version's chains for ``key`` are rendered already."""
        return all(self._rendered.get(v, (None,))[0] == key for v in self.versions)

    def render(self, rendering: NodeState, key: Hashable, version: int) -> Tables:
        """One version's chains, rendered again only when ``key`` (what the chains depend on:
        the state's rules generation and the host endpoints' placement) changed. One version at
        a time, so that the first one's restore runs while the next one is rendered."""
        cached = self._rendered.get(version)
        if cached is None or cached[0] != key:
            settings = Settings.for_node(rendering)
            cached = self._rendered[version] = (key, render_chains(rendering, version, settings))
            self._appends = kernel_appends(settings)
        return cached[1]

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
        reading = self._ahead.pop(version, None)
        if not desired:
            return Script(), {}
        writer = self.writers[version]
        states = None
        if reading is not None:
            await reading.done.wait()
            states = reading.value
        if states is None:
            states = self._known(version, desired) or await writer.read(desired.keys())
        script = await writer.prepare(desired, states)
        self._planned[version] = {
            table: writer.after(table, states[table], *wanted) for table, wanted in desired.items()
        }
        return script, {table: chains[table] for table in desired}

    def _known(self, version: int, desired: Mapping[str, Desired]) -> dict[str, TableState] | None:
        """What the tables hold, if known for every desired table and no kernel chain is to
        be rewritten (that deletes by positions other programs' rules move: read first)."""
        known = {table: self._kernel.get((version, table)) for table in desired}
        writer = self.writers[version]
        if any(
            state is None or writer.rewrites(state, hooks, appends)
            for (_, hooks, appends), state in zip(desired.values(), known.values(), strict=True)
        ):
            return None
        return {table: state for table, state in known.items() if state is not None}

    async def write(self, version: int, script: Script, tables: Tables) -> None:
        planned = self._planned.pop(version, {})
        if script:
            if self.stats is not None:
                for table, lines in script.lines_by_table().items():
                    self.stats.lines_executed[(version, table)] += lines
            self._writes += 1
            try:
                await self.writers[version].write(script)
            except BaseException:
                # What the tables hold is unknown now: the next plan reads them.
                for table in TABLES:
                    self._kernel.pop((version, table), None)
                raise
            finally:
                self._writes += 1
        for table, state in planned.items():
            self._kernel[(version, table)] = state
        for table, chains in tables.items():
            self._written[(version, table)] = chains
            if self.stats is not None:
                rules = sum(len(chain.rules) for chain in chains)
                self.stats.tables[(version, table)] = (len(chains), rules)

    async def check(self) -> bool:
        """The refresh and Felix's post-write checks without holding up the applies: every
        table written is read back (each version in one save, the versions at once) and each
        one that differs is forgotten, so the next apply rewrites it. Reading a large node's
        tables takes 0.1-0.3 s, which a label change (an IP set member, no table written)
        need not wait for. A reading that a write of ours overlapped is taken again; after
        CHECK_ATTEMPTS such readings everything is forgotten (the next apply reads the tables
        itself). Whether the next apply has something to repair."""
        for _ in range(CHECK_ATTEMPTS):
            before = self._writes
            written = dict(self._written)
            found = await self._differing(written)
            if self._writes == before:
                break
        else:
            log.info("the iptables tables kept changing under their check: re-reading them")
            self.invalidate()
            return True
        stale = [
            (version, table)
            for (version, table), chains in written.items()
            if table in found[version] and self._written.get((version, table)) is chains
        ]
        for version, table in sorted(stale):
            log.warning(
                "the IPv%d %s table no longer holds what was written (another program changed"
                " it): rewriting it",
                version,
                table,
            )
            del self._written[(version, table)]
            self._kernel.pop((version, table), None)
        return bool(stale)

    async def _differing(
        self, written: Mapping[tuple[int, str], tuple[Chain, ...]]
    ) -> dict[int, set[str]]:
        """Per version, the tables of ``written`` the kernel no longer holds as written."""
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
        return found
