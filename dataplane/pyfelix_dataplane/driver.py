"""The contract between the agent and a dataplane driver (the Linux driver, or the printing
driver of ``pyfelix run --dry-run``): the agent starts it, feeds it the calculation graph's
messages, and reads what it reports back, and never needs to know which one it runs."""

from __future__ import annotations

from typing import Protocol

import trio

from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix.stats import DataplaneStats

#: Where a driver sends what it reports (DataplaneInSync, status, WireGuard keys).
ToCalc = trio.MemorySendChannel[m.FromDataplane]


class DataplaneDriver(Protocol):
    to_calc: ToCalc
    #: Counts and timings for Felix's metrics.
    stats: DataplaneStats
    #: The configuration the agent starts with, before the datastore's arrives (a driver
    #: may probe the kernel with it).
    startup_config: FelixConfig | None
    #: Set once the first apply's tables are with the kernel's tools (the agent's health and
    #: metrics servers wait for it, at most a while); set from the start by a driver that
    #: writes nothing.
    writing: trio.Event

    async def apply(self, msg: m.ToDataplane) -> None: ...

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None: ...
