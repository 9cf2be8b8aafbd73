"""`pyfelix pods up` sizes a pod's veth pair as Calico's CNI plugin does: from the MTU the
agent wrote (the mtu file), the kernel's default if there is none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyfelix_dataplane.linux.mtu import write_mtu_file
from tests.netns import run_in
from tests.two_nodes import pyfelix_pods, remove_namespaces


def _mtu(ns: str, interface: str) -> str:
    shown = run_in(ns, "ip", "-o", "link", "show", interface).stdout
    return shown.split(" mtu ")[1].split()[0]


@pytest.mark.netns
@pytest.mark.parametrize("written", [1410, None])
def test_pods_get_the_mtu_the_agent_wrote(
    netns: str, examples_dir: Path, written: int | None
) -> None:
    if written:
        write_mtu_file(written, Path(os.environ["PYFELIX_STATE_DIR"]))
    prefix = f"pm{os.getpid() % 10000}-"
    try:
        up = pyfelix_pods(netns, "up", "node-a", examples_dir, prefix)
        assert (f"mtu {written}" in up) == bool(written)
        pod = next(line.split(": ")[1].split(",")[0] for line in up.splitlines() if ": " in line)
        expected = str(written or 1500)
        assert _mtu(pod, "eth0") == expected
        interface = up.splitlines()[0].split(", ")[1].split(" ->")[0]
        assert _mtu(netns, interface) == expected
    finally:
        pyfelix_pods(netns, "down", "node-a", examples_dir, prefix)
        remove_namespaces(prefix)
