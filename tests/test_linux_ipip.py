"""The IPIP writer and the route writer's tunl0 routes against Debian's stock kernel (this
machine's kernel has no ipip: these run in the VM of tests/test_in_vm.py): two node
namespaces on one underlay, each tunl0 made as Felix's IPIP manager makes it, each node's
block routed onlink via the other node's address, and a ping between the tunnel addresses
that crosses the underlay as IPIP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyfelix_dataplane.linux.ipip import IpipDevice, sync_ipip
from pyfelix_dataplane.linux.routes import RouteOwnership, RouteTarget, sync_routes
from tests.netns import in_netns, run_in, temporary_netns

pytestmark = [pytest.mark.netns, pytest.mark.stock_kernel]

OWNERSHIP = RouteOwnership(special_interfaces=("vxlan.calico", "tunl0"))


def _ip(ns: str, *argv: str) -> str:
    done = run_in(ns, "ip", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _program(address: str, block: str, peer: str) -> dict[str, str]:
    """tunl0 with ``address``, and ``block`` via ``peer`` out of it; inside the namespace."""
    assert sync_ipip(IpipDevice(address=address, mtu=1480)) == "ready"
    return sync_routes({block: RouteTarget("tunl0", gateway=peer)}, OWNERSHIP)


@pytest.fixture
def two_nodes() -> Iterator[tuple[str, str]]:
    with temporary_netns("ipa") as a, temporary_netns("ipb") as b:
        _ip(a, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", b)
        for ns, index in ((a, 1), (b, 2)):
            _ip(ns, "addr", "add", f"10.99.0.{index}/24", "dev", "ul0")
            _ip(ns, "link", "set", "ul0", "up")
            _ip(ns, "link", "set", "lo", "up")
        yield a, b


def test_nodes_reach_each_other_through_tunl0(two_nodes: tuple[str, str]) -> None:
    a, b = two_nodes
    assert in_netns(a, _program, "10.65.1.1", "10.65.2.0/26", "10.99.0.2") == {
        "10.65.2.0/26": "added"
    }
    in_netns(b, _program, "10.65.2.1", "10.65.1.0/26", "10.99.0.1")
    device = _ip(a, "-d", "link", "show", "tunl0")
    assert " mtu 1480 " in device
    assert "state UP" in device or "UNKNOWN" in device
    assert "inet 10.65.1.1/32" in _ip(a, "addr", "show", "tunl0")
    assert "10.65.2.0/26 via 10.99.0.2 dev tunl0" in _ip(a, "route", "show")
    assert "onlink" in _ip(a, "route", "show", "10.65.2.0/26")
    before = _ip(b, "-s", "link", "show", "tunl0")
    ping = run_in(a, "ping", "-c", "2", "-W", "5", "10.65.2.1")
    assert ping.returncode == 0, ping.stdout + _ip(b, "-s", "link", "show", "tunl0")
    assert _ip(b, "-s", "link", "show", "tunl0") != before  # it came in through the tunnel
    # IPIP off: the kernel's tunl0 stays, without our address.
    in_netns(a, sync_ipip, None)
    assert "10.65.1.1" not in _ip(a, "addr", "show", "tunl0")
