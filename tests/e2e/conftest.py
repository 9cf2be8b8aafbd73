"""The ``cluster`` fixture: a node with a server (8080, 9090) and a client workload, and the
base manifests (Felix configuration with 1 s refreshes, health and metrics on, an open
profile, the two workload endpoints) in a fresh datastore directory."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.cluster import CLIENT_IP, MANIFESTS, SERVER_IP, Cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        yield cluster
