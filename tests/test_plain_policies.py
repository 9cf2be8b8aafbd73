"""A policy the dry-run's child converts and hands on is rebuilt as exactly what decoding and
converting it gives; the child leaves alone what the general path must report or name."""

from __future__ import annotations

import marshal
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix import model
from pyfelix.resources.meta import load_document
from pyfelix.syncer.plain_namespaces import plain_entry, plain_identity
from pyfelix.syncer.plain_policies import policy_fields
from pyfelix.syncer.processors import convert
from pyfelix.validation import validate_resource
from pyfelix.validation.kinds import PERMISSIVE

Doc = dict[str, Any]

SELECTORS = ["all()", "app == 'web'", "has(tier) && role in {'a', 'b'}", "!has(x)", "app == "]
PORTS = [80, "8080:8090", "http", 0, "99999"]
NETS = ["10.0.0.0/8", "10.1.2.3", "fd00::/64", "10.0.0.300/32"]

entity = st.fixed_dictionaries(
    {},
    optional={
        "selector": st.sampled_from(SELECTORS),
        "notSelector": st.sampled_from(SELECTORS[:2]),
        "namespaceSelector": st.sampled_from(["all()", "global()", "team == 'a'"]),
        "nets": st.lists(st.sampled_from(NETS), max_size=2),
        "notNets": st.lists(st.sampled_from(NETS[:2]), max_size=1),
        "ports": st.lists(st.sampled_from(PORTS), max_size=2),
        "notPorts": st.lists(st.sampled_from(PORTS[:2]), max_size=1),
        "serviceAccounts": st.fixed_dictionaries(
            {}, optional={"names": st.lists(st.sampled_from(["b", "a"]), max_size=2)}
        ),
    },
)
calico_rule = st.fixed_dictionaries(
    {"action": st.sampled_from(["Allow", "Deny", "Pass", "Log", "allow"])},
    optional={
        "protocol": st.sampled_from(["TCP", "UDP", "ICMP", 6, "SCTP"]),
        "ipVersion": st.sampled_from([4, 6]),
        "icmp": st.fixed_dictionaries({"type": st.sampled_from([8, 0])}),
        "source": entity,
        "destination": entity,
        "metadata": st.fixed_dictionaries({"annotations": st.just({"why": "audit"})}),
        "http": st.just({"methods": ["GET"]}),
    },
)
calico_policy = st.builds(
    lambda kind, tier, spec: {
        "apiVersion": "projectcalico.org/v3",
        "kind": kind,
        "metadata": {
            "name": f"{tier}.p" if tier else "p",
            "uid": "0c0ffee0-0000-4000-8000-000000000001",
            **({"namespace": "prod"} if "Global" not in kind else {}),
        },
        "spec": {**spec, **({"tier": tier} if tier else {})},
    },
    st.sampled_from(
        ["NetworkPolicy", "GlobalNetworkPolicy", "StagedNetworkPolicy", "StagedGlobalNetworkPolicy"]
    ),
    st.sampled_from(["", "default", "security"]),
    st.fixed_dictionaries(
        {"selector": st.sampled_from(SELECTORS)},
        optional={
            "order": st.sampled_from([1, 100.5]),
            "ingress": st.lists(calico_rule, max_size=3),
            "egress": st.lists(calico_rule, max_size=2),
            "types": st.sampled_from([["Ingress"], ["Ingress", "Egress"]]),
            "serviceAccountSelector": st.sampled_from(["", "role == 'x'"]),
            "stagedAction": st.sampled_from(["Set", "Delete"]),
            "doNotTrack": st.booleans(),
            "applyOnForward": st.booleans(),
        },
    ),
)
peer = st.fixed_dictionaries(
    {},
    optional={
        "podSelector": st.sampled_from([{}, {"matchLabels": {"app": "db"}}]),
        "namespaceSelector": st.sampled_from([{}, {"matchLabels": {"team": "a"}}]),
        "ipBlock": st.just({"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}),
    },
)
k8s_port = st.fixed_dictionaries(
    {},
    optional={
        "protocol": st.sampled_from(["TCP", "UDP", "SCTP"]),
        "port": st.sampled_from([53, "dns", 8000]),
        "endPort": st.just(8080),
    },
)
k8s_policy = st.builds(
    lambda kind, spec: {
        "apiVersion": "networking.k8s.io/v1" if kind == "NetworkPolicy" else "projectcalico.org/v3",
        "kind": kind,
        "metadata": {
            "name": "isolation",
            "namespace": "customer-1",
            "uid": "8a2207c6-6b52-48af-9145-f60bc1c890b3",
            "resourceVersion": "5092",
            "creationTimestamp": "2026-01-05T08:16:43Z",
            "generation": 1,
        },
        "spec": spec,
    },
    st.sampled_from(["NetworkPolicy", "StagedKubernetesNetworkPolicy"]),
    st.fixed_dictionaries(
        {"podSelector": st.sampled_from([{}, {"matchLabels": {"app": "web"}}])},
        optional={
            "policyTypes": st.sampled_from([["Ingress"], ["Ingress", "Egress"], ["Egress"]]),
            "ingress": st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "from": st.lists(peer, max_size=2),
                        "ports": st.lists(k8s_port, max_size=2),
                    },
                ),
                max_size=2,
            ),
            "egress": st.lists(
                st.fixed_dictionaries(
                    {}, optional={"to": st.lists(peer, max_size=2), "ports": st.lists(k8s_port)}
                ),
                max_size=2,
            ),
        },
    ),
)


