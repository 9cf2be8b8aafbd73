"""Kubernetes NetworkPolicy as Calico converts it, case by case (the cases and the strings
expected are those of Calico's own conversion tests, libcalico-go/lib/backend/k8s/conversion
and the network policy update processor), and the API server's validation of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from pyfelix import messages as m
from pyfelix import model
from pyfelix.dryrun import compute
from pyfelix.explain import Explainer, Flow, policy_label
from pyfelix.resources import (
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    KubernetesClusterNetworkPolicy,
    KubernetesNetworkPolicy,
    Pod,
    load_text,
)
from pyfelix.resources.k8s_conversion import (
    ConversionError,
    admin_network_policy,
    baseline_admin_network_policy,
    cluster_network_policy,
    k8s_selector,
    network_policy,
    simplify_ports,
    workload_endpoint,
    workload_endpoint_name,
)
from pyfelix.resources.k8s_policy import LabelSelector, LabelSelectorRequirement
from pyfelix.syncer.processors import convert
from pyfelix.validation import ValidationContext, validate_resource
from pyfelix.values import FrozenMap, Port
from pyfelix_dataplane.rules.policy import policy_chain_name


def knp(spec: dict[str, Any], name: str = "allow", namespace: str = "default") -> Any:
    doc = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return KubernetesNetworkPolicy.from_manifest(doc)


def requirement(key: str, operator: str, *values: str) -> LabelSelectorRequirement:
    return LabelSelectorRequirement(key, operator, values)


@pytest.mark.parametrize(
    ("selector", "pods", "expected"),
    [
        (LabelSelector(), True, "projectcalico.org/orchestrator == 'k8s'"),
        (None, True, "projectcalico.org/orchestrator == 'k8s'"),
        (
            LabelSelector(FrozenMap({"label2": "value2", "label": "value"})),
            True,
            "projectcalico.org/orchestrator == 'k8s' && label == 'value' && label2 == 'value2'",
        ),
        (
            LabelSelector(match_expressions=(requirement("k", "In", "v1", "v2"),)),
            True,
            "projectcalico.org/orchestrator == 'k8s' && k in { 'v1', 'v2' }",
        ),
        (
            LabelSelector(
                match_expressions=(
                    requirement("toast", "DoesNotExist"),
                    requirement("k", "NotIn", "a"),
                    requirement("e", "Exists"),
                )
            ),
            True,
            "projectcalico.org/orchestrator == 'k8s' && ! has(toast) && k not in { 'a' } && has(e)",
        ),
        (LabelSelector(), False, "all()"),
        (None, False, ""),
        (
            LabelSelector(FrozenMap({"namespaceRole": "dev", "namespaceFoo": "bar"})),
            False,
            "namespaceFoo == 'bar' && namespaceRole == 'dev'",
        ),
    ],
)
def test_label_selectors(selector: LabelSelector | None, pods: bool, expected: str) -> None:
    assert k8s_selector(selector, pods=pods) == expected


def test_identity_tier_order_and_types() -> None:
    """Same name and namespace, tier default at order 1000; Ingress when policyTypes is
    absent, even with egress rules (Calico infers nothing; the API server fills it in)."""
    converted = network_policy(knp({"podSelector": {}, "egress": [{}]}))
    assert (converted.name, converted.namespace) == ("allow", "default")
    assert (converted.spec.tier, converted.spec.order) == ("default", 1000.0)
    assert converted.spec.selector == "projectcalico.org/orchestrator == 'k8s'"
    assert converted.spec.types == ("Ingress",)
    both = network_policy(knp({"podSelector": {}, "policyTypes": ["Egress", "Ingress"]}))
    assert both.spec.types == ("Ingress", "Egress")


def test_rules_per_protocol_then_peer_with_ports_merged() -> None:
    """A rule per protocol (sorted) and peer (in order); the ports of a protocol together,
    merged into ranges, named ports first."""
    spec = {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [
            {
                "from": [
                    {"podSelector": {"matchLabels": {"k": "v", "k2": "v2"}}},
                    {"namespaceSelector": {}},
                ],
                "ports": [
                    {"port": 443},
                    {"port": 80},
                    {"port": "foo"},
                    {"port": 81},
                    {"protocol": "UDP", "port": 53},
                ],
            }
        ],
    }
    rules = network_policy(knp(spec)).spec.ingress
    assert [(r.protocol, r.source.selector, r.source.namespace_selector) for r in rules] == [
        ("TCP", "projectcalico.org/orchestrator == 'k8s' && k == 'v' && k2 == 'v2'", ""),
        ("TCP", "projectcalico.org/orchestrator == 'k8s'", "all()"),
        ("UDP", "projectcalico.org/orchestrator == 'k8s' && k == 'v' && k2 == 'v2'", ""),
        ("UDP", "projectcalico.org/orchestrator == 'k8s'", "all()"),
    ]
    assert [str(p) for p in rules[0].destination.ports] == ["foo", "80:81", "443"]
    assert [str(p) for p in rules[2].destination.ports] == ["53"]
    assert {r.action for r in rules} == {"Allow"}


def test_simplify_ports_as_calico() -> None:
    def ports(*given: int | str) -> list[str]:
        return [str(p) for p in simplify_ports([Port.parse(g) for g in given])]

    assert ports(80, "foo") == ["80", "foo"]
    assert ports(443, 80, 81) == ["80:81", "443"]
    assert ports(80, "foo", 81) == ["foo", "80:81"]
    assert ports("80:82", 83, 90) == ["80:83", "90"]


def test_peers_ports_and_empty_rules() -> None:
    """No peers: any source; no ports: any protocol; a protocol alone: all its ports; an
    endPort a range; an ipBlock masked, with its exceptions."""
    spec = {
        "podSelector": {},
        "ingress": [
            {},
            {"ports": [{"protocol": "UDP"}, {"protocol": "UDP", "port": 53}]},
            {"ports": [{"port": 8000, "endPort": 8080}]},
            {"from": [{"ipBlock": {"cidr": "10.0.0.1/8", "except": ["10.1.0.0/16"]}}]},
        ],
        "egress": [{"to": [{"podSelector": {}}], "ports": [{"port": 53, "protocol": "UDP"}]}],
        "policyTypes": ["Ingress", "Egress"],
    }
    spec_out = network_policy(knp(spec)).spec
    anything, udp, ranged, block = spec_out.ingress
    assert (anything.protocol, anything.source, anything.destination.ports) == (
        None,
        type(anything.source)(),
        (),
    )
    assert (udp.protocol, udp.destination.ports) == ("UDP", ())
    assert [str(p) for p in ranged.destination.ports] == ["8000:8080"]
    assert (block.source.nets, block.source.not_nets) == (("10.0.0.0/8",), ("10.1.0.0/16",))
    (egress,) = spec_out.egress
    assert egress.source == type(egress.source)()
    assert egress.destination.selector == "projectcalico.org/orchestrator == 'k8s'"
    assert [str(p) for p in egress.destination.ports] == ["53"]


def test_an_empty_ingress_list_admits_nothing() -> None:
    assert network_policy(knp({"podSelector": {}, "ingress": []})).spec.ingress == ()


def test_felix_sees_a_kubernetes_network_policy() -> None:
    """Keyed by the Kubernetes kind, selecting the namespace's pods, with rule selectors as
    the update processor writes them; chains named knp/<namespace>/<name> (hashed when long)."""
    spec: dict[str, Any] = {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}
    ((key, value),) = convert(knp(spec))
    assert isinstance(value, model.Policy)
    assert key == model.PolicyKey("allow", "default", "KubernetesNetworkPolicy", "default")
    assert value.order == 1000.0
    assert value.selector == (
        "(projectcalico.org/orchestrator == 'k8s') && projectcalico.org/namespace == 'default'"
    )
    assert value.inbound_rules[0].src_selector == (
        "(has(projectcalico.org/namespace)) && (projectcalico.org/orchestrator == 'k8s')"
    )
    assert isinstance(value.origin, KubernetesNetworkPolicy)
    short = m.PolicyID("default", "allow", "default", "KubernetesNetworkPolicy")
    assert policy_chain_name(short, True) == "cali-pi-knp/default/allow"
    assert policy_chain_name(short, False) == "cali-po-knp/default/allow"
    long = m.PolicyID("default", "allow-from-frontend", "default", "KubernetesNetworkPolicy")
    assert policy_chain_name(long, True) == "cali-pi-_Ky8Y9BNvuL3w6nNf2th"


def test_one_policy_in_every_namespace_is_scoped_to_each() -> None:
    """The same policy in many namespaces (a cluster's default deny or isolation policy): its
    spec is decoded and converted once and shared, and each copy still selects, and admits
    from, its own namespace's pods only."""
    spec: dict[str, Any] = {
        "podSelector": {},
        "ingress": [{"from": [{"podSelector": {}}]}],
        "policyTypes": ["Ingress"],
    }
    first, second = knp(spec, "isolation", "tenant-a"), knp(spec, "isolation", "tenant-b")
    assert first.spec is second.spec
    assert network_policy(first).spec is network_policy(second).spec
    for policy, namespace in ((first, "tenant-a"), (second, "tenant-b")):
        ((key, value),) = convert(policy)
        assert isinstance(value, model.Policy)
        assert key == model.PolicyKey("isolation", namespace, "KubernetesNetworkPolicy", "default")
        scoped = f"projectcalico.org/namespace == '{namespace}'"
        assert value.selector.endswith(scoped)
        assert value.inbound_rules[0].src_selector == (
            f"({scoped}) && (projectcalico.org/orchestrator == 'k8s')"
        )
    bad = knp({**spec, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}, "b")
    assert bad.spec is not first.spec


def test_beside_a_calico_policy_of_the_same_name() -> None:
    """kind NetworkPolicy is Kubernetes' or Calico's by apiVersion; both load, apart."""
    text = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: x}
