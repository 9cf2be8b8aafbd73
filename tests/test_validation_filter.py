"""The validation filter: invalid values become deletions with one warning; the rest and
statuses pass through untouched."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pytest

from pyfelix.calc.validation_filter import ValidationFilter
from pyfelix.resources import KINDS
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.processors import convert
from pyfelix.validation import ValidationContext
from tests.test_resources import document


@attrs.define
class Recorder:
    updates: list[Update] = attrs.Factory(list)
    statuses: list[SyncStatus] = attrs.Factory(list)

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.updates.extend(updates)

    def on_status(self, status: SyncStatus) -> None:
        self.statuses.append(status)


def updates_for(doc: dict[str, object]) -> list[Update]:
    resource = KINDS[str(doc["kind"])].from_manifest(doc)
    return [Update(k, v) for k, v in convert(resource)]


def test_invalid_resource_becomes_deletions(caplog: pytest.LogCaptureFixture) -> None:
    """Every key of an invalid resource is forwarded as None, with one warning naming it."""
    bad = document("Node", "node-a")
    bad["spec"]["ipv4VXLANTunnelAddr"] = "not-an-ip"
    good = document("Tier", "ok")
    recorder = Recorder()
    stage = ValidationFilter(recorder)
    incoming = updates_for(bad)
    stage.on_updates(incoming + updates_for(good))
    node_updates = [u for u in recorder.updates if "node-a" in str(u.key)]
    assert node_updates
    assert all(u.value is None for u in node_updates)
    assert [u.value is not None for u in recorder.updates if "ok" in str(u.key)] == [True]
    assert stage.rejected == sum(u.value is not None for u in incoming)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "invalid Node/node-a treated as absent: spec.ipv4VXLANTunnelAddr: "
        "invalid IP address 'not-an-ip'"
    ]


def test_workload_spoofing_depends_on_configuration() -> None:
    """allowSpoofedSourcePrefixes passes only when the filter's config allows spoofing."""
    recorder = Recorder()
    ValidationFilter(recorder).on_updates(updates_for(document("WorkloadEndpoint")))
    assert [u.value for u in recorder.updates] == [None]
    allowed = Recorder()
    ValidationFilter(allowed, ValidationContext("Any")).on_updates(
        updates_for(document("WorkloadEndpoint"))
    )
    assert allowed.updates[0].value is not None


def test_status_and_deletions_pass_through() -> None:
    """Statuses and deletions are forwarded unchanged and never counted as rejections."""
    recorder = Recorder()
    stage = ValidationFilter(recorder)
    stage.on_status(SyncStatus.IN_SYNC)
    stage.on_updates([Update("k", None)])
    assert recorder.statuses == [SyncStatus.IN_SYNC]
    assert recorder.updates == [Update("k", None)]
    assert stage.rejected == 0
