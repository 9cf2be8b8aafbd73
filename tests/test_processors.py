"""Update processors: v3 resources become Felix's model keys and values, with Calico's selector
folding, label handling and config naming."""

from __future__ import annotations

from typing import Any

import attrs

from pyfelix import model
from pyfelix.resources import KINDS, Resource
from pyfelix.selector import parse_selector
from pyfelix.syncer.api import Update, UpdateType
from pyfelix.syncer.processors import Converter, convert
from tests.test_resources import document


def make(kind: str, name: str = "x", namespace: str = "", **body: Any) -> Resource:
    doc: dict[str, Any] = {
        "apiVersion": KINDS[kind].API_VERSION,
        "kind": KINDS[kind].manifest_kind(),
        "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        **body,
    }
    return KINDS[kind].from_manifest(doc)


def only(kvs: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    (kv,) = kvs
    return kv


def test_namespaced_policy_is_scoped_to_its_namespace() -> None:
    """A NetworkPolicy's selector gains its namespace, in Calico's exact text."""
    policy = make("NetworkPolicy", "web", "prod", spec={"selector": 'app == "web"'})
    key, value = only(convert(policy))
    assert key == model.PolicyKey("web", "prod", "NetworkPolicy", "default")
    assert value.selector == "(app == \"web\") && projectcalico.org/namespace == 'prod'"
    empty = make("NetworkPolicy", "all", "prod", spec={"serviceAccountSelector": "role == 'dev'"})
    assert only(convert(empty))[1].selector == (
        "(projectcalico.org/namespace == 'prod') && pcsa.role == \"dev\""
    )


def test_global_policy_folds_namespace_and_account_selectors() -> None:
    """namespaceSelector and serviceAccountSelector fold in with pcns./pcsa. prefixes."""
    spec = {"selector": 'x == "y"', "namespaceSelector": "team == 'a'"}
    assert only(convert(make("GlobalNetworkPolicy", spec=spec)))[1].selector == (
        '(x == "y") && pcns.team == "a"'
    )
    spec = {"selector": "all()", "namespaceSelector": "all()", "serviceAccountSelector": "has(r)"}
    assert only(convert(make("GlobalNetworkPolicy", spec=spec)))[1].selector == (
        "((has(projectcalico.org/namespace)) && has(projectcalico.org/namespace)) && has(pcsa.r)"
    )


def test_policy_value() -> None:
    """Tier from the spec, lowercased types, normalised actions and protocols."""
    policy = make(
        "GlobalNetworkPolicy",
        "security.p",
        spec={
            "tier": "security",
            "order": 5,
            "types": ["Ingress"],
            "doNotTrack": True,
            "applyOnForward": True,
            "ingress": [
                {"action": "Pass"},
                {"action": "Deny", "protocol": "TCP", "destination": {"ports": [80, "http"]}},
                {"action": "Log", "protocol": 132},
            ],
        },
    )
    key, value = only(convert(policy))
    assert key.tier == value.tier == "security"
    assert (value.order, value.types, value.do_not_track) == (5.0, ("ingress",), True)
    actions = [(r.action, r.protocol) for r in value.inbound_rules]
    assert actions == [("next-tier", None), ("deny", "tcp"), ("log", 132)]
    assert [str(p) for p in value.inbound_rules[1].dst_ports] == ["80", "http"]
    assert value.origin is policy


def test_policy_types_default_as_calicoctl_defaults_them() -> None:
    """Without types: ingress only unless there are egress rules (egress only if only those).
    Felix itself would treat a policy with no types as governing both directions, which let
    an ingress-only manifest drop its endpoints' egress."""
    allow = [{"action": "Allow"}]
    cases: list[tuple[dict[str, Any], tuple[str, ...]]] = [
        ({}, ("ingress",)),
        ({"ingress": allow}, ("ingress",)),
        ({"egress": allow}, ("egress",)),
        ({"ingress": allow, "egress": allow}, ("ingress", "egress")),
    ]
    for rules, types in cases:
        policy = make("GlobalNetworkPolicy", spec={"selector": "all()", **rules})
        assert only(convert(policy))[1].types == types, rules


def test_rule_selectors() -> None:
    """Rule sides fold namespace selectors, service accounts and the policy's namespace."""
    rules = [
        {"action": "Allow", "source": {"selector": 'app == "db"'}},
        {"action": "Allow", "source": {"notSelector": "has(x)"}},
        {"action": "Allow", "source": {"nets": ["10.0.0.1"]}},
        {
            "action": "Allow",
            "source": {"serviceAccounts": {"names": ["sa2", "sa1"], "selector": "key == 'v'"}},
        },
        {"action": "Allow", "source": {"namespaceSelector": "global()"}},
        {"action": "Allow", "source": {"namespaceSelector": "team == 'a'", "selector": "has(b)"}},
    ]
    value = only(convert(make("NetworkPolicy", "p", "prod", spec={"ingress": rules})))[1]
    src = [r.src_selector for r in value.inbound_rules]
    assert src == [
        "(projectcalico.org/namespace == 'prod') && (app == \"db\")",
        "projectcalico.org/namespace == 'prod'",
        "",
        "(projectcalico.org/namespace == 'prod') && ((pcsa.key == \"v\") && "
        '(projectcalico.org/serviceaccount in {"sa1", "sa2"}))',
        "!has(projectcalico.org/namespace)",
        '(pcns.team == "a") && (has(b))',
    ]
    assert value.inbound_rules[1].not_src_selector == "has(x)"
    assert value.inbound_rules[2].src_nets == ("10.0.0.1/32",)
    for selector in src:
        parse_selector(selector)


def test_staged_policy() -> None:
    """Staged policies keep their kind; a staged Delete is an absent key."""
    staged = make("StagedNetworkPolicy", "s", "prod", spec={"stagedAction": "Set"})
    key, value = only(convert(staged))
    assert key.kind == "StagedNetworkPolicy"
    assert key.staged
    assert value.staged_action == "Set"
    deleted = make("StagedNetworkPolicy", "s", "prod", spec={"stagedAction": "Delete"})
    assert only(convert(deleted)) == (key, None)


def test_staged_kubernetes_network_policy() -> None:
    """Calico's staged twin of a Kubernetes NetworkPolicy converts as the policy would, keyed
    by its own (staged) kind; a staged Delete stands for nothing."""
    spec = {"stagedAction": "Set", "podSelector": {"matchLabels": {"app": "db"}}}
    staged = make("StagedKubernetesNetworkPolicy", "s", "prod", spec=spec)
    twin = make("KubernetesNetworkPolicy", "s", "prod", spec={"podSelector": spec["podSelector"]})
    key, value = only(convert(staged))
    twin_key, twin_value = only(convert(twin))
    assert key.kind == "StagedKubernetesNetworkPolicy"
    assert key.staged
    assert (key.name, key.namespace, key.tier) == (twin_key.name, twin_key.namespace, "default")
    assert value.staged_action == "Set"
    assert value.selector == twin_value.selector
    assert value.inbound_rules == twin_value.inbound_rules
    deleted = make("StagedKubernetesNetworkPolicy", "s", "prod", spec={"stagedAction": "Delete"})
    assert convert(deleted) == []


def test_tier() -> None:
    """Tier order is kept (None when unset); any default action but Pass means Deny."""
    assert only(convert(make("Tier", "t", spec={"order": 7, "defaultAction": "Pass"}))) == (
        model.TierKey("t"),
        model.Tier(7.0, "Pass"),
    )
    assert only(convert(make("Tier", "t", spec={}))) == (
        model.TierKey("t"),
        model.Tier(None, "Deny"),
    )


def test_kubernetes_namespace_and_service_account_profiles() -> None:
    """Namespaces and service accounts become kns./ksa. profiles with prefixed labels."""
    ns = dict(convert(KINDS["Namespace"].from_manifest(document("Namespace", "shop"))))
    labels = ns[model.ProfileLabelsKey("kns.shop")]
    assert isinstance(labels, model.ProfileLabels)
    assert labels.labels == {"pcns.team": "a", "pcns.projectcalico.org/name": "shop"}
    rules = ns[model.ProfileRulesKey("kns.shop")]
    assert isinstance(rules, model.ProfileRules)
    assert [r.action for r in rules.inbound_rules + rules.outbound_rules] == ["allow", "allow"]
    sa_doc = document("ServiceAccount", "web")
    sa = dict(convert(KINDS["ServiceAccount"].from_manifest(sa_doc)))
    sa_labels = sa[model.ProfileLabelsKey("ksa.prod.web")]
    assert isinstance(sa_labels, model.ProfileLabels)
    assert sa_labels.labels == {
        "pcsa.app": "x",
        "pcsa.projectcalico.org/name": "web",
    }


def test_workload_endpoint() -> None:
    """Key from node/orchestrator/namespace+pod/endpoint; pcns./pcsa. labels replaced by ours."""
    doc = document("WorkloadEndpoint", "node--a-k8s-web--1-eth0")
    doc["metadata"]["labels"] = {"app": "web", "pcns.team": "forged", "pcsa.x": "forged"}
    wep = KINDS["WorkloadEndpoint"].from_manifest(doc)
    key, value = only(convert(wep))
    assert key == model.WorkloadEndpointKey("node-a", "k8s", "prod/web-1", "eth0")
    assert str(key) == "/calico/v1/host/node-a/workload/k8s/prod%2fweb-1/endpoint/eth0"
    assert value.labels == {
        "app": "web",
        "projectcalico.org/namespace": "prod",
        "projectcalico.org/orchestrator": "k8s",
        "projectcalico.org/serviceaccount": "web",
    }
    assert (value.ipv4_nets, value.ipv6_nets) == (("10.65.0.2/32",), ("fd00::2/128",))
    assert value.ports == (model.EndpointPort("http", "tcp", 80),)
    assert value.name == "cali12345678901"


def test_workload_endpoint_key_from_name_and_without_ips() -> None:
    """A spec without node/pod falls back to Calico's name format; no IPs means absent."""
    wep = make(
        "WorkloadEndpoint",
        "node--b-k8s-db--0-eth0",
        "prod",
        spec={"interfaceName": "calia", "ipNetworks": []},
    )
    assert only(convert(wep)) == (
        model.WorkloadEndpointKey("node-b", "k8s", "prod/db-0", "eth0"),
        None,
    )


def test_network_sets() -> None:
    """Namespaced sets are keyed ns/name, labelled with their namespace, parented by kns.<ns>."""
    key, value = only(convert(make("NetworkSet", "gw", "shop", spec={"nets": ["10.0.0.1"]})))
    assert key == model.NetworkSetKey("shop/gw")
    assert value.labels == {"projectcalico.org/namespace": "shop"}
    assert value.profile_ids == ("kns.shop",)
    assert value.nets == ("10.0.0.1/32",)
    key, value = only(convert(make("GlobalNetworkSet", "bad", spec={"nets": ["1.2.3.0/24"]})))
    assert (key, value.profile_ids) == (model.NetworkSetKey("bad"), ())


def test_node() -> None:
    """A Node gives its host IP, tunnel address and MAC, WireGuard key, and itself."""
    kvs = dict(convert(KINDS["Node"].from_manifest(document("Node", "node-a"))))
    assert kvs[model.HostIPKey("node-a")] == model.ConfigValue("192.168.1.1")
    assert kvs[model.HostConfigKey("node-a", "IPv4VXLANTunnelAddr")] == model.ConfigValue(
        "10.65.0.1"
    )
    assert kvs[model.HostConfigKey("node-a", "VXLANTunnelMACAddr")] == model.ConfigValue(
        "66:00:00:00:00:01"
    )
    assert kvs[model.HostConfigKey("node-a", "IPv6VXLANTunnelAddr")] is None
    wireguard = kvs[model.WireguardKey("node-a")]
    assert isinstance(wireguard, model.Wireguard)
    assert wireguard.public_key.startswith("jNk0")
    assert wireguard.interface_ipv4_addr == "10.65.0.9"
    assert isinstance(kvs[model.ResourceKey("Node", "", "node-a")], model.Passthrough)


def test_felix_configuration_keys() -> None:
    """default -> global keys, node.<name> -> host keys, Felix names, durations in seconds."""
    spec = {
        "reportingTTL": "1m30s",
        "iptablesLockProbeInterval": "50ms",
        "ipipEnabled": True,
        "failsafeInboundHostPorts": [
            {"protocol": "TCP", "port": 22},
            {"protocol": "UDP", "port": 68, "net": "fd00::/8"},
        ],
    }
    kvs = dict(convert(make("FelixConfiguration", "default", spec=spec)))
    assert kvs[model.GlobalConfigKey("ReportingTTLSecs")] == model.ConfigValue("90")
    assert kvs[model.GlobalConfigKey("IptablesLockProbeIntervalMillis")] == model.ConfigValue("50")
    assert kvs[model.GlobalConfigKey("IpInIpEnabled")] == model.ConfigValue("true")
    assert kvs[model.GlobalConfigKey("FailsafeInboundHostPorts")] == model.ConfigValue(
        "tcp:22,udp:[fd00::/8]:68"
    )
    assert kvs[model.GlobalConfigKey("LogSeverityScreen")] is None
    node = dict(
        convert(make("FelixConfiguration", "node.node-b", spec={"logSeverityScreen": "Debug"}))
    )
    assert node[model.HostConfigKey("node-b", "LogSeverityScreen")] == model.ConfigValue("Debug")
    scoped = only(convert(make("FelixConfiguration", "gpu", spec={})))
    assert scoped[0] == model.ResourceKey("FelixConfiguration", "", "gpu")


def test_cluster_information_and_pools() -> None:
    """ClusterInformation sets the ready flag; pools are keyed by CIDR with Felix's modes."""
    kvs = dict(convert(make("ClusterInformation", "default", spec={"datastoreReady": True})))
    assert kvs[model.ReadyFlagKey()] == model.ReadyFlag(True)
    pool = make(
        "IPPool",
        "p",
        spec={"cidr": "10.65.0.0/16", "vxlanMode": "CrossSubnet", "natOutgoing": True},
    )
    key, value = only(convert(pool))
    assert key == model.IPPoolKey("10.65.0.0/16")
    assert (value.vxlan_mode, value.ipip_mode, value.masquerade) == ("cross-subnet", "", True)


def test_passthrough_kinds() -> None:
    """Services, EndpointSlices and BGPConfiguration pass through as ResourceKeys."""
    key, value = only(convert(KINDS["EndpointSlice"].from_manifest(document("EndpointSlice", "e"))))
    assert key == model.ResourceKey("EndpointSlice", "prod", "e")
    assert value.resource.KIND == "EndpointSlice"


def test_converter_emits_only_what_changed() -> None:
    """Re-applying a resource emits nothing; a changed Node re-sends its present keys (with
    the new origin, for validation) and deletes the one it lost."""
    converter = Converter()
    node = KINDS["Node"].from_manifest(document("Node", "n1"))
    first = converter.update("n1", node, "1")
    assert {u.update_type for u in first} == {UpdateType.NEW}
    assert converter.update("n1", node, "2") == []
    doc = document("Node", "n1")
    del doc["spec"]["vxlanTunnelMACAddr"]
    changes = {u.key: u for u in converter.update("n1", KINDS["Node"].from_manifest(doc), "3")}
    assert set(changes) == {
        model.HostIPKey("n1"),
        model.HostNetworkKey("n1"),
        model.HostConfigKey("n1", "IPv4VXLANTunnelAddr"),
        model.HostConfigKey("n1", "VXLANTunnelMACAddr"),
        model.WireguardKey("n1"),
        model.ResourceKey("Node", "", "n1"),
    }
    assert changes[model.HostConfigKey("n1", "VXLANTunnelMACAddr")].value is None
    assert changes[model.ResourceKey("Node", "", "n1")].update_type is UpdateType.UPDATED
    gone = converter.update("n1", None, "4")
    assert {u.key for u in gone} == {
        model.HostIPKey("n1"),
        model.HostNetworkKey("n1"),
        model.HostConfigKey("n1", "IPv4VXLANTunnelAddr"),
        model.WireguardKey("n1"),
        model.ResourceKey("Node", "", "n1"),
    }
    assert all(u.value is None for u in gone)


def test_converter_resolves_conflicts_by_source_order() -> None:
    """Two pools with one CIDR: the lowest-sorting source wins; the other takes over after."""
    converter = Converter()
    a = make("IPPool", "a", spec={"cidr": "10.0.0.0/16", "natOutgoing": True})
    b = make("IPPool", "b", spec={"cidr": "10.0.0.0/16"})
    (first,) = converter.update("b", b)
    assert isinstance(first.value, model.IPPool)
    assert first.value.masquerade is False
    (takeover,) = converter.update("a", a)
    assert isinstance(takeover.value, model.IPPool)
    assert takeover.value.masquerade is True
    assert converter.update("b", None) == []
    (back,) = converter.update("a", None)
    assert back.value is None


def test_a_new_source_whose_key_is_taken_is_left_to_the_general_resolution() -> None:
    """The first read's shortcut takes only a new source with a key of its own; for a key
    another source has (or a source seen before) it does nothing, and ``produce`` resolves
    the conflict by source order as for any other source."""
    converter = Converter()
    key = model.ResourceKey("Pod", "ns", "p")
    assert converter.produce_new("b", (key, "from b"), "1") == Update(
        key, "from b", "1", UpdateType.NEW
    )
    assert converter.produce_new("a", (key, "from a"), "2") is None
    assert converter.produce_new("b", (key, "again"), "2") is None
    assert converter.produce("a", ((key, "from a"),), "2") == [
        Update(key, "from a", "2", UpdateType.UPDATED)
    ]
    (back,) = converter.produce("a", (), "3")
    assert back.value == "from b"


def test_a_converter_for_validated_input_keeps_no_resource() -> None:
    """Only the validation filter reads a value's origin: a converter of input validated
    beforehand (the dry-run's) drops it, so the graph does not hold every resource, and the
    values are otherwise the ones a filtered pipeline's converter makes. A passed-through
    resource stays, as it is the value itself."""
    kept, dropped = Converter(), Converter(keep_origins=False)
    for kind in ("GlobalNetworkPolicy", "NetworkPolicy", "Node", "GlobalNetworkSet"):
        resource = KINDS[kind].from_manifest(document(kind, "x"))
        with_origin = kept.update(kind, resource)
        without = dropped.update(kind, resource)
        assert without == with_origin  # origins are not part of a value's equality
        assert any(getattr(u.value, "origin", None) is resource for u in with_origin)
        for update in without:
            if isinstance(update.value, model.Passthrough):
                assert update.value.origin is resource
            else:
                assert getattr(update.value, "origin", None) is None


def test_a_converter_that_remembers_every_source_knows_those_that_produced_nothing() -> None:
    """The streamed dry-run asks its converter which sources it was given: with
    ``remember_every_source`` one that stands for nothing (or no longer does) is known too,
    and produces as before when it comes again; a running agent's converter forgets it."""
    remembering, forgetting = Converter(remember_every_source=True), Converter()
    for converter in (remembering, forgetting):
        assert converter.produce("empty", ()) == []
        assert converter.produce("gone", (("k", "v"),)) != []
        assert converter.produce("gone", ()) == [Update("k", None, "", UpdateType.DELETED)]
        assert converter.has_source("kept") is False
        converter.produce("kept", (("j", "w"),))
        assert converter.has_source("kept")
    assert remembering.has_source("empty")
    assert remembering.has_source("gone")
    assert not forgetting.has_source("empty")
    assert not forgetting.has_source("gone")
    (again,) = remembering.produce("gone", (("k", "v2"),))
    assert again == Update("k", "v2", "", UpdateType.NEW)


def test_keys_of_one_string_hash_by_it_and_their_kind() -> None:
    """A key of one string (a profile's, a pool's, a node's) is found again by an equal key
    built anew, is another key than one of another kind with the same string, and keeps no
    hash of its own (the string keeps one)."""
    keys: list[Any] = [
        model.ProfileLabelsKey("kns.prod"),
        model.ProfileRulesKey("kns.prod"),
        model.TierKey("kns.prod"),
        model.IPPoolKey("10.0.0.0/16"),
        model.BlockKey("10.0.0.0/16"),
        model.HostIPKey("node-a"),
        model.WireguardKey("node-a"),
    ]
    table = {key: n for n, key in enumerate(keys)}
    assert len(table) == len(keys)
    for n, key in enumerate(keys):
        again = type(key)(*attrs.astuple(key))
        assert again == key
        assert hash(again) == hash(key)
        assert table[again] == n
        assert not hasattr(key, "_hash")
    assert len({hash(key) for key in keys[:3]}) == 3
