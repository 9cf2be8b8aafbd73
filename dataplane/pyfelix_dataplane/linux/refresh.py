"""When each area of the kernel is read again, and what that reading does to its managers.

Felix re-reads each area on its own period (IptablesRefreshInterval, NftablesRefreshInterval,
IpsetsRefreshInterval, RouteRefreshInterval), so a tampered route is repaired without also
paying for a listing of every table; after a table write it also checks the tables on a
backing-off schedule (IptablesPostWriteCheckIntervalSecs). A due area's managers either
forget what they wrote (their next apply reads the kernel and repairs it), or, for the large
tables, read them back beside the applies (``Checking``) and wake the driver only if
something differs. The driver asks ``Refresher`` what is due and applies; when, and in which
order, stays its business.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

import attrs
import trio

from pyfelix.config import FelixConfig
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.managers import Checking, Refreshed

log = logging.getLogger(__name__)

#: Each area's refresh period, read from the configuration of the moment.
REFRESH_INTERVALS: dict[str, Callable[[FelixConfig], float]] = {
    "iptables": lambda config: config.iptables_refresh_interval,
    "nftables": lambda config: config.nftables_refresh_interval,
    "ipsets": lambda config: config.ipsets_refresh_interval,
    "routes": lambda config: config.route_refresh_interval,
}

#: Felix's post-write checks of the tables: IptablesPostWriteCheckIntervalSecs after a write
#: (at least 50 ms), then twice as long each time, until the interval reaches an hour.
MIN_POST_WRITE = 0.05
MAX_POST_WRITE = 3600.0


@attrs.define(eq=False)
class RefreshSchedule:
    """When each area is next due to be re-read from the kernel.

    Every area is due on the first apply; an interval of 0 disables that area's refresh.
    After a write the table area is also due on Felix's post-write checks (another program
    clobbering what was just written is found within seconds, not at the refresh).
    """

    _due_at: dict[str, float] = attrs.Factory(lambda: dict.fromkeys(REFRESH_INTERVALS, 0.0))
    _last_write: float = 0.0
    _post_write: float = MAX_POST_WRITE

    def next_due(self) -> float:
        return min(*self._due_at.values(), self._post_write_at())

    def _post_write_at(self) -> float:
        if self._post_write >= MAX_POST_WRITE:
            return math.inf
        return self._last_write + self._post_write

    def wrote_tables(self, now: float, config: FelixConfig) -> None:
        self._last_write = now
        self._post_write = max(config.iptables_post_write_check_interval, MIN_POST_WRITE)

    def take_due(self, now: float, config: FelixConfig) -> frozenset[str]:
        due = {area for area, when in self._due_at.items() if when <= now}
        for area in due:
            interval = REFRESH_INTERVALS[area](config)
            self._due_at[area] = now + interval if interval > 0 else math.inf
        if self._post_write_at() <= now:
            due.add("iptables")
            while self._post_write_at() <= now:
                self._post_write *= 2
        return frozenset(due)

    def make_all_due(self, now: float) -> None:
        for area in self._due_at:
            self._due_at[area] = now


@attrs.define(eq=False)
class Refresher:
    """Applies the schedule to the managers: forgets, or checks beside the applies."""

    #: Wakes the driver's loop: a check found something to repair.
    wake: Callable[[], None]
    schedule: RefreshSchedule = attrs.Factory(RefreshSchedule)
    #: The areas whose check is running (one at a time each).
    _checking: set[str] = attrs.Factory(set)

    def next_due(self) -> float:
        return self.schedule.next_due()

    def refresh(
        self, managers: Iterable[Refreshed], nursery: trio.Nursery, config: FelixConfig
    ) -> bool:
        """Act on the areas now due; whether a manager forgot what it wrote (the next apply
        then has work to do)."""
        due = self.schedule.take_due(trio.current_time(), config)
        invalidated = False
        for manager in managers:
            if manager.area not in due:
                continue
            if isinstance(manager, Checking) and manager.written:
                if manager.area not in self._checking:
                    self._checking.add(manager.area)
                    nursery.start_soon(self._check, manager)
            else:
                manager.invalidate()
                invalidated = True
        return invalidated

    async def _check(self, manager: Checking) -> None:
        try:
            repair = await manager.check()
        except DataplaneWriteError as exc:
            log.warning("cannot read the %s back (%s): rewriting them", manager.area, exc)
            manager.invalidate()
            repair = True
        finally:
            self._checking.discard(manager.area)
        if repair:
            self.wake()

    def applied(self, wrote_tables: bool, config: FelixConfig) -> None:
        if wrote_tables:
            self.schedule.wrote_tables(trio.current_time(), config)

    def failed(self) -> None:
        """After a failed apply every area is read again."""
        self.schedule.make_all_due(trio.current_time())
