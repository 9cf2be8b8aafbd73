"""The VXLAN writer against the kernel, in a namespace: what it creates, and what it removes
when a remote VTEP goes, when settings change and when VXLAN is turned off (read back with
iproute2, independently of pyroute2)."""

from __future__ import annotations

import pytest

from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice, sync_vxlan
from tests.netns import in_netns, run_in

pytestmark = pytest.mark.netns


def write_vxlan(vni: int, remotes: tuple[int, ...]) -> str:
    """The device with ``vni`` (0: none) and a remote VTEP per node number; runs inside the
    namespace."""
    device = (
        None if vni == 0 else VtepDevice(vni, 4789, "66:00:00:00:00:01", "10.65.1.0", "10.99.0.1")
    )
    peers = [RemoteVtep(f"10.65.{n}.0", f"66:00:00:00:00:{n:02x}", f"10.99.0.{n}") for n in remotes]
    return sync_vxlan(device, peers)


def sync(ns: str, vni: int, *remotes: int) -> str:
    return in_netns(ns, write_vxlan, vni, remotes)


def show(ns: str, *argv: str) -> str:
    return run_in(ns, *argv).stdout


def test_vxlan_device_and_remote_vteps(netns: str) -> None:
    assert sync(netns, 4096, 2) == "waiting"  # nothing holds the underlay address yet
    run_in(netns, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
    run_in(netns, "ip", "addr", "add", "10.99.0.1/24", "dev", "ul0")
    run_in(netns, "ip", "link", "set", "ul0", "up")

    assert sync(netns, 4096, 2, 3) == "ready"
    device = show(netns, "ip", "-d", "link", "show", "vxlan.calico")
    assert "mtu 1450" in device
    assert "66:00:00:00:00:01" in device
    assert "vxlan id 4096 local 10.99.0.1 dev ul0" in device
    assert "inet 10.65.1.0/32" in show(netns, "ip", "addr", "show", "vxlan.calico")
    neighbours = show(netns, "ip", "neigh", "show", "dev", "vxlan.calico")
    assert "10.65.2.0 lladdr 66:00:00:00:00:02 PERMANENT" in neighbours
    assert "10.65.3.0 lladdr 66:00:00:00:00:03 PERMANENT" in neighbours
    fdb = show(netns, "bridge", "fdb", "show", "dev", "vxlan.calico")
    assert "66:00:00:00:00:02 dst 10.99.0.2 self permanent" in fdb
    assert "66:00:00:00:00:03 dst 10.99.0.3 self permanent" in fdb

    assert sync(netns, 4096, 2) == "ready"  # node 3 left the cluster
    assert "10.65.3.0" not in show(netns, "ip", "neigh", "show", "dev", "vxlan.calico")
    assert "10.99.0.3" not in show(netns, "bridge", "fdb", "show", "dev", "vxlan.calico")
    assert "10.99.0.2" in show(netns, "bridge", "fdb", "show", "dev", "vxlan.calico")

    assert sync(netns, 5000, 2) == "ready"  # a new VNI cannot be set in place: recreated
    assert "vxlan id 5000" in show(netns, "ip", "-d", "link", "show", "vxlan.calico")
    assert "10.99.0.2" in show(netns, "bridge", "fdb", "show", "dev", "vxlan.calico")

    assert sync(netns, 0) == "absent"
    assert "vxlan.calico" not in show(netns, "ip", "link")


def write_vxlan_v6(remotes: tuple[int, ...], enabled: bool = True) -> str:
    device = VtepDevice(4096, 4789, "66:00:00:00:06:01", "fd65:1::", "fd99::1", mtu=1430, version=6)
    peers = [RemoteVtep(f"fd65:{n}::", f"66:00:00:00:06:{n:02x}", f"fd99::{n}") for n in remotes]
    return sync_vxlan(device if enabled else None, peers, 6)


def test_ipv6_vxlan_device_beside_the_ipv4_one(netns: str) -> None:
    """As Felix's IPv6 VXLAN manager: vxlan-v6.calico over the node's IPv6 underlay address,
    the VTEP's /128, NDP and FDB entries per remote VTEP; the IPv4 device is another one."""
    run_in(netns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
    run_in(netns, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
    run_in(netns, "ip", "addr", "add", "10.99.0.1/24", "dev", "ul0")
    run_in(netns, "ip", "addr", "add", "fd99::1/64", "dev", "ul0", "nodad")
    run_in(netns, "ip", "link", "set", "ul0", "up")
    assert sync(netns, 4096, 2) == "ready"

    assert in_netns(netns, write_vxlan_v6, (2, 3)) == "ready"
    device = show(netns, "ip", "-d", "link", "show", "vxlan-v6.calico")
    assert "mtu 1430" in device
    assert "vxlan id 4096 local fd99::1 dev ul0" in device
    assert "inet6 fd65:1::/128" in show(netns, "ip", "addr", "show", "vxlan-v6.calico")
    neighbours = show(netns, "ip", "-6", "neigh", "show", "dev", "vxlan-v6.calico")
    assert "fd65:2:: lladdr 66:00:00:00:06:02 PERMANENT" in neighbours
    assert "fd65:3:: lladdr 66:00:00:00:06:03 PERMANENT" in neighbours
    fdb = show(netns, "bridge", "fdb", "show", "dev", "vxlan-v6.calico")
    assert "66:00:00:00:06:02 dst fd99::2 self permanent" in fdb

    assert in_netns(netns, write_vxlan_v6, (2,)) == "ready"
    assert "fd65:3::" not in show(netns, "ip", "-6", "neigh", "show", "dev", "vxlan-v6.calico")
    assert "fd99::3" not in show(netns, "bridge", "fdb", "show", "dev", "vxlan-v6.calico")
    assert "10.99.0.2" in show(netns, "bridge", "fdb", "show", "dev", "vxlan.calico")

    assert in_netns(netns, write_vxlan_v6, (), False) == "absent"
    links = show(netns, "ip", "link")
    assert "vxlan-v6.calico" not in links
    assert "vxlan.calico" in links
