"""Calico's v3 validation rules: each kind's valid sample passes, and each rule, when broken,
names the field and says what is wrong."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.config.params import BY_JSON
from pyfelix.config.text import parse_felix_port_list
from pyfelix.errors import FieldProblem, ManifestError
from pyfelix.resources import FelixConfiguration, WorkloadEndpoint
from pyfelix.resources.meta import kind_for
from pyfelix.validation import (
    ParamError,
    ProtoPort,
    ValidationContext,
    parse_duration,
    parse_param,
    validate_resource,
)
from pyfelix.validation.common import Checker
from pyfelix.validation.kinds import _CHECKS, check_metadata
from tests.test_resources import SAMPLES, document

Doc = dict[str, Any]


def problems_of(doc: Doc, context: ValidationContext | None = None) -> list[FieldProblem]:
    cls = kind_for(doc["kind"], doc.get("apiVersion"))
    assert cls is not None
    return validate_resource(cls.from_manifest(doc), context)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_samples_are_valid(kind: str) -> None:
    """The realistic sample of every kind passes validation."""
    name = "default" if kind in ("ClusterInformation", "BaselineAdminNetworkPolicy") else "sample"
    assert problems_of(document(kind, name), ValidationContext("Any")) == []


def rule(**fields: Any) -> Doc:
    return {"action": "Allow", **fields}


def gnp(*, ingress: list[Doc] | None = None, egress: list[Doc] | None = None, **spec: Any) -> Doc:
    doc = document("GlobalNetworkPolicy", "p")
    doc["spec"] = {"ingress": ingress or [], "egress": egress or [], **spec}
    return doc


def with_spec(kind: str, name: str = "sample", **changes: Any) -> Doc:
    doc = document(kind, name)
    doc.setdefault("spec", {}).update(changes)
    return doc


def with_meta(kind: str, **changes: Any) -> Doc:
    doc = document(kind)
    doc["metadata"].update(changes)
    return doc


CASES: list[tuple[str, Callable[[], Doc], str, str]] = [
    # Names, labels, annotations.
    ("bad name", lambda: document("Profile", "Bad_Name"), "metadata.name", "invalid name"),
    ("long name", lambda: document("Profile", "a" * 254), "metadata.name", "too long by 1"),
    ("tier name is a label", lambda: document("Tier", "a.b"), "metadata.name", "invalid name"),
    (
        "policy name with two dots",
        lambda: document("GlobalNetworkPolicy", "a.b.c"),
        "metadata.name",
        "invalid policy name",
    ),
    (
        "namespace name",
        lambda: with_meta("NetworkSet", namespace="Prod"),
        "metadata.namespace",
        "invalid name",
    ),
    (
        "label key",
        lambda: with_meta("Profile", labels={"-bad": "x"}),
        "metadata.labels.-bad",
        "invalid label key",
    ),
    (
        "label value",
        lambda: with_meta("Profile", labels={"ok": "a b"}),
        "metadata.labels.ok",
        "invalid label value",
    ),
    (
        "label value length",
        lambda: with_meta("Profile", labels={"ok": "x" * 64}),
        "metadata.labels.ok",
        "no more than 63",
    ),
    (
        "annotation key",
        lambda: with_meta("Profile", annotations={"a/b/c": "x"}),
        "metadata.annotations.a/b/c",
        "invalid annotation key",
    ),
    # Rules.
    ("action", lambda: gnp(ingress=[{"action": "allow"}]), "spec.ingress[0].action", "Allow"),
    ("no action", lambda: gnp(ingress=[{}]), "spec.ingress[0].action", "an action is required"),
    (
        "protocol case",
        lambda: gnp(ingress=[rule(protocol="tcp")]),
        "spec.ingress[0].protocol",
        "did you mean 'TCP'",
    ),
    (
        "protocol number",
        lambda: gnp(ingress=[rule(protocol=0)]),
        "spec.ingress[0].protocol",
        "must be 1-255",
    ),
    (
        "ipVersion",
        lambda: gnp(ingress=[rule(ipVersion=5)]),
        "spec.ingress[0].ipVersion",
        "4 or 6",
    ),
    (
        "numeric port needs protocol",
        lambda: gnp(ingress=[rule(destination={"ports": [80]})]),
        "spec.ingress[0].destination.ports",
        "must set protocol to TCP, UDP or SCTP",
    ),
    (
        "ports need a port protocol",
        lambda: gnp(ingress=[rule(protocol="ICMP", source={"ports": ["http"]})]),
        "spec.ingress[0].source.ports",
        "not 'ICMP'",
    ),
    (
        "port range order",
        lambda: gnp(ingress=[rule(protocol="TCP", destination={"notPorts": ["90:80"]})]),
        "spec.ingress[0].destination.notPorts[0]",
        "greater than maximum",
    ),
    (
        "port zero",
        lambda: gnp(ingress=[rule(protocol="UDP", destination={"ports": [0]})]),
        "spec.ingress[0].destination.ports[0]",
        "between 1 and 65535",
    ),
    (
        "port too big",
        lambda: gnp(ingress=[rule(protocol="UDP", destination={"ports": ["1:70000"]})]),
        "spec.ingress[0].destination.ports[0]",
        "between 1 and 65535",
    ),
    (
        "named port syntax",
        lambda: gnp(ingress=[rule(destination={"ports": ["Web_Port"]})]),
        "spec.ingress[0].destination.ports[0]",
        "invalid named port",
    ),
    (
        "icmp needs icmp protocol",
        lambda: gnp(ingress=[rule(protocol="TCP", icmp={"type": 8})]),
        "spec.ingress[0].icmp",
        "require protocol to be ICMP or ICMPv6",
    ),
    (
        "icmp type range",
        lambda: gnp(ingress=[rule(protocol="ICMP", icmp={"type": 255})]),
        "spec.ingress[0].icmp.type",
        "0-254",
    ),
    (
        "icmp code range",
        lambda: gnp(ingress=[rule(protocol="ICMP", notICMP={"type": 3, "code": 256})]),
        "spec.ingress[0].notICMP.code",
        "0-255",
    ),
    (
        "icmp code without type",
        lambda: gnp(ingress=[rule(protocol="ICMP", icmp={"code": 1})]),
        "spec.ingress[0].icmp.code",
        "without an ICMP type",
    ),
    (
        "icmpv6 with ipVersion 4",
        lambda: gnp(ingress=[rule(protocol="ICMPv6", ipVersion=4)]),
        "spec.ingress[0].protocol",
        "requires ipVersion 6",
    ),
    (
        "bad CIDR",
        lambda: gnp(ingress=[rule(source={"nets": ["10.0.0.300/8"]})]),
        "spec.ingress[0].source.nets[0]",
        "invalid CIDR",
    ),
    (
        "host bits",
        lambda: gnp(ingress=[rule(source={"nets": ["10.0.0.1/8"]})]),
        "spec.ingress[0].source.nets[0]",
        "host bits",
    ),
    (
        "mixed families",
        lambda: gnp(ingress=[rule(source={"nets": ["10.0.0.0/8"], "notNets": ["fd00::/8"]})]),
        "spec.ingress[0]",
        "both IPv4 and IPv6",
    ),
    (
        "family vs ipVersion",
        lambda: gnp(ingress=[rule(ipVersion=6, destination={"nets": ["10.0.0.0/8"]})]),
        "spec.ingress[0].ipVersion",
        "doesn't match",
    ),
    (
        "catch-all notNets",
        lambda: gnp(ingress=[rule(source={"notNets": ["0.0.0.0/0"]})]),
        "spec.ingress[0].source.notNets[0]",
        "catch-all",
    ),
    (
        "rule selector",
        lambda: gnp(ingress=[rule(source={"selector": "a =="})]),
        "spec.ingress[0].source.selector",
        "at position 4",
    ),
    (
        "global() in a rule selector",
        lambda: gnp(ingress=[rule(source={"selector": "global()"})]),
        "spec.ingress[0].source.selector",
        "global() can only be used",
    ),
    (
        "global() combined",
        lambda: gnp(ingress=[rule(source={"namespaceSelector": "global() || has(a)"})]),
        "spec.ingress[0].source.namespaceSelector",
        "cannot be combined",
    ),
    (
        "service with ports",
        lambda: gnp(
            egress=[
                rule(
                    protocol="TCP",
                    destination={"services": {"name": "s", "namespace": "n"}, "ports": [80]},
                )
            ]
        ),
        "spec.egress[0].destination",
        "cannot be specified with services",
    ),
    (
        "service with selector",
        lambda: gnp(
            egress=[
                rule(
                    destination={
                        "services": {"name": "s", "namespace": "n"},
                        "selector": "a == 'b'",
                    }
                )
            ]
        ),
        "spec.egress[0].destination.services",
        "cannot specify selector and services",
    ),
    (
        "service in ingress destination",
        lambda: gnp(ingress=[rule(destination={"services": {"name": "s", "namespace": "n"}})]),
        "spec.ingress[0].destination.services",
        "not allowed in ingress rule destination",
    ),
    (
        "service namespace in global policy",
        lambda: gnp(egress=[rule(destination={"services": {"name": "s"}})]),
        "spec.egress[0].destination.services.namespace",
        "must specify a namespace",
    ),
    (
        "service name",
        lambda: gnp(egress=[rule(destination={"services": {"namespace": "n"}})]),
        "spec.egress[0].destination.services.name",
        "must specify a service name",
    ),
    (
        "http on deny",
        lambda: gnp(ingress=[{"action": "Deny", "http": {"methods": ["GET"]}}]),
        "spec.ingress[0].http",
        "only valid on Allow rules",
    ),
    (
        "http path",
        lambda: gnp(ingress=[rule(http={"paths": [{"exact": "/a", "prefix": "/b"}]})]),
        "spec.ingress[0].http.paths[0]",
        "exactly one",
    ),
    (
        "service account selector in rule",
        lambda: gnp(ingress=[rule(source={"serviceAccounts": {"selector": "(("}})]),
        "spec.ingress[0].source.serviceAccounts.selector",
        "invalid selector",
    ),
    # Policy specs.
    ("policy selector", lambda: gnp(selector="a in"), "spec.selector", "invalid selector"),
    ("policy types", lambda: gnp(types=["ingress"]), "spec.types[0]", "Ingress, Egress"),
    (
        "duplicate types",
        lambda: gnp(types=["Ingress", "Ingress"]),
        "spec.types[1]",
        "more than once",
    ),
    (
        "preDNAT and doNotTrack",
        lambda: gnp(preDNAT=True, doNotTrack=True, applyOnForward=True),
        "spec",
        "cannot both be true",
    ),
    (
        "preDNAT egress",
        lambda: gnp(preDNAT=True, applyOnForward=True, egress=[rule()]),
        "spec.egress",
        "cannot have any egress rules",
    ),
    (
        "applyOnForward",
        lambda: gnp(doNotTrack=True),
        "spec.applyOnForward",
        "must be true",
    ),
    ("tier name", lambda: gnp(tier="Sec"), "spec.tier", "invalid name"),
    (
        "staged delete with fields",
        lambda: with_spec("StagedNetworkPolicy", selector="all()"),
        "spec",
        "must be empty if stagedAction is Delete",
    ),
    (
        "staged action",
        lambda: with_spec("StagedGlobalNetworkPolicy", stagedAction="Apply"),
        "spec.stagedAction",
        "Set, Delete, Learn, Ignore",
    ),
    (
        "tier default action",
        lambda: with_spec("Tier", defaultAction="Allow"),
        "spec.defaultAction",
        "Deny, Pass",
    ),
    (
        "default tier order",
        lambda: with_spec("Tier", "default", order=5, defaultAction="Deny"),
        "spec.order",
        "must be 1e+06",
    ),
    (
        "profile labels",
        lambda: with_spec("Profile", labelsToApply={"a": "b c"}),
        "spec.labelsToApply.a",
        "invalid label value",
    ),
    # Endpoints.
    (
        "workload interface missing",
        lambda: with_spec("WorkloadEndpoint", interfaceName=""),
        "spec.interfaceName",
        "required",
    ),
    (
        "workload interface too long",
        lambda: with_spec("WorkloadEndpoint", interfaceName="cali1234567890123"),
        "spec.interfaceName",
        "1-15 characters",
    ),
    (
        "workload network is one address",
        lambda: with_spec("WorkloadEndpoint", ipNetworks=["10.65.0.0/24"]),
        "spec.ipNetworks[0]",
        "multiple addresses",
    ),
    (
        "NAT outside endpoint",
        lambda: with_spec(
            "WorkloadEndpoint", ipNATs=[{"internalIP": "10.9.9.9", "externalIP": "1.2.3.4"}]
        ),
        "spec.ipNATs[0].internalIP",
        "not in the endpoint networks",
    ),
    ("workload mac", lambda: with_spec("WorkloadEndpoint", mac="zz"), "spec.mac", "invalid MAC"),
    (
        "workload port protocol",
        lambda: with_spec(
            "WorkloadEndpoint",
            ports=[{"name": "x", "protocol": "ICMP", "port": 1, "hostPort": 0, "hostIP": ""}],
        ),
        "spec.ports[0].protocol",
        "does not support ports",
    ),
    (
        "workload gateway family",
        lambda: with_spec("WorkloadEndpoint", ipv4Gateway="fe80::1"),
        "spec.ipv4Gateway",
        "not an IPv4",
    ),
    (
        "host endpoint needs node",
        lambda: with_spec("HostEndpoint", node=""),
        "spec.node",
        "node must be specified",
    ),
    (
        "host endpoint needs an interface or IPs",
        lambda: with_spec("HostEndpoint", interfaceName="", expectedIPs=[]),
        "spec",
        "interfaceName or expectedIPs",
    ),
    (
        "host endpoint port name",
        lambda: with_spec("HostEndpoint", ports=[{"name": "", "protocol": "TCP", "port": 22}]),
        "spec.ports[0].name",
        "required",
    ),
    (
        "host endpoint expected IPs",
        lambda: with_spec("HostEndpoint", expectedIPs=["10.0.0.0/8"]),
        "spec.expectedIPs[0]",
        "invalid IP address",
    ),
    # Networks.
    (
        "network set CIDR",
        lambda: with_spec("GlobalNetworkSet", nets=["nope"]),
        "spec.nets[0]",
        "invalid CIDR",
    ),
    (
        # It would reach wireguard-go's command line as an option.
        "WireGuard interface name starting with -",
        lambda: with_spec("FelixConfiguration", wireguardInterfaceName="-h"),
        "spec.wireguardInterfaceName",
        "interface name",
    ),
    (
        "InterfaceExclude regex that does not compile",
        lambda: with_spec("FelixConfiguration", interfaceExclude="kube-ipvs0,/eth[/"),
        "spec.interfaceExclude",
        "invalid regular expression",
    ),
    (
        "workload interface name starting with -",
        lambda: with_spec("WorkloadEndpoint", interfaceName="-cali1"),
        "spec.interfaceName",
        "not starting with -",
    ),
    (
        # Python's ipaddress takes a zone; Calico's parser, ipset and iptables do not.
        "network set IPv6 zone",
        lambda: with_spec("GlobalNetworkSet", nets=["fe80::1%eth0/128"]),
        "spec.nets[0]",
        "invalid CIDR",
    ),
    (
        "host endpoint IPv6 zone",
        lambda: with_spec("HostEndpoint", expectedIPs=["fe80::1%eth0"]),
        "spec.expectedIPs[0]",
        "invalid IP address",
    ),
    (
        "network set namespace label",
        lambda: with_meta("NetworkSet", labels={"projectcalico.org/namespace": "x"}),
        "metadata.labels.projectcalico.org/namespace",
        "not a valid label name",
    ),
    ("pool CIDR", lambda: with_spec("IPPool", cidr="10.65.0.1/16"), "spec.cidr", "host bits"),
    (
        "pool link-local",
        lambda: with_spec("IPPool", cidr="169.254.0.0/16"),
        "spec.cidr",
        "link-local",
    ),
    (
        "pool block size",
        lambda: with_spec("IPPool", blockSize=33),
        "spec.blockSize",
        "between 20 and 32",
    ),
    (
        "pool smaller than block",
        lambda: with_spec("IPPool", cidr="10.65.0.0/28"),
        "spec.cidr",
        "too small",
    ),
    (
        "pool modes",
        lambda: with_spec("IPPool", ipipMode="Always"),
        "spec",
        "cannot both be enabled",
    ),
    ("pool mode value", lambda: with_spec("IPPool", vxlanMode="always"), "spec.vxlanMode", "Never"),
    (
        "pool uses",
        lambda: with_spec("IPPool", allowedUses=["Workload", "LoadBalancer"]),
        "spec.allowedUses",
        "cannot be combined",
    ),
    (
        "node VXLAN address",
        lambda: with_spec("Node", ipv4VXLANTunnelAddr="fd00::1"),
        "spec.ipv4VXLANTunnelAddr",
        "not an IPv4",
    ),
    (
        "node wireguard key",
        lambda: {**document("Node"), "status": {"wireguardPublicKey": "abc"}},
        "status.wireguardPublicKey",
        "32 bytes",
    ),
    (
        "cluster information name",
        lambda: document("ClusterInformation", "other"),
        "metadata.name",
        "must be named 'default'",
    ),
    (
        "BGP service CIDR",
        lambda: with_spec("BGPConfiguration", serviceClusterIPs=[{"cidr": "10.96.0.1/12"}]),
        "spec.serviceClusterIPs[0].cidr",
        "host bits",
    ),
    (
        "IPAM block affinity",
        lambda: with_spec("IPAMBlock", affinity="node-a"),
        "spec.affinity",
        "host:<node>",
    ),
    (
        "block affinity state",
        lambda: with_spec("BlockAffinity", state="done"),
        "spec.state",
        "confirmed",
    ),
    (
        "endpoint slice address",
        lambda: {**document("EndpointSlice"), "endpoints": [{"addresses": ["fd00::1"]}]},
        "endpoints[0].addresses[0]",
        "not an IPv4",
    ),
    (
        "service port protocol",
        lambda: with_spec("Service", ports=[{"protocol": "tcp", "port": 80}]),
        "spec.ports[0].protocol",
        "TCP, UDP, SCTP",
    ),
    # FelixConfiguration.
    (
        "duration",
        lambda: with_spec("FelixConfiguration", reportingTTL="90 seconds"),
        "spec.reportingTTL",
        "invalid duration",
    ),
    (
        "enum",
        lambda: with_spec("FelixConfiguration", logSeverityScreen="Loud"),
        "spec.logSeverityScreen",
        "Trace|Debug|Info|Warning|Error|Fatal".replace("|", ", "),
    ),
    (
        "int range",
        lambda: with_spec("FelixConfiguration", wireguardListeningPort=70000),
        "spec.wireguardListeningPort",
        "above the maximum 65535",
    ),
    (
        "mark bits",
        lambda: with_spec("FelixConfiguration", iptablesMarkMask=0x10000),
        "spec.iptablesMarkMask",
        "at least 2 bits",
    ),
    (
        "failsafe protocol",
        lambda: with_spec(
            "FelixConfiguration", failsafeInboundHostPorts=[{"protocol": "SCTP", "port": 22}]
        ),
        "spec.failsafeInboundHostPorts[0].protocol",
        "TCP or UDP",
    ),
    (
        "interface prefix",
        lambda: with_spec("FelixConfiguration", interfacePrefix="cali,tap!"),
        "spec.interfacePrefix",
        "comma-separated prefixes",
    ),
    (
        "address field",
        lambda: with_spec("FelixConfiguration", natOutgoingAddress="fd00::1"),
        "spec.natOutgoingAddress",
        "IPv4 address",
    ),
    (
        "node selector on default",
        lambda: with_spec("FelixConfiguration", "default", nodeSelector="all()"),
        "spec.nodeSelector",
        "must not be set",
    ),
    (
        "per-node configuration of a name no node can have",
        lambda: with_spec("FelixConfiguration", "node.Worker_1"),
        "metadata.name",
        "invalid name 'node.Worker_1'",
    ),
    (
        "route table ranges",
        lambda: with_spec("FelixConfiguration", routeTableRange={"min": 1, "max": 300}),
        "spec.routeTableRange",
        "within 1..250",
    ),
    (
        "node port ranges",
        lambda: with_spec("FelixConfiguration", kubeNodePortRanges=["http"]),
        "spec.kubeNodePortRanges",
        "not a port or port range",
    ),
]


@pytest.mark.parametrize(
    ("build", "field", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_broken_rule_is_reported(build: Callable[[], Doc], field: str, message: str) -> None:
    """Breaking one rule yields a problem naming that field and explaining it."""
    found = problems_of(build(), ValidationContext("Any"))
    assert any(p.field == field and message in p.message for p in found), found


def test_spoofed_prefixes_need_workload_source_spoofing() -> None:
    """allowSpoofedSourcePrefixes is only valid when FelixConfiguration allows spoofing."""
    doc = document("WorkloadEndpoint")
    assert problems_of(doc, ValidationContext("Any")) == []
    (problem,) = problems_of(doc, ValidationContext())
    assert problem.field == "spec.allowSpoofedSourcePrefixes"
    assert "workloadSourceSpoofing: Any" in problem.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("2h3m4s", 7384.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    """Durations parse as Go's time.ParseDuration does, into seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "90", "s", "1d", "1m30", "ten seconds"])