spec: {podSelector: {}}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: x}
spec: {selector: all()}
"""
    loaded = load_text(text, "both.yaml")
    assert loaded.problems == ()
    assert [r.resource.ident for r in loaded.resources] == [
        "NetworkPolicy.networking.k8s.io/x/web",
        "NetworkPolicy/x/web",
    ]
    assert loaded.resources[0].resource.to_manifest()["kind"] == "NetworkPolicy"


INVALID = [
    (
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
        "spec.podSelector.matchExpressions[0].values",
        "must be specified",
    ),
    (
        {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}},
        "spec.podSelector.matchExpressions[0].operator",
        "'Is'",
    ),
    ({"podSelector": {}, "policyTypes": ["Sideways"]}, "spec.policyTypes[0]", "'Sideways'"),
    (
        {"podSelector": {}, "ingress": [{"from": [{}]}]},
        "spec.ingress[0].from[0]",
        "must specify a peer",
    ),
    (
        {
            "podSelector": {},
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}, "podSelector": {}}]}],
        },
        "spec.egress[0].to[0]",
        "ipBlock together",
    ),
    (
        {
            "podSelector": {},
            "ingress": [
                {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}
            ],
        },
        "spec.ingress[0].from[0].ipBlock.except[0]",
        "strict subset",
    ),
    (
        {
            "podSelector": {},
            "ingress": [
                {"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/16"]}}]}
            ],
        },
        "spec.ingress[0].from[0].ipBlock.except[0]",
        "strict subset",
    ),
    (
        {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0/16"}}]}]},
        "spec.ingress[0].from[0].ipBlock.cidr",
        "invalid CIDR",
    ),
    (
        {"podSelector": {}, "ingress": [{"ports": [{"port": 0}]}]},
        "spec.ingress[0].ports[0].port",
        "between 1 and 65535",
    ),
    (
        {"podSelector": {}, "ingress": [{"ports": [{"port": "Web_Port"}]}]},
        "spec.ingress[0].ports[0].port",
        "invalid port name",
    ),
    (
        {"podSelector": {}, "ingress": [{"ports": [{"port": "http", "endPort": 90}]}]},
        "spec.ingress[0].ports[0].endPort",
        "not a number",
    ),
    (
        {"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]},
        "spec.ingress[0].ports[0].endPort",
        "greater than or equal",
    ),
    (
        {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]},
        "spec.ingress[0].ports[0].protocol",
        "'ICMP'",
    ),
]


@pytest.mark.parametrize(("spec", "path", "words"), INVALID)
def test_validation_names_the_field(spec: dict[str, Any], path: str, words: str) -> None:
    problems = validate_resource(knp(spec), ValidationContext())
    assert [p.field for p in problems] == [path], problems
    assert words in problems[0].message


def test_a_valid_policy_has_no_problems() -> None:
    spec = {
        "podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}, "podSelector": {}}],
                "ports": [{"port": "http"}, {"port": 80, "endPort": 90}],
            }
        ],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}],
    }
    assert validate_resource(knp(spec), ValidationContext()) == []


def pod(
    name: str = "podA",
    namespace: str = "default",
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **metadata: Any,
) -> Pod:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": {"nodeName": "nodeA", **(spec or {})},
    }
    if status is not None:
        doc["status"] = status
    return Pod.from_manifest(doc)


RUNNING = {
    "phase": "Running",
    "podIP": "192.168.0.1",
    "podIPs": [{"ip": "192.168.0.1"}, {"ip": "fd5f::1"}],
}


def test_pod_becomes_its_workload_endpoint() -> None:
    """Name, node, labels, profiles, addresses, veth name and named ports as Calico makes
    them (conversion_test.go's pod podA: cali7f94ce7c295)."""
    containers = [
        {
            "name": "c",
            "image": "x",
            "ports": [
                {"name": "http", "containerPort": 80},
                {"containerPort": 9000},
                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"containerPort": 8443, "hostPort": 443},
            ],
        },
    ]
    wep = workload_endpoint(
        pod(
            spec={"serviceAccountName": "web", "containers": containers},
            status=RUNNING,
            labels={"app": "a"},
            annotations={"cni.projectcalico.org/containerID": "abc"},
        )
    )
    assert wep is not None
    assert (wep.name, wep.namespace) == ("nodeA-k8s-podA-eth0", "default")
    assert wep.spec.interface_name == "cali7f94ce7c295"
    assert (wep.spec.node, wep.spec.pod, wep.spec.endpoint, wep.spec.container_id) == (
        "nodeA",
        "podA",
        "eth0",
        "abc",
    )
    assert wep.spec.ip_networks == ("192.168.0.1/32", "fd5f::1/128")
    assert wep.spec.profiles == ("kns.default", "ksa.default.web")
    assert dict(wep.labels) == {
        "app": "a",
        "projectcalico.org/namespace": "default",
        "projectcalico.org/orchestrator": "k8s",
        "projectcalico.org/serviceaccount": "web",
    }
    assert [(p.name, p.protocol, p.port, p.host_port) for p in wep.spec.ports] == [
        ("http", "TCP", 80, 0),
        ("dns", "UDP", 53, 0),
        ("", "TCP", 8443, 443),
    ]
    assert workload_endpoint_name("node-1", "my-pod") == "node--1-k8s-my--pod-eth0"


