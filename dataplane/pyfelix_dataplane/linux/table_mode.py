"""The two ways a node's tables are written, behind one interface the driver orders.

The iptables mode writes the IP sets through ``ipset restore`` first, then each IP version's
tables through ``iptables-restore``, rendering one version while the one before is written,
and destroys the sets no longer wanted once no rule names them. The nftables mode writes one
transaction per version holding the sets and the chains that name them. The driver starts a
mode's writes, starts the routing beside them, and waits; it knows nothing of either mode.
What each writes, and how it reads the kernel back, is its managers' business.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from pyfelix import messages as m
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.managers import Refreshed
from pyfelix_dataplane.linux.managers.ipsets import IpsetsManager
from pyfelix_dataplane.linux.managers.tables import TableReading, TablesManager
from pyfelix_dataplane.state import NodeState

if TYPE_CHECKING:
    from pyfelix_dataplane.linux.managers.nftables import NftablesManager
    from pyfelix_dataplane.linux.nftables import KernelTable
    from pyfelix_dataplane.linux.reading import Reading
    from pyfelix_dataplane.rules.nft import NftTable

#: Starts a write in the driver's nursery under an area's name: returns once the write ran
#: up to its first wait (its tool started); a failure is the driver's to collect.
StartArea = Callable[[Callable[[], Awaitable[None]], str], Awaitable[None]]
#: Records a point of the apply's timeline (the apply's Info or Debug line).
Mark = Callable[[str], None]


class TableMode(Protocol):
    def managers(self) -> tuple[Refreshed, ...]:
        """The managers whose areas a refresh may find due."""
        ...

    def on_update(self, msg: m.ToDataplane) -> None:
        """Felix's first verb, for the mode's managers (which sets changed)."""
        ...

    def adopt(
        self,
        tables: Mapping[int, TableReading],
        nftables: Mapping[int, Reading[KernelTable | None]],
    ) -> None:
        """Readings made at start-up, before the mode existed (each mode takes its own)."""
        ...

    async def start(
        self,
        nursery: trio.Nursery,
        rendering: NodeState,
        placement: Hashable,
        start_area: StartArea,
        mark: Mark,
    ) -> None:
        """Render every version from ``rendering`` and start its write; return once every
        version's write has started (the routing may start then, not before: its thread
        would take the GIL from the rendering)."""
        ...

    async def finish(self, failed: list[DataplaneWriteError]) -> bool:
        """After every write ended: put the mode's own failures first in ``failed``; if none
        failed, clean up; whether any table was written."""
        ...


@attrs.define(eq=False)
class IptablesMode:
    ipsets: IpsetsManager
    tables: TablesManager
    #: This apply's failures of the sets' write, then of planning a version's tables.
    _failed: list[DataplaneWriteError] = attrs.Factory(list)
    _wrote: bool = False

    def managers(self) -> tuple[Refreshed, ...]:
        return (self.ipsets, self.tables)

    def on_update(self, msg: m.ToDataplane) -> None:
        self.ipsets.on_update(msg)

    def adopt(
        self,
        tables: Mapping[int, TableReading],
        nftables: Mapping[int, Reading[KernelTable | None]],
    ) -> None:
        self.tables.adopt(tables)

    async def start(
        self,
        nursery: trio.Nursery,
        rendering: NodeState,
        placement: Hashable,
        start_area: StartArea,
        mark: Mark,
    ) -> None:
        """The first apply reads every version's tables at its start, beside the rendering
        (``TablesManager.read_ahead``). The sets' tool runs while the first version is
        rendered and planned; no table is written before the sets are (the rules would name
        missing sets: none is, if they failed). Each version is rendered while the one before
        is written: from a copy, as the messages arriving meanwhile change the state."""
        self._failed, self._wrote = [], False
        self.tables.read_ahead(nursery)
        self.ipsets.desired()
        if not self.tables.rendered(placement):
            rendering = rendering.snapshot()
        sets_written = trio.Event()

        async def write_sets() -> None:
            try:
                await self.ipsets.complete_deferred_work()
            except DataplaneWriteError as exc:
                self._failed.append(exc)
            finally:
                mark("ipsets")
                sets_written.set()

        nursery.start_soon(write_sets)
        failed: list[DataplaneWriteError] = []
        for version in self.tables.versions:
            chains = self.tables.render(rendering, placement, version)
            mark(f"IPv{version} rendered")
            try:
                script, tables = await self.tables.plan(version, chains)
            except DataplaneWriteError as exc:
                failed.append(exc)
                continue
            mark(f"IPv{version} planned")
            await sets_written.wait()
            if self._failed:
                break
            self._wrote = self._wrote or bool(script)
            # The write starts its tool (on the other core) before the next version renders.
            await start_area(
                partial(self.tables.write, version, script, tables), f"IPv{version} written"
            )
        self._failed.extend(failed)

    async def finish(self, failed: list[DataplaneWriteError]) -> bool:
        failed[:0] = self._failed
        if failed:
            return False
        await self.ipsets.clean_up()
        return self._wrote


@attrs.define(eq=False)
class NftablesMode:
    nftables: NftablesManager
    _wrote: list[bool] = attrs.Factory(list)

    def managers(self) -> tuple[Refreshed, ...]:
        return (self.nftables,)

    def on_update(self, msg: m.ToDataplane) -> None:
        self.nftables.on_update(msg)

    def adopt(
        self,
        tables: Mapping[int, TableReading],
        nftables: Mapping[int, Reading[KernelTable | None]],
    ) -> None:
        self.nftables.adopt(nftables)

    async def start(
        self,
        nursery: trio.Nursery,
        rendering: NodeState,
        placement: Hashable,
        start_area: StartArea,
        mark: Mark,
    ) -> None:
        """One transaction per version holds the sets and the chains that name them. A write
        builds its transaction and hands it to libnftables, whose work (no GIL held) then
        overlaps the next version's rendering."""
        self._wrote = []
        await self.nftables.read_unknown()
        for version, table in self.nftables.render(rendering, placement):
            mark(f"IPv{version} rendered")

            async def write(version: int = version, table: NftTable = table) -> None:
                self._wrote.append(await self.nftables.write(version, table))

            await start_area(write, f"IPv{version} written")

    async def finish(self, failed: list[DataplaneWriteError]) -> bool:
        return any(self._wrote)
