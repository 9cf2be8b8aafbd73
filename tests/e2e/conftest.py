"""The ``cluster`` fixture: a node with a server (8080, 9090) and a client workload, and the
base manifests (Felix configuration with 1 s refreshes, health and metrics on, an open
profile, the two workload endpoints) in a fresh datastore directory.

Every agent runs in the dataplane mode of ``dataplane_mode`` (FELIX_NFTABLESMODE, as an
operator would set it): the iptables mode, and for tests marked ``both_modes`` (what they
observe is the same in either) the nftables mode too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.cluster import AGENT_LOGS, CLIENT_IP, MANIFESTS, SERVER_IP, Cluster

#: Lines of each agent's log a failed test shows.
LOG_TAIL = 80


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the last lines of each agent's log: a verdict that
    never came is then explained by what the agent said (a write it retried, an error)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for log in AGENT_LOGS:
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
                report.sections.append((f"agent log {log.name}", "\n".join(tail)))
    if report.when == "teardown":
        AGENT_LOGS.clear()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    given = any(
        "dataplane_mode" in str(mark.args[0])
        for mark in metafunc.definition.iter_markers("parametrize")
    )
    if "dataplane_mode" in metafunc.fixturenames and not given:
        both = metafunc.definition.get_closest_marker("both_modes") is not None
        modes = ("iptables", "nftables") if both else ("iptables",)
        metafunc.parametrize("dataplane_mode", modes, indirect=True)


@pytest.fixture(autouse=True)
def dataplane_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode = str(getattr(request, "param", "iptables"))
    monkeypatch.setenv("FELIX_NFTABLESMODE", "Enabled" if mode == "nftables" else "Disabled")
    return mode


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        yield cluster
