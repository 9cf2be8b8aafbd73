"""The WireGuard writer against the real kernel, in a namespace: the kernel's device where the
module exists (Debian's stock kernel, in the VM of tests/test_in_vm.py), wireguard-go's on
this machine; the same device, peers, routing table and rule either way."""

from __future__ import annotations

import attrs
import pytest

from pyfelix_dataplane.linux.wireguard import Peer, WireguardDevice, sync_wireguard
from tests import vm
from tests.netns import in_netns, run_in

PEER_KEY = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="


def _device(name: str) -> WireguardDevice:
    peer = Peer(PEER_KEY, "10.99.0.2:51820", ("10.65.2.0/26", "10.66.2.1/32"))
    return WireguardDevice(
        name=name,
        port=51820,
        fwmark=0x200000,
        table=42,
        rule_priority=99,
        address="10.66.1.1",
        mtu=1400,
        peers=(peer,),
        keepalive=25,
    )


@pytest.mark.netns
def test_the_device_its_peer_table_and_rule(netns: str) -> None:
    name = f"wg-lw{abs(hash(netns)) % 10000}"
    key = in_netns(netns, sync_wireguard, _device(name))
    try:
        assert len(key) == 44
        assert in_netns(netns, sync_wireguard, _device(name), name) == key  # kept
        details = run_in(netns, "ip", "-d", "link", "show", name).stdout
        assert (" wireguard " in details) == vm.kernel_has("wireguard"), details
        assert " mtu 1400 " in details
        shown = run_in(netns, "wg", "show", name).stdout
        assert f"peer: {PEER_KEY}" in shown
        assert "allowed ips: 10.65.2.0/26, 10.66.2.1/32" in shown
        assert "persistent keepalive: every 25 seconds" in shown
        assert "fwmark: 0x200000" in shown
        assert "10.65.2.0/26 dev" in run_in(netns, "ip", "route", "show", "table", "42").stdout
        rules = run_in(netns, "ip", "rule").stdout
        assert "99:\tnot from all fwmark 0x200000/0x200000 lookup 42" in rules
        # A node that is no peer: its destinations thrown back to the main table.
        mixed = attrs.evolve(_device(name), throw=("10.65.3.0/26", "10.65.2.0/26"))
        in_netns(netns, sync_wireguard, mixed, name)
        table = run_in(netns, "ip", "route", "show", "table", "42").stdout
        assert "throw 10.65.3.0/26" in table
        assert "10.65.2.0/26 dev" in table, "a peer's destination is never thrown"
        in_netns(netns, sync_wireguard, _device(name), name)
        assert "throw" not in run_in(netns, "ip", "route", "show", "table", "42").stdout
    finally:
        in_netns(netns, sync_wireguard, None, name)
    assert name not in run_in(netns, "ip", "link").stdout


@pytest.mark.netns
def test_an_ipv6_device_beside_the_ipv4_one(netns: str) -> None:
    """The IPv6 device has its own address, IPv6 peer endpoint and allowed IPs, IPv6 table
    and IPv6 rule; removing it leaves the IPv4 device and its rule."""
    name, name6 = f"wg-l4{abs(hash(netns)) % 10000}", f"wg-l6{abs(hash(netns)) % 10000}"
    peer6 = Peer(PEER_KEY, "[fd99::2]:51821", ("fd65:0:0:2::/122", "fd66::2/128"))
    device6 = WireguardDevice(
        name=name6,
        port=51821,
        fwmark=0x200000,
        table=43,
        rule_priority=99,
        address="fd66::1",
        mtu=1380,
        peers=(peer6,),
        version=6,
    )
    in_netns(netns, sync_wireguard, _device(name))
    try:
        assert len(in_netns(netns, sync_wireguard, device6, "", 6)) == 44
        shown = run_in(netns, "wg", "show", name6).stdout
        assert "endpoint: [fd99::2]:51821" in shown
        assert "allowed ips: fd65:0:0:2::/122, fd66::2/128" in shown
        assert "inet6 fd66::1/128" in run_in(netns, "ip", "addr", "show", name6).stdout
        table = run_in(netns, "ip", "-6", "route", "show", "table", "43").stdout
        assert "fd65:0:0:2::/122 dev" in table
        rules6 = run_in(netns, "ip", "-6", "rule").stdout
        assert "99:\tnot from all fwmark 0x200000/0x200000 lookup 43" in rules6
        assert "lookup 43" not in run_in(netns, "ip", "rule").stdout
        in_netns(netns, sync_wireguard, None, name6, 6)
        assert name6 not in run_in(netns, "ip", "link").stdout
        assert "lookup 43" not in run_in(netns, "ip", "-6", "rule").stdout
        assert "lookup 42" in run_in(netns, "ip", "rule").stdout
    finally:
        in_netns(netns, sync_wireguard, None, name6, 6)
        in_netns(netns, sync_wireguard, None, name)


@pytest.mark.netns
def test_a_rule_left_without_its_device_goes_when_wireguard_is_off(netns: str) -> None:
    """WireGuard off looks for the device and for a rule of its shape (over rtnetlink); a rule
    another run left behind goes even though its device is gone, other rules stay."""
    mark = "0x200000/0x200000"
    run_in(netns, "ip", "rule", "add", "not", "fwmark", mark, "table", "42", "priority", "99")
    run_in(netns, "ip", "rule", "add", "fwmark", "0x10", "table", "77", "priority", "98")
    assert in_netns(netns, sync_wireguard, None) == ""
    rules = run_in(netns, "ip", "rule").stdout
    assert "lookup 42" not in rules
    assert "98:\tfrom all fwmark 0x10 lookup 77" in rules
    assert in_netns(netns, sync_wireguard, None) == ""  # nothing left: nothing to do