def test_bad_durations(text: str) -> None:
    """Anything Go would reject is an error."""
    with pytest.raises(ParamError):
        parse_duration(text)


def test_typed_felix_values() -> None:
    """parse_param gives the typed values the agent will use."""
    assert parse_param(BY_JSON["defaultEndpointToHostAction"], "accept") == "Accept"
    assert parse_param(BY_JSON["iptablesRefreshInterval"], "3m") == 180.0
    assert parse_param(
        BY_JSON["failsafeInboundHostPorts"],
        [{"protocol": "TCP", "port": 22}, {"protocol": "UDP", "port": 68, "net": "10.0.0.1/8"}],
    ) == (ProtoPort("tcp", 22), ProtoPort("udp", 68, "10.0.0.0/8"))


def test_felix_default_port_lists_parse() -> None:
    """Felix's built-in failsafe defaults, in its own string form, parse to ProtoPorts."""
    default = BY_JSON["failsafeInboundHostPorts"].default
    assert isinstance(default, str)
    ports = parse_felix_port_list(default)
    assert ProtoPort("tcp", 22) in ports
    assert ProtoPort("udp", 68) in ports
    assert parse_felix_port_list("none") == ()


def test_felix_configuration_name_forms() -> None:
    """Global, per-node and selector-scoped FelixConfiguration names are all accepted."""
    for name in ("default", "node.node-a", "gpu-nodes"):
        config = FelixConfiguration.from_manifest(document("FelixConfiguration", name))
        assert validate_resource(config) == []


