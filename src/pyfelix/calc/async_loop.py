"""The async calc loop (the seed's AsyncCalcGraph): decoupler -> validation filter -> graph ->
sequencer, flushed through a leaky bucket, out to the connector's channel.

Updates are applied as soon as they arrive; flushes are rate limited (a token every 10 ms, at
most 10 saved up), so a storm of updates coalesces in the sequencer's per-key buffers instead of
reaching the dataplane one by one. InSync is sent once, after the first flush that follows the
datastore's IN_SYNC. Health goes to the aggregator as Felix's CalculationGraph reports it: live
after every delivery and every HEALTH_INTERVAL while idle (so an idle agent stays live and a
stuck loop does not), ready once the datastore is in sync.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

import attrs
import trio

from pyfelix import collection
from pyfelix import messages as m
from pyfelix.calc.decoupler import Decoupler
from pyfelix.calc.graph import CalcGraph, GraphSettings
from pyfelix.calc.pipeline import Pipeline, build_pipeline
from pyfelix.health import CALC_GRAPH, CALC_GRAPH_TIMEOUT, HEALTH_INTERVAL, HealthAggregator
from pyfelix.stats import Observations
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.throttle import LeakyBucket
from pyfelix.validation.kinds import ValidationContext

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.010
BUCKET_SIZE = 10


async def _resume_collection_late() -> None:
    await trio.sleep(collection.STARTUP_PAUSE)
    collection.resume()


@attrs.define(eq=False)
class CalcLoop:
    """The calculation graph's Trio edge, as Felix's AsyncCalcGraph: takes the decoupler's
    batches, feeds the pipeline, and flushes its messages to the dataplane through a leaky
    bucket; reports the graph's health and counts for the metrics."""

    hostname: str
    source: Decoupler
    output: trio.MemorySendChannel[m.Flush]
    context: ValidationContext = attrs.Factory(ValidationContext)
    #: What the graph is built with, from the start-up configuration.
    settings: GraphSettings = attrs.Factory(GraphSettings)
    pipeline: Pipeline = attrs.field(init=False)
    bucket: LeakyBucket = attrs.Factory(lambda: LeakyBucket(FLUSH_INTERVAL, BUCKET_SIZE))
    health: HealthAggregator = attrs.Factory(HealthAggregator)
    #: True from the first flush after the datastore's IN_SYNC.
    ready: bool = False
    #: For Felix's metrics: updates by key type, the time each batch took, the syncer's last
    #: status and how often a resync started.
    updates_processed: Counter[str] = attrs.Factory(Counter)
    update_times: Observations = attrs.Factory(Observations)
    sync_status: SyncStatus = SyncStatus.WAIT_FOR_DATASTORE
    resyncs_started: int = 0
    messages_emitted: int = 0
    flushes: int = 0
    _pending: list[m.ToDataplane] = attrs.Factory(list)
    _datastore_in_sync: bool = False
    _in_sync_sent: bool = False

    def __attrs_post_init__(self) -> None:
        self.pipeline = build_pipeline(
            self.hostname, self._pending.append, self.context, settings=self.settings
        )
        self.health.register(CALC_GRAPH, timeout=CALC_GRAPH_TIMEOUT)

    def _report_health(self) -> None:
        self.health.report(CALC_GRAPH, live=True, ready=self._datastore_in_sync)

    def _apply(self, delivery: tuple[Update, ...] | SyncStatus) -> None:
        if isinstance(delivery, SyncStatus):
            if delivery is SyncStatus.IN_SYNC:
                self._datastore_in_sync = True
            elif delivery is SyncStatus.RESYNC_IN_PROGRESS:
                self.resyncs_started += 1
            self.sync_status = delivery
            self.pipeline.on_status(delivery)
        else:
            started = time.perf_counter()
            self.pipeline.on_updates(delivery)
            self.update_times.observe(time.perf_counter() - started)
            self.updates_processed.update(type(update.key).__name__ for update in delivery)
        # Felix reports after every update: a snapshot that takes minutes to load is progress.
        self._report_health()

    @property
    def graph(self) -> CalcGraph:
        return self.pipeline.graph

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Loading the snapshot creates a large heap of long-lived objects, and the cyclic
        # collector, triggered by allocations, walked it again and again (over half of the
        # time to InSync for 10k endpoints). It is paused until InSync, when the snapshot is
        # frozen; or until the start-up pause ends if InSync is late.
        collection.pause_while_loading()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_resume_collection_late)
                task_status.started()
                while True:
                    self._report_health()
                    delivery = None
                    with trio.move_on_after(HEALTH_INTERVAL):
                        delivery = await self.source.get()
                    if delivery is None:
                        continue
                    self._apply(delivery)
                    await self.bucket.take()
                    while (delivery := self.source.poll()) is not None:
                        self._apply(delivery)
                    await self._flush()
        finally:
            collection.resume()

    async def _flush(self) -> None:
        self.pipeline.flush()
        self.flushes += 1
        if self._datastore_in_sync and not self._in_sync_sent:
            self._in_sync_sent = True
            self._pending.append(m.InSync())
            self.ready = True
            self._report_health()
            # The snapshot is long-lived: move it out of the collector's reach, so full
            # collections do not walk it again and again (they stall every update otherwise).
            # No collection first: it took 80 ms of the start at 10k endpoints to find a few
            # dozen objects of garbage, which stay frozen.
            collection.settle_after_in_sync()
        messages = tuple(self._pending)
        self._pending.clear()
        if messages:
            log.debug("flush %d: %d messages to the dataplane", self.flushes, len(messages))
            await self.output.send(messages)
        self.messages_emitted += len(messages)
