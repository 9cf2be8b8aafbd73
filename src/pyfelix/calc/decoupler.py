"""The decoupler: a per-key coalescing buffer between the syncer and the calculation graph.

The syncer pushes without ever blocking (``on_updates``/``on_status``); the calc loop pulls with
``await get()``. Memory is bounded by the number of distinct keys, never by the number of
events: a later update for a queued key replaces it in place (keeping its place in the queue,
the order of first arrival), and a delete of a key the consumer never saw cancels it outright.
A status is delivered only after every update queued before it, so IN_SYNC never overtakes the
snapshot it closes; consecutive statuses coalesce to the latest.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import trio

from pyfelix.syncer.api import SyncStatus, Update

# The seed's calc graph consumes updates in batches of at most 100, trading per-batch overhead
# against latency for the first updates of a big snapshot.
MAX_BATCH = 100

Delivery = tuple[Update, ...] | SyncStatus


class Decoupler:
    """Coalescing hand-off; one producer (the syncer), one consumer (the calc loop)."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self._max_batch = max_batch
        self._queued: dict[Hashable, tuple[int, Update]] = {}
        self._live: set[Hashable] = set()
        self._status: tuple[int, SyncStatus] | None = None
        self._seq = itertools.count()
        self._lot = trio.lowlevel.ParkingLot()

    def on_updates(self, updates: Sequence[Update]) -> None:
        for update in updates:
            queued = self._queued.get(update.key)
            if update.value is None and update.key not in self._live:
                # Never delivered as present: nothing downstream to delete.
                self._queued.pop(update.key, None)
            elif queued is not None:
                self._queued[update.key] = (queued[0], update)
            else:
                self._queued[update.key] = (next(self._seq), update)
        self._lot.unpark_all()

    def on_status(self, status: SyncStatus) -> None:
        self._status = (next(self._seq), status)
        self._lot.unpark_all()

    @property
    def queued_keys(self) -> int:
        return len(self._queued)

    def poll(self) -> Delivery | None:
        """The next batch or status if one is ready, without waiting."""
        if self._status is not None:
            status_seq, status = self._status
            first = next(iter(self._queued.values()), None)
            if first is None or first[0] > status_seq:
                self._status = None
                return status
        if not self._queued:
            return None
        batch: list[Update] = []
        for key in list(itertools.islice(self._queued, self._max_batch)):
            seq, update = self._queued[key]
            if self._status is not None and seq > self._status[0]:
                break
            del self._queued[key]
            batch.append(update)
            if update.value is None:
                self._live.discard(key)
            else:
                self._live.add(key)
        return tuple(batch)

    async def get(self) -> Delivery:
        """The next batch (at most ``max_batch`` updates) or status, waiting if there is none."""
        while True:
            delivery = self.poll()
            if delivery is not None:
                return delivery
            await self._lot.park()
