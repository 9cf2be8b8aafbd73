"""The one place the synchronous pipeline is wired: validation filter -> calculation graph ->
event sequencer -> a dataplane's ``apply``.

    updates (from a syncer, or converted from resources)
        │
        ▼
    ValidationFilter ── invalid resources become deletions
        │
        ▼
    CalcGraph ── dispatchers, calculators, resolvers
        │
        ▼
    EventSequencer ── dependency-ordered messages, on flush
        │
        ▼
    emit(message)   (the dry-run dataplane, the async loop's buffer, a test's fake, a counter)

``pyfelix run`` (through the async calc loop), ``pyfelix dry-run``, the test harness and every
benchmark build it here, so a new stage or a change of order is made once. The Trio edges (the
syncers, the decoupler, the connector, the driver) stay with their callers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence

import attrs

from pyfelix import messages as m
from pyfelix.calc.graph import CalcGraph, GraphSettings
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.calc.validation_filter import ValidationFilter
from pyfelix.resources import Resource
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.processors import KV, Converter
from pyfelix.validation.kinds import ValidationContext

#: A source converted already, with the (key, value) pairs it stands for.
Produced = tuple[Hashable, tuple[KV, ...]]


@attrs.define(eq=False)
class Pipeline:
    """The stages, built by :func:`build_pipeline`; updates go in at ``validation``."""

    graph: CalcGraph
    #: The first stage: the validation filter, or the graph itself for input already
    #: validated whole (the dry-run refuses any invalid input before computing).
    entry: SyncerCallbacks
    converter: Converter = attrs.Factory(Converter)

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.entry.on_updates(updates)

    def on_status(self, status: SyncStatus) -> None:
        self.entry.on_status(status)

    def flush(self) -> None:
        """Let the deferred calculators emit, then hand the sequencer's messages on."""
        self.graph.flush()

    def work_ahead(self) -> None:
        """The graph's work ahead (``CalcGraph.work_ahead``), while the input is not ready."""
        self.graph.work_ahead()

    def load(self, resources: Iterable[Resource], produced: Iterable[Produced] = ()) -> None:
        """Datastore resources as one snapshot, converted as the syncers convert them, then
        in sync and flushed (the dry-run's and the benchmarks' one-shot computation).
        ``produced``: sources converted already (the loader's direct path), with all each
        stands for."""
        self.add(resources, produced)
        self.finish()

    def add(self, resources: Iterable[Resource], produced: Iterable[Produced] = ()) -> None:
        """Part of a snapshot (``load`` in steps: the dry-run's files as they are loaded)."""
        updates: list[Update] = []
        for resource in resources:
            key = (resource.KIND, resource.namespace, resource.name)
            updates.extend(self.converter.update(key, resource))
        for source, kvs in produced:
            updates.extend(self.converter.produce(source, kvs))
        self.on_updates(updates)

    def finish(self) -> None:
        """The snapshot complete: in sync, and flushed."""
        self.on_status(SyncStatus.IN_SYNC)
        self.flush()


def build_pipeline(
    hostname: str,
    emit: Callable[[m.ToDataplane], None],
    context: ValidationContext | None = None,
    *,
    validated: bool = False,
    settings: GraphSettings = GraphSettings(),  # noqa: B008 (frozen)
) -> Pipeline:
    """The pipeline for ``hostname``, sending each message to ``emit``. With ``validated``, the
    caller has validated every resource it will load (each is validated once, not twice);
    ``settings`` are the start-up configuration's (a change restarts)."""
    graph = CalcGraph(hostname, EventSequencer(emit), settings=settings)
    if validated:
        return Pipeline(graph, graph, Converter(keep_origins=False, remember_every_source=True))
    return Pipeline(graph, ValidationFilter(graph, context or ValidationContext()))
