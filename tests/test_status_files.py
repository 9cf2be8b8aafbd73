"""Endpoint status files as Calico's CNI plugin reads them: named and filled as Felix's
file reporter does, written only once the dataplane is in sync, repaired on its period."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from pyfelix import model, status_files
from pyfelix.messages import EndpointStatus
from pyfelix.status_files import (
    EndpointStatusFiles,
    status_filename,
    status_text,
)
from pyfelix.values import FrozenMap

KEY = model.WorkloadEndpointKey("node-a", "k8s", "shop/web-7d9f", "eth0")
ENDPOINT = model.WorkloadEndpoint(
    "active", "cali12345", "ee:ee:ee:ee:ee:ee", (), ("10.65.0.2/32",), ("fd00::2/128",), FrozenMap()
)


def test_named_and_filled_as_felix_does() -> None:
    """Go's url.PathEscape of each part, joined by spaces; JSON in Felix's field order."""
    assert status_filename(KEY) == "k8s shop%2Fweb-7d9f eth0"
    odd = model.WorkloadEndpointKey("n", "openstack", "a b;c,d?e:f@g", "x")
    assert status_filename(odd) == "openstack a%20b%3Bc%2Cd%3Fe:f@g x"
    assert json.loads(status_text(ENDPOINT)) == {
        "ifaceName": "cali12345",
        "mac": "ee:ee:ee:ee:ee:ee",
        "ipv4Nets": ["10.65.0.2/32"],
        "ipv6Nets": ["fd00::2/128"],
    }
    assert status_text(ENDPOINT).startswith('{"ifaceName":"cali12345","mac":')


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``condition`` holds within ``seconds`` (real time: the files are written by a
    worker thread, which a mock clock would not wait for)."""
    with trio.move_on_after(seconds):
        while not condition():
            await trio.sleep(0.01)
        return True
    return False


async def test_written_once_in_sync_removed_when_down_and_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status_files, "REAPPLY_INTERVAL", 0.3)
    files = EndpointStatusFiles(tmp_path)
    path = tmp_path / "endpoint-status" / status_filename(KEY)
    stale = tmp_path / "endpoint-status" / "k8s gone%2Fpod eth0"
    stale.parent.mkdir()
    stale.write_text("{}")
    async with trio.open_nursery() as nursery:
        await nursery.start(files.run)
        files.update(KEY, ENDPOINT, EndpointStatus.UP)
        await trio.sleep(0.2)
        assert not path.exists(), "nothing before the dataplane is in sync"
        files.in_sync()
        assert await until(path.exists)
        assert path.read_text() == status_text(ENDPOINT)
        assert await until(lambda: not stale.exists()), "a file no endpoint is up for goes"
        path.unlink()  # another program
        assert await until(path.exists), "repaired when the directory is read again"
        files.update(KEY, ENDPOINT, EndpointStatus.DOWN)
        assert await until(lambda: not path.exists())
        files.update(KEY, ENDPOINT, EndpointStatus.UP)
        assert await until(path.exists)
        files.remove(KEY)
        assert await until(lambda: not path.exists())
        nursery.cancel_scope.cancel()