def test_pods_that_are_not_endpoints_or_have_no_address() -> None:
    assert workload_endpoint(pod(spec={"hostNetwork": True}, status=RUNNING)) is None
    unscheduled = Pod.from_manifest(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": {}}
    )
    assert workload_endpoint(unscheduled) is None
    finished = workload_endpoint(pod(status={**RUNNING, "phase": "Succeeded"}))
    assert finished is not None
    assert finished.spec.ip_networks == ()
    released = pod(
        status=RUNNING,
        deletionTimestamp="2026-12-01T00:00:00Z",
        annotations={"cni.projectcalico.org/podIP": ""},
    )
    assert workload_endpoint(released).spec.ip_networks == ()  # type: ignore[union-attr]
    by_annotation = pod(annotations={"cni.projectcalico.org/podIPs": "10.0.0.1,fd00::1"})
    assert workload_endpoint(by_annotation).spec.ip_networks == ("10.0.0.1/32", "fd00::1/128")  # type: ignore[union-attr]
    assert convert(pod(status={"phase": "Pending"})) == [
        (model.WorkloadEndpointKey("nodeA", "k8s", "default/podA", "eth0"), None)
    ]


def test_kubectl_dump_of_mixed_kinds_loads_as_it_is() -> None:
    """A List as ``kubectl get -A -o yaml pods,namespaces,serviceaccounts,networkpolicies,
    services,endpointslices`` prints it, with status and managedFields, loads without a
    problem; a misspelt field is still one."""
    dump = (Path(__file__).parent / "golden" / "kubectl-dump.yaml").read_text()
    loaded = load_text(dump, "dump.yaml")
    assert loaded.problems == ()
    assert sorted({type(r.resource).__name__ for r in loaded.resources}) == [
        "EndpointSlice",
        "KubernetesNetworkPolicy",
        "Namespace",
        "Pod",
        "Service",
        "ServiceAccount",
    ]
    broken = load_text(dump.replace("terminationMessagePath", "terminationMesagePath"), "d.yaml")
    assert [p.field for p in broken.problems] == ["spec.containers[0].terminationMesagePath"]


