"""The WireGuard manager: which peers a node wants (a pure function), the device's firewall
mark and routing table, and the device written through the fake kernel, its public key sent
back once per change."""

from __future__ import annotations

from itertools import islice

import pytest
import trio

from pyfelix import messages as m
from pyfelix.config import parse_config
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.wireguard import (
    WireguardManager,
    route_tables,
    wireguard_table,
)
from pyfelix_dataplane.linux.wireguard import Peer, peers_from
from pyfelix_dataplane.rules.marks import wireguard_mark
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeDevices, FakeNode


def test_peers_are_remote_nodes_with_a_key_and_an_address() -> None:
    keys = {
        "node-1": ("KEY1", "10.66.1.1"),
        "node-2": ("KEY2", "10.66.2.1"),
        "node-3": ("KEY3", ""),
        "node-4": ("", "10.66.4.1"),
        "node-5": ("KEY5", "10.66.5.1"),
    }
    blocks = {"node-2": ["10.65.2.0/26", "10.65.2.64/26"], "node-3": ["10.65.3.0/26"]}
    addresses = {"node-1": "10.99.0.1", "node-2": "10.99.0.2", "node-3": "10.99.0.3"}
    assert peers_from(keys, blocks, addresses, 51820, "node-1") == (
        Peer(
            "KEY2", "10.99.0.2:51820", ("10.65.2.0/26", "10.65.2.64/26", "10.66.2.1/32"), "node-2"
        ),
        Peer("KEY3", "10.99.0.3:51820", ("10.65.3.0/26",), "node-3"),
    )
    # As Felix: a key two nodes claim makes neither a peer.
    keys["node-5"] = ("KEY2", "10.66.5.1")
    addresses["node-5"] = "10.99.0.5"
    assert [peer.node for peer in peers_from(keys, blocks, addresses, 51820, "node-1")] == [
        "node-3"
    ]


def test_mark_is_the_first_bit_the_rules_leave_free() -> None:
    assert wireguard_mark() == 0x200000
    assert wireguard_mark(0x3F000) == 0x20000
    assert wireguard_mark(0x1F000) == 0, "five bits: all taken by the rules"


@pytest.mark.parametrize(
    ("settings", "first"),
    [
        ({}, [1, 2, 3]),
        ({"RouteTableRanges": "250-260"}, [250, 251, 252, 256, 257]),
        ({"RouteTableRanges": "300-400,1-2"}, [1, 2, 300, 301]),
        ({"RouteTableRanges": "10-20,15-30"}, [10, 11]),
        ({"RouteTableRange": "7-9"}, [7, 8, 9]),
        ({"RouteTableRange": "7-9", "RouteTableRanges": "100-101"}, [100, 101]),
    ],
)
def test_route_tables_are_handed_out_lowest_first_as_felix(
    settings: dict[str, str], first: list[int]
) -> None:
    """RouteTableRanges, else the deprecated RouteTableRange, else 1-250; never 253-255.
    IPv4 WireGuard's table is the first."""
    config = parse_config(settings)
    assert list(islice(route_tables(config), len(first))) == first
    assert wireguard_table(config) == first[0]
    tables = list(route_tables(config))
    assert len(tables) == len(set(tables))


def test_the_wireguard_device_uses_the_first_table_of_the_range() -> None:
    state = NodeState()
    state.apply(
        m.ConfigUpdate(FrozenMap({"WireguardEnabled": "true", "RouteTableRanges": "42-50"}))
    )
    device = WireguardManager(state, writer=None, hostname="node-a", to_calc=None).desired()  # type: ignore[arg-type]
    assert device is not None
    assert device.table == 42


def route(dst: str, node: str, *types: str) -> m.RouteUpdate:
    return m.RouteUpdate(dst=dst, types=frozenset(types), dst_node=node)


def test_mixed_clusters_and_host_encryption() -> None:
    """As Felix's WireGuard manager: a node without a key (WireGuard off there, or not yet
    published) is no peer and its destinations are throw routes back to the main table; its
    host address joins a peer's allowed IPs only with host encryption, which also gives this
    node's device its host address when it has no WireGuard address and asks for
    src_valid_mark."""
    state = NodeState()
    config = {"WireguardEnabled": "true", "RouteTableRanges": "42-50"}
    state.apply(m.ConfigUpdate(FrozenMap(config)))
    for node, address in (
        ("node-a", "10.99.0.1"),
        ("node-b", "10.99.0.2"),
        ("node-c", "10.99.0.3"),
    ):
        state.apply(m.HostMetadataUpdate(node, address))
    state.apply(m.WireguardEndpointUpdate("node-b", "KEYB", "10.66.2.1"))
    for update in (
        route("10.65.2.0/26", "node-b", "REMOTE_WORKLOAD"),
        route("10.65.3.0/26", "node-c", "REMOTE_WORKLOAD"),
        route("10.99.0.2/32", "node-b", "REMOTE_HOST"),
        route("10.99.0.3/32", "node-c", "REMOTE_HOST"),
        route("fd65:0:0:2::/122", "node-b", "REMOTE_WORKLOAD"),
    ):
        state.apply(update)
    manager = WireguardManager(state, writer=None, hostname="node-a", to_calc=None)  # type: ignore[arg-type]
    device = manager.desired()
    assert device is not None
    assert [(p.node, p.allowed_ips) for p in device.peers] == [
        ("node-b", ("10.65.2.0/26", "10.66.2.1/32"))
    ]
    assert device.throw == ("10.65.3.0/26",)
    assert (device.address, device.src_valid_mark) == ("", False)

    state.apply(m.ConfigUpdate(FrozenMap({**config, "WireguardHostEncryptionEnabled": "true"})))
    device = manager.desired()
    assert device is not None
    assert device.peers[0].allowed_ips == ("10.65.2.0/26", "10.66.2.1/32", "10.99.0.2/32")
    assert device.throw == ("10.65.3.0/26", "10.99.0.3/32")
    assert (device.address, device.src_valid_mark) == ("10.99.0.1", True)


async def test_the_device_is_written_and_its_key_reported_once_per_change() -> None:
    state, node = NodeState(), FakeNode()
    send, receive = trio.open_memory_channel[m.FromDataplane](10)
    manager = WireguardManager(state, FakeDevices(node), "node-a", send)

    def update(msg: m.ToDataplane) -> None:
        state.apply(msg)
        manager.on_update(msg)

    await manager.complete_deferred_work()
    assert node.wireguard is None, "never enabled: the kernel is left alone"
    update(m.ConfigUpdate(FrozenMap({"WireguardEnabled": "true"})))
    await manager.complete_deferred_work()
    assert node.wireguard is not None
    assert node.wireguard.name == "wireguard.cali"
    (status,) = [receive.receive_nowait()]
    assert status == m.WireguardStatusUpdate(manager.public_key, 4)
    await manager.complete_deferred_work()
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()
    update(m.ConfigUpdate(FrozenMap({"WireguardEnabled": "false"})))
    await manager.complete_deferred_work()
    assert node.wireguard is None
    assert receive.receive_nowait() == m.WireguardStatusUpdate("", 4)