def _general(document: Doc) -> tuple[tuple[str, str, str], list[Any]] | None:
    """The general path: decoded, then converted, if it loads and validates cleanly."""
    resource, problems = load_document(document, "x.json", 1)
    if resource is None or problems or validate_resource(resource, PERMISSIVE):
        return None
    return (resource.KIND, resource.namespace, resource.name), convert(resource)


def _rules_of(document: Doc) -> list[Doc]:
    spec = document["spec"]
    return [*spec.get("ingress", ()), *spec.get("egress", ())]


def _made_of(value: Any) -> tuple[object, ...]:
    """The fields a value is made with, but its origin (and not the hash it keeps)."""
    if isinstance(value, model.Rule):
        return tuple(getattr(value, name) for name in model.RULE_FIELDS)
    fields = attrs.fields(type(value))
    return tuple(getattr(value, f.name) for f in fields if f.init and f.name != "origin")


@settings(max_examples=400, deadline=None)
@given(st.one_of(calico_policy, k8s_policy))
def test_a_handed_on_policy_is_what_the_general_path_converts(document: Doc) -> None:
    fields = policy_fields(document)
    general = _general(document)
    if fields is None:
        # Left to the general path: a problem, a tier not built in, or an HTTP match.
        tier = document["spec"].get("tier", "default")
        http = any("http" in rule for rule in _rules_of(document))
        assert general is None or tier == "security" or http
        return
    assert general is not None
    handed = marshal.loads(marshal.dumps(fields))  # what crosses from the child
    entry = plain_entry(handed, validate=False)
    assert entry is not None
    identity, kvs = entry
    assert identity == general[0]
    assert plain_identity(handed) == (identity, None)
    assert list(kvs) == general[1]
    for (_, mine), (_, theirs) in zip(kvs, general[1], strict=True):
        if isinstance(mine, model.Policy):
            assert isinstance(theirs, model.Policy)
            assert mine.origin is None
            # Every field, not only those equality reads, rule by rule.
            assert _made_of(mine) == _made_of(theirs)
            for rule, same in zip(
                mine.inbound_rules + mine.outbound_rules,
                theirs.inbound_rules + theirs.outbound_rules,
                strict=True,
            ):
                assert _made_of(rule) == _made_of(same)


def test_what_the_child_leaves_to_the_general_path() -> None:
    """Another kind, a problem, a tier the report names, an HTTP match, an admin policy."""
    valid: Doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": "web"},
        "spec": {"selector": "app == 'web'", "ingress": [{"action": "Allow"}]},
    }
    assert policy_fields(valid) is not None
    assert policy_fields({**valid, "kind": "Namespace"}) is None
    assert policy_fields({**valid, "spec": {"selector": "app == "}}) is None
    assert policy_fields({**valid, "spec": {**valid["spec"], "unknown": 1}}) is None
    tiered = {**valid, "metadata": {"name": "security.web"}}
    assert policy_fields({**tiered, "spec": {**valid["spec"], "tier": "security"}}) is None
    http = {"action": "Allow", "http": {"methods": ["GET"]}}
    assert policy_fields({**valid, "spec": {"selector": "all()", "ingress": [http]}}) is None
    admin = {
        "apiVersion": "policy.networking.k8s.io/v1alpha1",
        "kind": "AdminNetworkPolicy",
        "metadata": {"name": "a"},
        "spec": {"priority": 1, "subject": {"namespaces": {}}, "ingress": []},
    }
    assert policy_fields(admin) is None