def test_explanations_name_the_kubernetes_policy() -> None:
    """explain (and the demo) say which Kubernetes NetworkPolicy decides a flow, and when
    Kubernetes' isolation drops it."""
    loaded = load_text((Path(__file__).parent / "golden" / "kubectl-dump.yaml").read_text(), "d")
    frontend = """
apiVersion: v1
kind: Pod
metadata: {name: frontend, namespace: default, labels: {role: frontend}}
spec: {nodeName: node-1}
status: {phase: Running, podIPs: [{ip: 10.65.0.6}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: default}
spec: {nodeName: node-1}
status: {phase: Running, podIPs: [{ip: 10.65.0.7}]}
"""
    resources = [r.resource for r in loaded.resources + load_text(frontend, "f").resources]
    _, state = compute(resources, "node-1")
    explainer = Explainer(state)
    allowed = explainer.explain(Flow("10.65.0.6", "10.65.0.5", "tcp", 80))
    assert allowed.allowed
    assert "ingress allowed by Kubernetes NetworkPolicy default/web-from-frontend" in allowed.reason
    denied = explainer.explain(Flow("10.65.0.7", "10.65.0.5", "tcp", 80))
    assert not denied.allowed
    assert denied.reason == (
        "ingress dropped at the end of tier default (selected by Kubernetes NetworkPolicy "
        "default/web-from-frontend, none allows it)"
    )


