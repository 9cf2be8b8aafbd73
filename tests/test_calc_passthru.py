"""State tables for the small calculators: the passthru, the profile decoder, the
encapsulation resolver and the dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.encapsulation import EncapsulationResolver
from pyfelix.calc.passthru import DataplanePassthru
from pyfelix.calc.profile_decoder import ProfileDecoder
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.values import FrozenMap
from tests.calc_harness import NODE_B_IP, VXLAN_POOL, Recorder, config, orders, pool

PASSTHRU_STATES: list[tuple[str, list[Update], dict[tuple[str, Any], Any]]] = [
    ("host IP", [NODE_B_IP], {("host", "node-b"): "192.0.2.2"}),
    (
        "host IPv4 and IPv6 addresses, one message",
        [NODE_B_IP, Update(model.HostIPv6Key("node-b"), config("fd99::2"))],
        {("host", "node-b"): "192.0.2.2 fd99::2"},
    ),
    (
        "host IPv6 address alone",
        [Update(model.HostIPv6Key("node-b"), config("fd99::2"))],
        {("host", "node-b"): " fd99::2"},
    ),
    ("pool", [VXLAN_POOL], {("pool", "10.65.0.0/16"): True}),
    (
        "WireGuard key",
        [Update(model.WireguardKey("node-b"), model.Wireguard("a2V5"))],
        {("wireguard", "node-b"): "a2V5"},
    ),
    ("WireGuard without a key", [Update(model.WireguardKey("node-b"), model.Wireguard(""))], {}),
]


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in PASSTHRU_STATES], ids=[c[0] for c in PASSTHRU_STATES]
)
def test_passthru_states(inputs: list[Update], expected: dict[tuple[str, Any], Any]) -> None:
    out, updates = Recorder(), Dispatcher()
    DataplanePassthru(out).register_with(updates)
    for update in inputs:
        updates.on_update(update)
    assert out.passthru == expected
    for update in inputs:
        updates.on_update(Update(update.key, None))
    assert out.passthru == {}


def test_profile_decoder_states() -> None:
    out, updates = Recorder(), Dispatcher()
    ProfileDecoder(out).register_with(updates)
    labels = {"pcns.team": "blue", "pcns.projectcalico.org/name": "shop", "other": "x"}
    updates.on_update(
        Update(model.ProfileLabelsKey("kns.shop"), model.ProfileLabels(FrozenMap(labels)))
    )
    account = {"pcsa.role": "frontend"}
    updates.on_update(
        Update(model.ProfileLabelsKey("ksa.shop.web"), model.ProfileLabels(FrozenMap(account)))
    )
    updates.on_update(
        Update(model.ProfileLabelsKey("open"), model.ProfileLabels(FrozenMap({"a": "b"})))
    )
    assert out.namespaces == {
        "shop": {"team": "blue", "projectcalico.org/name": "shop"},
        m.ServiceAccountID("shop", "web"): {"role": "frontend"},
    }
    updates.on_update(Update(model.ProfileLabelsKey("kns.shop"), None))
    assert list(out.namespaces) == [m.ServiceAccountID("shop", "web")]


ENCAP_STATES: list[tuple[str, list[Update], m.Encapsulation]] = [
    ("no pools", [], m.Encapsulation(False, False)),
    ("a VXLAN pool", [VXLAN_POOL], m.Encapsulation(False, True)),
    (
        "an IPv6 VXLAN pool",
        [Update(model.IPPoolKey("fd00::/64"), pool("fd00::/64", "Always"))],
        m.Encapsulation(False, False, True),
    ),
    (
        "an IPIP pool",
        [
            Update(
                model.IPPoolKey("10.66.0.0/16"),
                model.IPPool("10.66.0.0/16", "Always", "", False, False),
            )
        ],
        m.Encapsulation(True, False),
    ),
    (
        "VXLANEnabled false overrides the pools",
        [VXLAN_POOL, Update(model.GlobalConfigKey("VXLANEnabled"), config("false"))],
        m.Encapsulation(False, False),
    ),
    (
        "a disabled pool still counts (its pods keep their tunnel, as in a pool migration)",
        [
            Update(
                model.IPPoolKey("10.67.0.0/16"),
                model.IPPool("10.67.0.0/16", "", "Always", False, True),
            )
        ],
        m.Encapsulation(False, True),
    ),
]


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in ENCAP_STATES], ids=[c[0] for c in ENCAP_STATES]
)
def test_encapsulation_states(inputs: list[Update], expected: m.Encapsulation) -> None:
    for order in orders(inputs):
        out, updates = Recorder(), Dispatcher()
        EncapsulationResolver(out).register_with(updates)
        for update in order:
            updates.on_update(update)
        assert out.encapsulation is None, "nothing before the datastore is in sync"
        updates.on_status(SyncStatus.IN_SYNC)
        assert out.encapsulation == expected


def test_dispatcher_fans_out_in_order_and_a_filter_stops_the_rest() -> None:
    seen: list[str] = []
    dispatcher = Dispatcher()

    def receiver(name: str, stop: bool = False) -> Callable[[Update], bool]:
        def receive(update: Update) -> bool:
            seen.append(name)
            return stop

        return receive

    dispatcher.register(model.HostIPKey, receiver("first"))
    dispatcher.register(model.HostIPKey, receiver("filter", stop=True))
    dispatcher.register(model.HostIPKey, receiver("never"))
    dispatcher.register(model.TierKey, receiver("tier"))
    dispatcher.register_status(lambda status: seen.append(status.name))
    assert dispatcher.on_update(NODE_B_IP) is True
    dispatcher.on_updates([Update(model.TierKey("t"), None)])
    dispatcher.on_status(SyncStatus.IN_SYNC)
    assert seen == ["first", "filter", "tier", "IN_SYNC"]
