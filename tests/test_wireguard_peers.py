"""Which WireGuard peers a node wants (a pure function) and the device's firewall mark."""

from __future__ import annotations

from pyfelix_dataplane.linux.wireguard import Peer, peers_from
from pyfelix_dataplane.rules.marks import wireguard_mark


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
        Peer("KEY2", "10.99.0.2:51820", ("10.65.2.0/26", "10.65.2.64/26", "10.66.2.1/32")),
        Peer("KEY3", "10.99.0.3:51820", ("10.65.3.0/26",)),
    )


def test_mark_is_the_first_bit_the_rules_leave_free() -> None:
    assert wireguard_mark() == 0x200000
    assert wireguard_mark(0x3F000) == 0x20000
    assert wireguard_mark(0x1F000) == 0, "five bits: all taken by the rules"