def cnp(spec: dict[str, Any], name: str = "cnp") -> KubernetesClusterNetworkPolicy:
    doc = {
        "apiVersion": "policy.networking.k8s.io/v1alpha2",
        "kind": "ClusterNetworkPolicy",
        "metadata": {"name": name},
        "spec": {"tier": "Admin", "priority": 10, "subject": {"namespaces": {}}, **spec},
    }
    return KubernetesClusterNetworkPolicy.from_manifest(doc)


def test_cluster_network_policy_as_calico_converts_it() -> None:
    """Tier kube-admin or kube-baseline, order its priority, Accept as Allow, a rule per
    protocol (a named port has none, so it sorts first) and peer, rule names kept, types
    from the rules; Felix sees kind KubernetesClusterNetworkPolicy, id kcnp/<name>."""
    policy = cnp(
        {
            "ingress": [
                {
                    "name": "from-monitoring",
                    "action": "Accept",
                    "from": [
                        {"namespaces": {"matchLabels": {"team": "mon"}}},
                        {
                            "pods": {
                                "namespaceSelector": {},
                                "podSelector": {"matchLabels": {"a": "b"}},
                            }
                        },
                    ],
                    "protocols": [
                        {"tcp": {"destinationPort": {"number": 443}}},
                        {"destinationNamedPort": "metrics"},
                        {"tcp": {"destinationPort": {"range": {"start": 80, "end": 81}}}},
                    ],
                }
            ],
        }
    )
    converted = cluster_network_policy(policy)
    assert converted is not None
    spec = converted.spec
    assert (spec.tier, spec.order, spec.types) == ("kube-admin", 10.0, ("Ingress",))
    assert (spec.selector, spec.namespace_selector) == (
        "projectcalico.org/orchestrator == 'k8s'",
        "all()",
    )
    shown = [
        (
            r.action,
            r.protocol,
            r.source.selector,
            r.source.namespace_selector,
            [str(p) for p in r.destination.ports],
        )
        for r in spec.ingress
    ]
    assert shown == [
        ("Allow", None, "", "team == 'mon'", ["metrics"]),
        (
            "Allow",
            None,
            "projectcalico.org/orchestrator == 'k8s' && a == 'b'",
            "all()",
            ["metrics"],
        ),
        ("Allow", "TCP", "", "team == 'mon'", ["80:81", "443"]),
        (
            "Allow",
            "TCP",
            "projectcalico.org/orchestrator == 'k8s' && a == 'b'",
            "all()",
            ["80:81", "443"],
        ),
    ]
    assert spec.ingress[0].metadata is not None
    assert dict(spec.ingress[0].metadata.annotations) == {"name": "from-monitoring"}
    ((key, value),) = convert(policy)
    assert key == model.PolicyKey("cnp", "", "KubernetesClusterNetworkPolicy", "kube-admin")
    assert isinstance(value, model.Policy)
    assert (
        value.selector
        == "(projectcalico.org/orchestrator == 'k8s') && has(projectcalico.org/namespace)"
    )
    short = m.PolicyID("kube-admin", "deny-all", "", "KubernetesClusterNetworkPolicy")
    assert policy_chain_name(short, True) == "cali-pi-kcnp/deny-all"


