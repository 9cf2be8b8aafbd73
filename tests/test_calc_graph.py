"""The calculation graph end to end: named datastore states and the dataplane each should
produce, replayed in several orders and flush strategies into a strict fake dataplane."""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.calc.vxlan import derived_vtep_mac
from pyfelix.resources import Resource
from pyfelix.values import FrozenMap
from tests.calc_harness import Harness, Identity, example_state, final_view, load_manifest, mutate

FRONTEND = model.WorkloadEndpointKey("node-a", "k8s", "shop/frontend-1", "eth0")
CHECKOUT = model.WorkloadEndpointKey("node-a", "k8s", "shop/checkout-1", "eth0")
CHECKOUT_POLICY = ("NetworkPolicy", "shop", "checkout-to-payments")


def tiers_of(
    view: dict[str, Any], key: model.WorkloadEndpointKey
) -> list[tuple[str, list[str], list[str]]]:
    update = view["workloads"][key]
    return [
        (t.name, [str(p) for p in t.ingress_policies], [str(p) for p in t.egress_policies])
        for t in update.tiers
    ]


def drop(*keys: Identity) -> Any:
    def change(state: dict[Identity, Resource]) -> None:
        for key in keys:
            del state[key]

    return change


def replace(resource: Resource) -> Any:
    def change(state: dict[Identity, Resource]) -> None:
        state[(resource.KIND, resource.namespace, resource.name)] = resource

    return change


def relabel(key: Identity, labels: dict[str, str]) -> Any:
    def change(state: dict[Identity, Resource]) -> None:
        resource = state[key]
        meta = attrs.evolve(resource.metadata, labels=FrozenMap(labels))
        state[key] = attrs.evolve(resource, metadata=meta)

    return change


BASE = example_state()
STATES: dict[str, dict[Identity, Resource]] = {
    "empty": {},
    "cluster": BASE,
    "checkout-policy-deleted": mutate(BASE, drop(CHECKOUT_POLICY)),
    "frontend-relabelled": mutate(
        BASE,
        relabel(("WorkloadEndpoint", "shop", "node--a-k8s-frontend--1-eth0"), {"app": "legacy"}),
    ),
    "namespace-loses-team": mutate(BASE, relabel(("Namespace", "", "shop"), {"env": "prod"})),
    "node-b-gone": mutate(
        BASE,
        drop(
            ("Node", "", "node-b"),
            ("IPAMBlock", "", "10-65-1-0-26"),
            ("WorkloadEndpoint", "shop", "node--b-k8s-payments--1-eth0"),
            ("WorkloadEndpoint", "monitoring", "node--b-k8s-prometheus--1-eth0"),
        ),
    ),
}


def test_cluster_state() -> None:
    """The example cluster: tiers in order, Felix ids, members, profiles and VTEPs."""
    view = final_view(STATES["cluster"])
    assert tiers_of(view, FRONTEND) == [
        ("security", ["security.block-bad-actors"], ["security.block-bad-actors"]),
        ("platform", ["platform.allow-dns-and-metrics"], ["platform.allow-dns-and-metrics"]),
        ("default", ["shop/frontend-ingress"], []),
    ]
    assert tiers_of(view, CHECKOUT)[2] == (
        "default",
        ["shop/checkout-to-payments"],
        ["shop/checkout-to-payments"],
    )
    bad_actors = IPSetData(selector='threat-feed == "blocklist"')
    assert view["ipsets"][bad_actors.id] == {"198.51.100.0/24", "203.0.113.7/32"}
    http = IPSetData(selector="(projectcalico.org/namespace == 'shop') && (app == \"checkout\")")
    assert view["ipsets"][http.id] == {"10.65.0.3/32"}
    assert set(view["profiles"]) == {"kns.shop", "ksa.shop.frontend", "legacy-vms"}
    assert view["vteps"]["node-a"].mac == derived_vtep_mac("node-a")
    assert view["vteps"]["node-b"].mac == "66:2a:7c:01:b3:9e"
    assert view["encapsulation"] == m.Encapsulation(False, True)
    assert view["config"]["LogSeverityScreen"] == "Info"
    assert ("GlobalNetworkPolicy", "lock-down-frontend-egress") not in {
        (p.kind, p.name) for p in view["policies"]
    }