NAME_PARTS = st.sampled_from(["node-a", "Node", "a" * 64, "pod.x", "-x", "k8s", "", "eth0", "a_b"])
VARIANTS = st.fixed_dictionaries(
    {
        "name": NAME_PARTS,
        "namespace": NAME_PARTS,
        "node": NAME_PARTS,
        "interface": st.sampled_from(["cali1", "", "-bad", "x" * 16, "eth.0"]),
        "network": st.sampled_from(
            ["10.0.0.1/32", "10.0.0.1", "10.0.0.0/24", "fd00::1/128", "300.1.1.1"]
        ),
        "mac": st.sampled_from(["", "ee:ee:ee:ee:ee:ee", "nope"]),
        "label": st.sampled_from([("app", "web"), ("bad key!", "v"), ("k", "-v"), ("a/b", "c")]),
    }
)


@settings(max_examples=300, deadline=None)
@given(variant=VARIANTS)
def test_the_fast_workload_check_agrees_with_the_full_one(variant: dict[str, Any]) -> None:
    """Plain workload endpoints are checked without a Checker per field: the verdict must be
    the full check's, valid or not."""
    spec = {
        "node": variant["node"],
        "orchestrator": "k8s",
        "endpoint": "eth0",
        "interfaceName": variant["interface"],
        "ipNetworks": [variant["network"]],
        "profiles": ["kns.a"],
        "mac": variant["mac"],
    }
    meta = {
        "name": variant["name"],
        "namespace": variant["namespace"],
        "labels": dict([variant["label"]]),
    }
    doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": meta,
        "spec": spec,
    }
    try:
        wep = WorkloadEndpoint.from_manifest(doc)
    except ManifestError:
        return
    full = Checker()
    check_metadata(full, wep)
    _CHECKS["WorkloadEndpoint"](full, wep, ValidationContext())
    assert validate_resource(wep, ValidationContext()) == full.problems