def test_cluster_policy_egress_networks_baseline_and_fail_closed() -> None:
    policy = cnp(
        {
            "tier": "Baseline",
            "subject": {
                "pods": {"namespaceSelector": {"matchLabels": {"x": "y"}}, "podSelector": {}}
            },
            "egress": [
                {"action": "Deny", "to": [{"networks": ["10.0.0.1/8", "fd00::/64"]}]},
                {"action": "Pass", "to": [{"networks": ["not-a-cidr"]}]},
                {"action": "Accept", "to": [{"networks": ["not-a-cidr"]}]},
            ],
        }
    )
    converted = cluster_network_policy(policy)
    assert converted is not None
    spec = converted.spec
    assert (spec.tier, spec.types, spec.namespace_selector) == (
        "kube-baseline",
        ("Egress",),
        "x == 'y'",
    )
    first, fail_closed = spec.egress
    assert (first.action, first.destination.nets) == ("Deny", ("10.0.0.0/8", "fd00::/64"))
    assert fail_closed == type(fail_closed)(action="Deny")


def test_builtin_cluster_tiers_need_no_tier_resource() -> None:
    """kube-admin before default before kube-baseline, both ending in Pass, as Calico
    creates them, though no Tier resource says so."""
    text = """
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x}
spec: {nodeName: node-1}
status: {phase: Running, podIPs: [{ip: 10.65.0.2}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec: {podSelector: {}}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: base}
spec:
  {tier: Baseline, priority: 1, subject: {namespaces: {}},
   ingress: [{action: Deny, from: [{namespaces: {}}]}]}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: admin}
spec:
  {tier: Admin, priority: 1, subject: {namespaces: {}},
   ingress: [{action: Pass, from: [{namespaces: {}}]}]}
"""
    _, state = compute([r.resource for r in load_text(text, "t").resources], "node-1")
    ((_, endpoint),) = state.workloads.items()
    assert [(t.name, t.default_action) for t in endpoint.tiers] == [
        ("kube-admin", "Pass"),
        ("default", "Deny"),
        ("kube-baseline", "Pass"),
    ]