def test_node_b_has_its_own_view() -> None:
    """The same datastore seen from node-b: its endpoints, its log level override."""
    view = final_view(STATES["cluster"], hostname="node-b")
    assert {k.workload for k in view["workloads"]} == {"shop/payments-1", "monitoring/prometheus-1"}
    assert view["config"]["LogSeverityScreen"] == "Debug"
    assert view["routes"]["10.65.0.0/26"].types == {"REMOTE_WORKLOAD"}


def test_deleted_policy_and_relabelled_endpoint() -> None:
    """Deleting a policy or relabelling an endpoint changes exactly what depends on it."""
    view = final_view(STATES["checkout-policy-deleted"])
    assert [t[0] for t in tiers_of(view, CHECKOUT)] == ["security", "platform"]
    relabelled = final_view(STATES["frontend-relabelled"])
    assert [t[0] for t in tiers_of(relabelled, FRONTEND)] == ["security", "platform"]
    assert "shop/frontend-ingress" not in {str(p) for p in relabelled["policies"]}


def test_namespace_labels_drive_namespace_selectors() -> None:
    """Removing the namespace's team label takes the platform policy off its endpoints."""
    view = final_view(STATES["namespace-loses-team"])
    assert "platform" not in [t[0] for t in tiers_of(view, FRONTEND)]


def test_missing_profile_gets_deny_all_stand_in() -> None:
    """An endpoint naming a profile that does not exist gets a deny-all profile."""
    state = mutate(STATES["cluster"], drop(("Namespace", "", "shop")))
    view = final_view(state)
    profile = view["profiles"]["kns.shop"].profile
    assert [r.action for r in profile.inbound_rules + profile.outbound_rules] == ["deny", "deny"]


def test_invalid_resource_is_absent() -> None:
    """An invalid policy is treated as deleted; everything else stays."""
    broken = load_manifest(
        """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: checkout-to-payments, namespace: shop}
spec:
  selector: app == "checkout"
  ingress: [{action: Allow, destination: {ports: [80]}}]
"""
    )
    assert final_view(mutate(BASE, replace(broken))) == final_view(
        STATES["checkout-policy-deleted"]
    )


SEQUENCES = [
    ["cluster", "checkout-policy-deleted", "cluster"],
    ["cluster", "frontend-relabelled", "namespace-loses-team", "node-b-gone"],
    ["node-b-gone", "cluster", "empty", "cluster"],
    ["cluster", "empty"],
]


def replay(names: list[str], strategy: str, seed: int = 0) -> dict[str, Any]:
    harness = Harness()
    rng = random.Random(seed)
    for position, name in enumerate(names):
        updates = harness.diff(STATES[name])
        if strategy == "reversed":
            updates.reverse()
        elif strategy == "shuffled":
            rng.shuffle(updates)
        flush_every = {"every-update": 1, "split": 3}.get(strategy, 0)
        harness.feed(updates, flush_every=flush_every)
        if position == 0:
            harness.in_sync()
        if strategy != "end-only":
            harness.flush()
    harness.flush()
    return harness.dataplane.view()


@pytest.mark.parametrize("names", SEQUENCES, ids=["-".join(s) for s in SEQUENCES])
@pytest.mark.parametrize(
    "strategy", ["every-state", "every-update", "split", "end-only", "reversed", "shuffled"]
)
def test_replays_reach_the_final_state(names: list[str], strategy: str) -> None:
    """Whatever the order and flush strategy, the dataplane ends where the last state alone
    leads, and the strict dataplane never sees a message out of order."""
    assert replay(names, strategy) == final_view(STATES[names[-1]])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(STATES)), min_size=1, max_size=4),
    st.sampled_from(["every-state", "every-update", "split", "shuffled"]),
    st.integers(0, 1000),
)
def test_random_interleavings(names: list[str], strategy: str, seed: int) -> None:
    """Random walks between states, in random orders, converge on the final state's view."""
    assert replay(names, strategy, seed) == final_view(STATES[names[-1]])


def test_nothing_about_endpoints_or_config_before_in_sync() -> None:
    """Before IN_SYNC the dataplane hears no endpoints and no configuration."""
    harness = Harness()
    harness.feed(harness.diff(STATES["cluster"]))
    harness.flush()
    assert harness.dataplane.workloads == {}
    assert harness.dataplane.config_text is None
    assert not harness.dataplane.in_sync
    harness.in_sync()
    harness.flush()
    assert harness.dataplane.in_sync
    assert FRONTEND in harness.dataplane.workloads