def test_a_rule_repeated_anywhere_is_reported_where_it_is() -> None:
    """A rule checked once is not checked again (its problems are kept by value), yet each
    copy's problems name the field where that copy is (at the rule itself and deeper), and the
    same rule in the other direction gets that direction's checks."""
    bad = rule(protocol="ICMP", ipVersion=6, source={"nets": ["10.0.0.0/33"]}, icmp={"code": 1})
    bad["destination"] = {"services": {"name": "s"}}
    mixed = rule(source={"nets": ["10.0.0.0/8"]}, destination={"nets": ["fd00::/8"]})

    def found(**rules: list[Doc]) -> list[tuple[str, str]]:
        return sorted((p.field, p.message) for p in problems_of(gnp(**rules)))

    icmp = ("protocol", "protocol ICMP requires ipVersion 4")
    code = ("icmp.code", "ICMP code specified without an ICMP type")
    cidr = ("source.nets[0]", "invalid CIDR '10.0.0.0/33'")
    ingress_only = ("destination.services", "not allowed in ingress rule destination")
    namespace = ("destination.services.namespace", "must specify a namespace in a global policy")
    both = ("", "rule contains both IPv4 and IPv6 CIDRs")

    def at(base: str, *problems: tuple[str, str]) -> list[tuple[str, str]]:
        return [(f"{base}.{path}" if path else base, message) for path, message in problems]

    for _ in range(2):  # checked, then from what was kept
        assert found(ingress=[mixed, bad]) == sorted(
            at("spec.ingress[0]", both) + at("spec.ingress[1]", icmp, code, cidr, ingress_only)
        )
        assert found(egress=[rule(), rule(), bad], ingress=[bad]) == sorted(
            at("spec.ingress[0]", icmp, code, cidr, ingress_only)
            + at("spec.egress[2]", icmp, code, cidr, namespace)
        )


@pytest.mark.parametrize("kind", ["GlobalNetworkPolicy", "NetworkPolicy", "Profile"])
def test_at_most_1024_rules_per_direction(kind: str) -> None:
    """Calico's CRDs hold spec.ingress and spec.egress to 1,024 items each (maxItems), so
    the Kubernetes API server refuses a 1,025th rule: so does validation, in every datastore."""
    doc = document(kind, "big")
    rule = {"action": "Allow"}
    doc["spec"]["egress"] = [rule] * 1024
    assert problems_of(doc) == []
    doc["spec"]["ingress"] = [rule] * 1025
    assert [(p.field, p.message) for p in problems_of(doc)] == [
        ("spec.ingress", "at most 1024 rules")
    ]
