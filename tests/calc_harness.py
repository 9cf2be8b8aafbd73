"""Drive the whole calculation graph from datastore states into a strict fake dataplane."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix.calc.graph import CalcGraph
from pyfelix.calc.pipeline import Pipeline, build_pipeline
from pyfelix.resources import Resource, load_paths, load_text
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.processors import Converter
from pyfelix.validation import ValidationContext
from tests.conftest import REPO
from tests.fake_dataplane import StrictDataplane

Identity = tuple[str, str, str]
State = Mapping[Identity, Resource]


def example_state() -> dict[Identity, Resource]:
    result = load_paths([REPO / "examples"])
    assert result.ok, result.problems
    return {item.key: item.resource for item in result.resources}


def identity(resource: Resource) -> Identity:
    return (resource.KIND, resource.namespace, resource.name)


@attrs.define
class Harness:
    hostname: str = "node-a"
    dataplane: StrictDataplane = attrs.Factory(StrictDataplane)
    current: dict[Identity, Resource] = attrs.Factory(dict)
    pipeline: Pipeline = attrs.field(init=False)
    in_sync_sent: bool = False

    def __attrs_post_init__(self) -> None:
        self.pipeline = build_pipeline(
            self.hostname, self.dataplane.apply, ValidationContext("Any")
        )

    @property
    def graph(self) -> CalcGraph:
        return self.pipeline.graph

    @property
    def converter(self) -> Converter:
        return self.pipeline.converter

    def diff(self, state: State) -> list[Update]:
        """The updates that move the datastore from the current state to ``state``."""
        updates = []
        for key in list(self.current) + [k for k in state if k not in self.current]:
            if self.current.get(key) != state.get(key):
                updates.extend(self.converter.update(key, state.get(key)))
        self.current = dict(state)
        return updates

    def feed(self, updates: Iterable[Update], flush_every: int = 0) -> None:
        batch: list[Update] = []
        for update in updates:
            batch.append(update)
            if flush_every and len(batch) >= flush_every:
                self.pipeline.on_updates(batch)
                batch = []
                self.flush()
        if batch:
            self.pipeline.on_updates(batch)

    def flush(self) -> None:
        self.graph.flush()
        if self.graph.in_sync and not self.in_sync_sent:
            self.in_sync_sent = True
            self.dataplane.apply(m.InSync())

    def in_sync(self) -> None:
        self.pipeline.on_status(SyncStatus.IN_SYNC)

    def run(self, state: State) -> dict[str, Any]:
        """Snapshot, in sync, flush: the view of ``state`` applied on its own."""
        self.feed(self.diff(state))
        self.in_sync()
        self.flush()
        return self.dataplane.view()


def final_view(state: State, hostname: str = "node-a") -> dict[str, Any]:
    return Harness(hostname).run(state)


Mutation = Callable[[dict[Identity, Resource]], None]


def mutate(state: State, *changes: Mutation) -> dict[Identity, Resource]:
    out = dict(state)
    for change in changes:
        change(out)
    return out


def load_manifest(text: str) -> Resource:
    (item,) = load_text(text).resources
    return item.resource