CLUSTER_INVALID = [
    ({"tier": "Middle"}, "spec.tier", "'Middle'"),
    ({"priority": 1001}, "spec.priority", "between 0 and 1000"),
    ({"subject": {}}, "spec.subject", "exactly one of namespaces, pods"),
    (
        {"ingress": [{"action": "Allow", "from": [{"namespaces": {}}]}]},
        "spec.ingress[0].action",
        "'Allow'",
    ),
    ({"ingress": [{"action": "Deny", "from": []}]}, "spec.ingress[0].from", "1 to 25 peers"),
    (
        {"ingress": [{"action": "Deny", "from": [{"networks": ["10.0.0.0/8"]}]}]},
        "spec.ingress[0].from[0].networks",
        "only an egress peer",
    ),
    (
        {"egress": [{"action": "Deny", "to": [{"networks": ["10.0.0/8"]}]}]},
        "spec.egress[0].to[0].networks[0]",
        "invalid CIDR",
    ),
    (
        {"egress": [{"action": "Deny", "to": [{"namespaces": {}}], "protocols": [{"tcp": {}}]}]},
        "spec.egress[0].protocols[0].tcp.destinationPort",
        "must be specified",
    ),
    (
        {
            "egress": [
                {
                    "action": "Deny",
                    "to": [{"namespaces": {}}],
                    "protocols": [
                        {"udp": {"destinationPort": {"range": {"start": 90, "end": 80}}}}
                    ],
                }
            ]
        },
        "spec.egress[0].protocols[0].udp.destinationPort.range",
        "less than end",
    ),
]


@pytest.mark.parametrize(("spec", "path", "words"), CLUSTER_INVALID)
def test_cluster_policy_validation_names_the_field(
    spec: dict[str, Any], path: str, words: str
) -> None:
    problems = validate_resource(cnp(spec), ValidationContext())
    assert [p.field for p in problems] == [path], problems
    assert words in problems[0].message


