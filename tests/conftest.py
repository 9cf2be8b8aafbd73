"""Shared fixtures and the rules for tests that need root.

Tests marked ``netns`` need root. Outside CI they are skipped for a non-root developer; in CI
(``CI`` set) a missing privilege is a failure, never a skip.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import vm
from tests.etcd_server import EtcdServer, running_etcd
from tests.netns import temporary_netns

REPO = Path(__file__).resolve().parent.parent
IS_ROOT = os.geteuid() == 0
IN_CI = bool(os.environ.get("CI"))
# Agents started by the tests (and every process they start) write the pods' MTU here, never
# in this machine's /var/lib/calico.
os.environ["PYFELIX_STATE_DIR"] = tempfile.mkdtemp(prefix="pyfelix-state-")
# And keep their parsed manifests here, never in this machine's /var/cache/pyfelix.
os.environ["PYFELIX_CACHE_DIR"] = tempfile.mkdtemp(prefix="pyfelix-cache-")
# Both go when the run ends, so that runs do not pile them up in /tmp.
for _scratch in (os.environ["PYFELIX_STATE_DIR"], os.environ["PYFELIX_CACHE_DIR"]):
    atexit.register(shutil.rmtree, _scratch, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not vm.in_guest():
        # Not a skip: they run, inside the VM, as part of tests/test_in_vm.py.
        guest_only = [item for item in items if item.get_closest_marker("stock_kernel")]
        if guest_only:
            config.hook.pytest_deselected(items=guest_only)
            items[:] = [item for item in items if not item.get_closest_marker("stock_kernel")]
    if IS_ROOT:
        return
    for item in items:
        if item.get_closest_marker("netns") is None:
            continue
        if IN_CI:
            item.add_marker(pytest.mark.xfail(reason="CI must run as root", strict=True))
        else:
            item.add_marker(pytest.mark.skip(reason="needs root for network namespaces"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a run that skipped anything, or passed nothing, fails."""
    if not IN_CI or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    if reporter.stats.get("skipped") or not reporter.stats.get("passed"):
        session.exitstatus = 1


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own state directory (the agents' mtu file), so that no test sees what an
    earlier one's agent wrote."""
    directory = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("PYFELIX_STATE_DIR", str(directory))
    return directory


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace (root only), deleted after the test."""
    with temporary_netns() as name:
        yield name


@pytest.fixture
def examples_dir() -> Path:
    return REPO / "examples"


@pytest.fixture
def etcd() -> Iterator[EtcdServer]:
    """A fresh etcd server on 127.0.0.1 (Debian's etcd-server), stopped after the test."""
    with running_etcd() as server:
        yield server


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    """A copy of the example cluster's manifests, to edit."""
    target = tmp_path / "manifests"
    shutil.copytree(REPO / "examples" / "cluster", target)
    return target