def test_admin_network_policies_as_calico_3_31_converted_them() -> None:
    """AdminNetworkPolicy: kanp.adminnetworkpolicy.<name> in tier adminnetworkpolicy, order
    its priority, ports TCP by default, a named port read as any port (as those releases
    did); BaselineAdminNetworkPolicy: kbanp.baselineadminnetworkpolicy.<name> at order 1000;
    a node peer cannot be converted and fails closed for Deny."""
    anp = AdminNetworkPolicy.from_manifest(
        {
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "AdminNetworkPolicy",
            "metadata": {"name": "guard"},
            "spec": {
                "priority": 7,
                "subject": {"namespaces": {"matchLabels": {"team": "a"}}},
                "ingress": [
                    {
                        "action": "Pass",
                        "from": [{"namespaces": {}}],
                        "ports": [
                            {"portNumber": {"port": 80}},
                            {"portRange": {"start": 90, "end": 92}},
                        ],
                    },
                    {
                        "action": "Allow",
                        "from": [{"namespaces": {}}],
                        "ports": [{"namedPort": "web"}],
                    },
                ],
                "egress": [{"action": "Deny", "to": [{"nodes": {}}]}],
            },
        }
    )
    converted = admin_network_policy(anp)
    assert converted is not None
    assert (converted.name, converted.spec.tier, converted.spec.order) == (
        "kanp.adminnetworkpolicy.guard",
        "adminnetworkpolicy",
        7.0,
    )
    passed, named = converted.spec.ingress
    assert (passed.action, passed.protocol, [str(p) for p in passed.destination.ports]) == (
        "Pass",
        "TCP",
        ["80", "90:92"],
    )
    assert (named.action, named.protocol, named.destination.ports) == ("Allow", None, ())
    assert converted.spec.egress == (type(passed)(action="Deny"),)
    ((key, _),) = convert(anp)
    assert key == model.PolicyKey(
        "kanp.adminnetworkpolicy.guard", "", "GlobalNetworkPolicy", "adminnetworkpolicy"
    )
    banp = BaselineAdminNetworkPolicy.from_manifest(
        {
            "apiVersion": "policy.networking.k8s.io/v1alpha1",
            "kind": "BaselineAdminNetworkPolicy",
            "metadata": {"name": "default"},
            "spec": {
                "subject": {"namespaces": {}},
                "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}],
            },
        }
    )
    base = baseline_admin_network_policy(banp)
    assert base is not None
    assert (base.name, base.spec.tier, base.spec.order) == (
        "kbanp.baselineadminnetworkpolicy.default",
        "baselineadminnetworkpolicy",
        1000.0,
    )
    renamed = attrs.evolve(banp, metadata=attrs.evolve(banp.metadata, name="second"))
    problems = validate_resource(renamed, ValidationContext())
    assert [p.field for p in problems] == ["metadata.name"]
    label = policy_label(
        "adminnetworkpolicy", m.PolicyID("adminnetworkpolicy", "kanp.adminnetworkpolicy.guard")
    )
    assert label == "Kubernetes AdminNetworkPolicy guard"


def test_qos_annotations_are_named_in_a_warning_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Calico's converter reads a pod's bandwidth, packet-rate, connection and DSCP
    annotations into qosControls; pyfelix programs none of them, so each one asked for is
    named in a warning (once: a cluster may shape thousands of pods), and the pod is still
    programmed."""
    from pyfelix.syncer.processors import endpoints  # noqa: PLC0415

    endpoints._QOS_WARNED.clear()
    annotations = {
        "kubernetes.io/ingress-bandwidth": "10M",
        "qos.projectcalico.org/egressMaxConnections": "100",
    }
    first = workload_endpoint(pod(status=RUNNING, annotations=annotations))
    second = workload_endpoint(pod("podB", status=RUNNING, annotations=annotations))
    assert first is not None
    assert second is not None
    assert first.spec.qos_controls == {"ingressBandwidth": "10M", "egressMaxConnections": "100"}
    with caplog.at_level("WARNING"):
        kvs = convert(first)
        convert(second)
    assert kvs[0][1] is not None, "the pod is programmed"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2
    assert "qosControls.egressMaxConnections" in warned[0]
    assert "qosControls.ingressBandwidth" in warned[1]
    assert "WorkloadEndpoint/default/nodeA-k8s-podA-eth0" in warned[0]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"cni.projectcalico.org/floatingIPs": '{"a": 1}'}, "must be a JSON list of strings"),
        ({"cni.projectcalico.org/floatingIPs": '["fd00::1"]'}, "no pod IP of the family"),
        ({"cni.projectcalico.org/allowedSourcePrefixes": "[1"}, "is not JSON"),
    ],
)
def test_validation_names_what_the_conversion_refuses(
    annotations: dict[str, str], message: str
) -> None:
    """A pod whose annotations Calico's converter refuses is invalid, named at its annotations
    (the check runs the conversion's fallible parts, not the whole conversion); and the
    conversion itself refuses it the same way."""
    refused = pod("pod-a", annotations=annotations, status={"podIP": "10.65.0.2"})
    problems = validate_resource(refused, ValidationContext())
    assert [p.field for p in problems] == ["metadata.annotations"]
    assert message in problems[0].message
    with pytest.raises(ConversionError, match=message):
        workload_endpoint(refused)
    fine = pod("pod-a", status={"podIP": "10.65.0.2"})
    assert validate_resource(fine, ValidationContext()) == []
