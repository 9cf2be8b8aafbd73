"""Loading calicoctl manifests into the resource model, and printing them back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyfelix.errors import ManifestError
from pyfelix.resources import (
    KINDS,
    EndpointSlice,
    FelixConfiguration,
    GlobalNetworkPolicy,
    NetworkPolicy,
    Profile,
    Tier,
    WorkloadEndpoint,
    load_paths,
    load_text,
    schema,
)
from pyfelix.resources.crd import CRD_KINDS
from pyfelix.resources.meta import (
    CALICO_API_VERSION,
    CRD_API_VERSION,
    MANIFEST_KIND_MODULES,
    READ_API_VERSIONS,
)
from pyfelix.resources.schema import ListOf, Nested, Spec, json_fields
from pyfelix.values import Port

V3 = "projectcalico.org/v3"

# One realistic document per kind; each must load, and print back exactly as written.
SAMPLES: dict[str, dict[str, Any]] = {
    "Tier": {"spec": {"order": 100, "defaultAction": "Pass"}},
    "GlobalNetworkPolicy": {
        "spec": {
            "tier": "security",
            "order": 10.5,
            "selector": 'role == "db"',
            "namespaceSelector": "has(team)",
            "serviceAccountSelector": "has(sa)",
            "types": ["Ingress", "Egress"],
            "doNotTrack": True,
            "applyOnForward": True,
            "ingress": [
                {
                    "action": "Allow",
                    "ipVersion": 4,
                    "protocol": "TCP",
                    "notProtocol": 17,
                    "source": {
                        "nets": ["10.0.0.0/8", "192.168.0.0/16"],
                        "notNets": ["10.1.0.0/16"],
                        "selector": "has(a)",
                        "notSelector": 'b == "c"',
                        "namespaceSelector": "global()",
                        "ports": [80, "1000:2000", "http"],
                        "notPorts": [81],
                        "serviceAccounts": {"names": ["api"], "selector": "x == 'y'"},
                    },
                    "destination": {"ports": [443]},
                    "http": {"methods": ["GET"], "paths": [{"prefix": "/api"}]},
                    "metadata": {"annotations": {"owner": "team-a"}},
                }
            ],
            "egress": [
                {"action": "Deny", "protocol": "ICMP", "icmp": {"type": 8, "code": 0}},
                {"action": "Allow", "protocol": "ICMPv6", "notICMP": {"type": 128}},
                {"action": "Pass", "destination": {"services": {"name": "db", "namespace": "x"}}},
                {"action": "Log"},
            ],
        }
    },
    "NetworkPolicy": {
        "metadata": {"namespace": "prod"},
        "spec": {"selector": "all()", "ingress": [{"action": "Allow"}], "order": 1},
    },
    "StagedGlobalNetworkPolicy": {"spec": {"stagedAction": "Set", "selector": "all()"}},
    "StagedKubernetesNetworkPolicy": {
        "metadata": {"namespace": "prod"},
        "spec": {
            "stagedAction": "Set",
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 5432}]}],
        },
    },
    "StagedNetworkPolicy": {
        "metadata": {"namespace": "prod"},
        "spec": {"stagedAction": "Delete", "tier": "default"},
    },
    "Profile": {
        "spec": {"labelsToApply": {"env": "prod"}, "ingress": [{"action": "Allow"}]},
    },
    "WorkloadEndpoint": {
        "metadata": {"namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "orchestrator": "k8s",
            "node": "node-a",
            "pod": "web-1",
            "endpoint": "eth0",
            "containerID": "abc123",
            "serviceAccountName": "web",
            "interfaceName": "cali12345678901",
            "mac": "ee:ee:ee:ee:ee:ee",
            "ipNetworks": ["10.65.0.2/32", "fd00::2/128"],
            "ipNATs": [{"internalIP": "10.65.0.2", "externalIP": "172.16.0.2"}],
            "ipv4Gateway": "169.254.1.1",
            "profiles": ["kns.prod"],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "hostPort": 0, "hostIP": ""}],
            "allowSpoofedSourcePrefixes": ["10.0.0.0/8"],
        },
    },
    "HostEndpoint": {
        "spec": {
            "node": "node-a",
            "interfaceName": "eth0",
            "expectedIPs": ["192.168.1.1"],
            "profiles": ["p"],
            "ports": [{"name": "ssh", "protocol": "TCP", "port": 22}],
        }
    },
    "GlobalNetworkSet": {"metadata": {"labels": {"a": "b"}}, "spec": {"nets": ["1.2.3.0/24"]}},
    "NetworkSet": {"metadata": {"namespace": "prod"}, "spec": {"nets": ["fd00::/64"]}},
    "IPPool": {
        "spec": {
            "cidr": "10.65.0.0/16",
            "vxlanMode": "Always",
            "ipipMode": "Never",
            "natOutgoing": True,
            "blockSize": 26,
            "nodeSelector": "all()",
            "allowedUses": ["Workload", "Tunnel"],
            "assignmentMode": "Automatic",
        }
    },
    "Node": {
        "spec": {
            "bgp": {"ipv4Address": "192.168.1.1/24", "asNumber": 64512},
            "ipv4VXLANTunnelAddr": "10.65.0.1",
            "vxlanTunnelMACAddr": "66:00:00:00:00:01",
            "orchRefs": [{"nodeName": "n", "orchestrator": "k8s"}],
            "wireguard": {"interfaceIPv4Address": "10.65.0.9"},
            "addresses": [{"address": "192.168.1.1", "type": "InternalIP"}],
        },
        "status": {"wireguardPublicKey": "jNk0RzNeOq28ohw4imhoBVUC+qbExJZ6nsLdRP0SwWI="},
    },
    "FelixConfiguration": {
        "spec": {
            "reportingTTL": "90s",
            "iptablesMarkMask": 4294901760,
            "failsafeInboundHostPorts": [{"protocol": "TCP", "port": 22}],
            "logSeverityScreen": "Info",
            "wireguardEnabled": True,
        }
    },
    "ClusterInformation": {"spec": {"clusterGUID": "abc", "datastoreReady": True}},
    "BGPConfiguration": {"spec": {"serviceClusterIPs": [{"cidr": "10.96.0.0/12"}]}},
    "IPAMBlock": {
        "spec": {
            "cidr": "10.65.0.0/26",
            "affinity": "host:node-a",
            "allocations": [0, None],
            "unallocated": [1],
            "attributes": [{"handle_id": "h"}],
            "sequenceNumber": 1,
            "deleted": False,
            "strictAffinity": False,
        }
    },
    "BlockAffinity": {
        "spec": {
            "state": "confirmed",
            "node": "node-a",
            "type": "host",
            "cidr": "10.65.0.0/26",
            "deleted": False,
        }
    },
    "Namespace": {"metadata": {"labels": {"team": "a"}}},
    "ServiceAccount": {"metadata": {"namespace": "prod", "labels": {"app": "x"}}},
    "Service": {
        "metadata": {"namespace": "prod"},
        "spec": {
            "clusterIP": "10.96.0.5",
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        },
    },
    "EndpointSlice": {
        "metadata": {"namespace": "prod", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.65.0.2"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    },
    "Pod": {
        "metadata": {"namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "node-a",
            "serviceAccountName": "web",
            "containers": [
                {
                    "name": "web",
                    "image": "nginx",
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                    "resources": {},
                }
            ],
            "restartPolicy": "Always",
        },
        "status": {"phase": "Running", "podIP": "10.65.0.2", "podIPs": [{"ip": "10.65.0.2"}]},
    },
    "KubernetesNode": {
        "metadata": {
            "annotations": {"projectcalico.org/IPv4Address": "192.168.122.11/24"},
            "labels": {"kubernetes.io/hostname": "worker-1"},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "192.168.122.11"}],
            "nodeInfo": {"kubeletVersion": "v1.34.2"},
        },
    },
    "KubernetesClusterNetworkPolicy": {
        "spec": {
            "tier": "Admin",
            "priority": 10,
            "subject": {
                "pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}}
            },
            "ingress": [
                {
                    "name": "monitoring",
                    "action": "Accept",
                    "from": [{"namespaces": {"matchLabels": {"team": "mon"}}}],
                    "protocols": [
                        {"tcp": {"destinationPort": {"number": 443}}},
                        {"udp": {"destinationPort": {"range": {"start": 53, "end": 54}}}},
                        {"destinationNamedPort": "metrics"},
                    ],
                }
            ],
            "egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.0/8"]}]}],
        },
    },
    "AdminNetworkPolicy": {
        "spec": {
            "priority": 10,
            "subject": {"namespaces": {"matchLabels": {"team": "a"}}},
            "ingress": [
                {
                    "name": "pass-monitoring",
                    "action": "Pass",
                    "from": [{"namespaces": {"matchLabels": {"team": "mon"}}}],
                    "ports": [
                        {"portNumber": {"protocol": "TCP", "port": 9090}},
                        {"portRange": {"protocol": "UDP", "start": 53, "end": 54}},
                    ],
                }
            ],
            "egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.0/8"]}]}],
        },
    },
    "BaselineAdminNetworkPolicy": {
        "spec": {
            "subject": {"namespaces": {}},
            "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}],
        },
    },
    "KubernetesNetworkPolicy": {
        "metadata": {"namespace": "prod"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"a": "b"}}},
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    ],
                    "ports": [{"port": 80}, {"protocol": "UDP", "port": 53, "endPort": 60}],
                }
            ],
            "egress": [{"to": [{"podSelector": {}}]}],
        },
    },
}


def document(kind: str, name: str = "sample") -> dict[str, Any]:
    sample = json.loads(json.dumps(SAMPLES[kind]))
    metadata = {"name": name, **sample.pop("metadata", {})}
    cls = KINDS[kind]
    return {
        "apiVersion": cls.API_VERSION,
        "kind": cls.manifest_kind(),
        "metadata": metadata,
        **sample,
    }


def test_every_kind_has_a_sample() -> None:
    """Every registered kind is covered by the round-trip table below."""
    assert set(SAMPLES) == set(KINDS)


def test_each_kind_is_looked_up_in_the_modules_that_define_it() -> None:
    """The loader imports a kind's modules when it first meets the kind: the table it goes by
    names, for each kind manifests spell, exactly the modules whose classes are that kind."""
    defined: dict[str, set[str]] = {}
    for cls in KINDS.values():
        module = cls.__module__.removeprefix("pyfelix.resources.")
        defined.setdefault(cls.manifest_kind(), set()).add(module)
    assert {kind: set(modules) for kind, modules in MANIFEST_KIND_MODULES.items()} == defined


def test_the_versions_read_are_the_registered_ones_and_calicos_crds() -> None:
    """A document of a known kind and one of these versions is never skipped unread; each
    custom resource kind read is one of Calico's registered kinds."""
    registered = {cls.API_VERSION for cls in KINDS.values()}
    assert registered | {CRD_API_VERSION} == READ_API_VERSIONS
    assert {k for k in CRD_KINDS if KINDS[k].API_VERSION == CALICO_API_VERSION} == CRD_KINDS


def readable(cls: type[Spec], value: Any) -> Any:
    """``value`` without the keys ``cls`` (and the classes nested in it) leave out unread."""
    if not isinstance(value, dict):
        return value
    fields = json_fields(cls)
    return {
        key: _readable(fields[key].metadata["codec"] if key in fields else None, item)
        for key, item in value.items()
        if key not in cls.UNREAD
    }


def _readable(codec: Any, value: Any) -> Any:
    if isinstance(codec, Nested):
        return readable(codec.cls, value)
    if isinstance(codec, ListOf) and isinstance(value, list):
        return [_readable(codec.item, item) for item in value]
    return value


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_round_trip(kind: str) -> None:
    """from_manifest then to_manifest gives back the document, as calicoctl would print it
    (without the fields of Kubernetes' kinds that Calico never reads)."""
    doc = document(kind)
    resource = KINDS[kind].from_manifest(doc)
    expected = dict(doc)
    for part, cls in (("spec", KINDS[kind].SPEC), ("status", KINDS[kind].STATUS)):
        if part in doc and cls is not None:
            expected[part] = readable(cls, doc[part])
    assert resource.to_manifest() == expected
    assert KINDS[kind].from_manifest(resource.to_manifest()) == resource
    hash(resource)


def test_a_pods_unread_fields_are_accepted_and_left_out() -> None:
    """A dumped pod's images, volumes and conditions load and are not kept (most of a
    cluster dump's memory); a field Kubernetes' Pod does not have is still refused."""
    doc = document("Pod")
    doc["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    doc["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    pod = KINDS["Pod"].from_manifest(doc)
    printed = pod.to_manifest()
    assert "volumes" not in printed["spec"]
    assert "image" not in printed["spec"]["containers"][0]
    assert "conditions" not in printed["status"]
    assert printed["spec"]["containers"][0]["ports"] == doc["spec"]["containers"][0]["ports"]
    doc["spec"]["volumez"] = []
    with pytest.raises(ManifestError, match="volumez"):
        KINDS["Pod"].from_manifest(doc)


def test_rule_model_values() -> None:
    """The rule model exposes every field with its type (ports parsed, values as written)."""
    policy = GlobalNetworkPolicy.from_manifest(document("GlobalNetworkPolicy"))
    rule = policy.spec.ingress[0]
    assert rule.action == "Allow"
    assert rule.protocol == "TCP"
    assert rule.not_protocol == 17
    assert rule.source.ports == (Port(80, 80), Port(1000, 2000), Port(name="http"))
    assert rule.source.not_nets == ("10.1.0.0/16",)
    assert rule.source.service_accounts is not None
    assert rule.source.service_accounts.names == ("api",)
    assert rule.http is not None
    assert policy.spec.egress[0].icmp is not None
    assert policy.spec.egress[0].icmp.type == 8
    assert policy.spec.egress[2].destination.services is not None
    assert policy.spec.effective_tier == "security"
    assert policy.spec.do_not_track


def test_policy_defaults() -> None:
    """Unset tier means "default" (never taken from a dotted name); types default like Calico."""
    doc = document("NetworkPolicy", name="security.allow")
    doc["spec"] = {"egress": [{"action": "Allow"}]}
    policy = NetworkPolicy.from_manifest(doc)
    assert policy.spec.effective_tier == "default"
    assert policy.spec.effective_types == ("Egress",)
    doc["spec"] = {"egress": [{"action": "Allow"}], "ingress": [{"action": "Deny"}]}
    assert NetworkPolicy.from_manifest(doc).spec.effective_types == ("Ingress", "Egress")
    doc["spec"] = {}
    assert NetworkPolicy.from_manifest(doc).spec.effective_types == ("Ingress",)


def test_namespaced_kind_defaults_to_default_namespace() -> None:
    """A namespaced resource without a namespace lands in "default", as calicoctl does."""
    doc = document("NetworkPolicy")
    del doc["metadata"]["namespace"]
    assert NetworkPolicy.from_manifest(doc).namespace == "default"


def test_endpoint_slice_keeps_its_top_level_body() -> None:
    """EndpointSlice has no spec: its fields sit beside metadata."""
    eps = EndpointSlice.from_manifest(document("EndpointSlice"))
    assert eps.service_name == "web"
    assert eps.spec.endpoints[0].addresses == ("10.65.0.2",)


def test_felix_configuration_keeps_values() -> None:
    """FelixConfiguration keeps what was written, under calicoctl's names."""
    config = FelixConfiguration.from_manifest(document("FelixConfiguration"))
    assert config.spec.get("reportingTTL") == "90s"
    assert config.spec.get("wireguardEnabled") is True


def errors(text: str, source: str = "m.yaml") -> list[str]:
    return [str(p) for p in load_text(text, source).problems]


def test_unknown_kind() -> None:
    """An unknown kind is an error naming the file, line and the kind."""
    assert errors("apiVersion: projectcalico.org/v3\nkind: Bogus\nmetadata: {name: x}\n") == [
        "m.yaml:1: Bogus/x: kind: unknown kind 'Bogus'"
    ]


def test_unknown_and_mistyped_fields_name_the_path() -> None:
    """Unknown fields and wrong types are reported together, each with its full field path."""
    text = """\
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: web
  namespace: prod
spec:
  order: high
  selectr: all()
  ingress:
  - action: Allow
    source:
      ports: [80, true, "9:8:7"]
      nets: 10.0.0.0/8
"""
    assert errors(text) == [
        "m.yaml:1: NetworkPolicy/prod/web: spec.order: expected a number, got string 'high'",
        "m.yaml:1: NetworkPolicy/prod/web: spec.selectr: unknown field",
        "m.yaml:1: NetworkPolicy/prod/web: spec.ingress[0].source.ports[1]: "
        "expected a port number, range or name, got True",
        "m.yaml:1: NetworkPolicy/prod/web: spec.ingress[0].source.ports[2]: "
        "invalid port range '9:8:7': expected N, N:M or a port name",
        "m.yaml:1: NetworkPolicy/prod/web: spec.ingress[0].source.nets: "
        "expected a list, got string '10.0.0.0/8'",
    ]


def test_equal_rules_are_decoded_once_and_a_wrong_one_is_reported_each_time() -> None:
    """A rule that repeats across policies is one shared value; a wrong rule is reported in
    every policy that holds it, at its own path."""
    policy = """\
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: {name}
spec:
  {direction}:
  - action: Allow
    destination:
      ports: [80]
  - action: Allow
    source:
      ports: [{port}]
"""
    text = "---\n".join(
        policy.format(name=name, direction=direction, port=port)
        for name, direction, port in (
            ("a", "ingress", "443"),
            ("b", "egress", "443"),
            ("c", "ingress", "true"),
            ("d", "egress", "true"),
        )
    )
    result = load_text(text, "m.yaml")
    a, b = (item.resource for item in result.resources)
    assert isinstance(a, GlobalNetworkPolicy)
    assert isinstance(b, GlobalNetworkPolicy)
    assert a.spec.ingress == b.spec.egress
    assert a.spec.ingress[0] is b.spec.egress[0]
    assert [str(p) for p in result.problems] == [
        f"m.yaml:{line}: GlobalNetworkPolicy/{name}: spec.{direction}[1].source.ports[0]: "
        "expected a port number, range or name, got True"
        for line, name, direction in ((27, "c", "ingress"), (40, "d", "egress"))
    ]


def test_missing_name_and_wrong_api_version() -> None:
    """A nameless resource, or one with the wrong apiVersion, is rejected."""
    found = errors("apiVersion: v1\nkind: Tier\nmetadata: {}\nspec: {}\n")
    assert found == [
        "m.yaml:1: Tier/: apiVersion: expected 'projectcalico.org/v3', got 'v1'",
        "m.yaml:1: Tier/: metadata.name: a name is required",
    ]


def test_unknown_felix_configuration_field() -> None:
    """FelixConfiguration fields are checked against Felix's parameter table."""
    text = (
        "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\nmetadata: {name: default}\n"
        "spec: {reportingTTL: 90, logSeverityScren: Info}\n"
    )
    assert errors(text) == [
        "m.yaml:1: FelixConfiguration/default: spec.reportingTTL: "
        'expected a duration string such as "90s", got integer 90',
        "m.yaml:1: FelixConfiguration/default: spec.logSeverityScren: unknown field",
    ]


def test_multi_document_yaml_with_lines() -> None:
    """Each document is located by the line it starts on; empty documents are skipped."""
    text = """\
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: a}
---
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: b}
spec: {order: x}
"""
    result = load_text(text, "t.yaml")
    assert [(r.resource.name, r.line) for r in result.resources] == [("a", 2)]
    assert [str(p) for p in result.problems] == [
        "t.yaml:7: Tier/b: spec.order: expected a number, got string 'x'"
    ]


def test_list_kinds_and_plain_lists() -> None:
    """<Kind>List (items may omit kind), v1 List and plain arrays all load, item by item."""
    text = """\
apiVersion: projectcalico.org/v3
kind: TierList
metadata: {resourceVersion: "12"}
items:
- metadata: {name: a}
- apiVersion: projectcalico.org/v3
  kind: Tier
  metadata: {name: b}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: ns1}}
---
- {apiVersion: projectcalico.org/v3, kind: Profile, metadata: {name: p1}}
- {apiVersion: projectcalico.org/v3, kind: Profile, metadata: {name: p2}, spec: {bad: 1}}
"""
    result = load_text(text, "l.yaml")
    assert [(r.resource.ident, r.line) for r in result.resources] == [
        ("Tier/a", 5),
        ("Tier/b", 6),
        ("Namespace/ns1", 13),
        ("Profile/p1", 15),
    ]
    assert [str(p) for p in result.problems] == ["l.yaml:16: Profile/p2: spec.bad: unknown field"]


def test_json_files(tmp_path: Path) -> None:
    """JSON manifests load like YAML ones, including arrays of resources."""
    (tmp_path / "one.json").write_text(json.dumps(document("Tier", "j1")))
    (tmp_path / "many.json").write_text(json.dumps([document("Profile", "p"), document("Tier")]))
    result = load_paths([tmp_path])
    assert result.ok
    assert sorted(r.resource.ident for r in result.resources) == [
        "Profile/p",
        "Tier/j1",
        "Tier/sample",
    ]


def test_duplicates_across_files(tmp_path: Path) -> None:
    """The same Kind/namespace/name twice is an error pointing at the first definition."""
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(document("NetworkPolicy", "web")))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(document("NetworkPolicy", "web")))
    result = load_paths([tmp_path])
    assert len(result.resources) == 1
    assert [str(p) for p in result.problems] == [
        f"{tmp_path}/b.yaml:1: NetworkPolicy/prod/web: duplicate resource, "
        f"already defined at {tmp_path}/a.yaml:1"
    ]


def test_same_name_in_other_namespace_or_kind_is_not_a_duplicate() -> None:
    """Identity is kind + namespace + name."""
    docs = [document("NetworkPolicy", "web"), document("GlobalNetworkPolicy", "web")]
    other_ns = document("NetworkPolicy", "web")
    other_ns["metadata"]["namespace"] = "dev"
    docs.append(other_ns)
    result = load_text(yaml.safe_dump_all(docs))
    assert result.ok
    assert len(result.resources) == 3


def test_unparsable_file_is_flagged(tmp_path: Path) -> None:
    """A YAML syntax error yields no resources, a located error and the 'unparsable' flag."""
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(document("Tier", "ok")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: [\n")
    result = load_paths([tmp_path])
    assert [r.resource.name for r in result.resources] == ["ok"]
    assert result.unparsable == {str(bad)}
    (problem,) = result.problems
    assert problem.source == str(bad)
    assert problem.message.startswith("cannot parse YAML")
    assert problem.line is not None


def test_duplicate_yaml_keys_are_rejected() -> None:
    """A key given twice in one mapping is a parse error, not a silent override."""
    found = errors("apiVersion: projectcalico.org/v3\nkind: Tier\nkind: Profile\n")
    assert found == ["m.yaml:3: cannot parse YAML: duplicate key 'kind'"]


def test_timestamps_stay_strings() -> None:
    """creationTimestamp is kept as written, not turned into a datetime."""
    doc = document("Tier")
    text = yaml.safe_dump(doc).replace(
        "metadata:\n", "metadata:\n  creationTimestamp: 2024-05-01T10:00:00Z\n"
    )
    (loaded,) = load_text(text).resources
    assert loaded.resource.metadata.creation_timestamp == "2024-05-01T10:00:00Z"


def test_directory_skips_hidden_and_non_manifest_files(tmp_path: Path) -> None:
    """Editors' swap files and hidden directories are not read."""
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(document("Tier", "t")))
    (tmp_path / ".t.yaml.swp").write_text("garbage: [")
    (tmp_path / "notes.txt").write_text("garbage: [")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.yaml").write_text("garbage: [")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "p.yml").write_text(yaml.safe_dump(document("Profile", "p")))
    result = load_paths([tmp_path])
    assert result.ok
    assert sorted(r.resource.ident for r in result.resources) == ["Profile/p", "Tier/t"]


def test_missing_path() -> None:
    """A path that does not exist is reported, not ignored."""
    assert [str(p) for p in load_paths(["/nonexistent/x.yaml"]).problems] == [
        "/nonexistent/x.yaml: no such file or directory"
    ]


def test_from_manifest_raises_with_every_problem() -> None:
    """The named constructor raises ManifestError carrying all the problems."""
    doc = document("Tier")
    doc["spec"] = {"order": "x", "defaultAction": 3}
    with pytest.raises(ManifestError) as info:
        Tier.from_manifest(doc)
    assert [p.field for p in info.value.problems] == ["spec.order", "spec.defaultAction"]
    with pytest.raises(ManifestError):
        Profile.from_manifest(document("Tier"))


def test_workload_endpoint_accessors() -> None:
    """Resources expose name, namespace, labels and a printable identity."""
    wep = WorkloadEndpoint.from_manifest(document("WorkloadEndpoint", "w"))
    assert (wep.name, wep.namespace, wep.ident) == ("w", "prod", "WorkloadEndpoint/prod/w")
    assert wep.labels == {"app": "web"}


def test_fast_decoder_builds_what_the_reporting_decoder_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every sample kind and every test cluster's manifests decode to equal resources with the
    fast path and with the reporting decoder alone."""
    here = Path(__file__).parent
    paths = [here / "golden" / "clusters", here.parent / "examples" / "cluster"]
    fast = load_paths(paths)
    samples = [KINDS[kind].from_manifest(document(kind)) for kind in sorted(SAMPLES)]

    def slow(cls: type[Any], value: Any) -> Any:
        raise schema.Slow

    monkeypatch.setattr(schema, "decode_fast", slow)
    reported = load_paths(paths)
    assert [item.resource for item in fast.resources] == [
        item.resource for item in reported.resources
    ]
    assert fast.problems == reported.problems
    assert len(fast.resources) > 50
    assert samples == [KINDS[kind].from_manifest(document(kind)) for kind in sorted(SAMPLES)]


def test_a_lists_own_api_version_is_checked() -> None:
    """A List must say what kubectl or calicoctl says; a typed list without an apiVersion
    cannot type its items. Both are refused whole, with the line, and the rest loads. A typed
    list of a kind Felix never reads is skipped item by item, as its items would be."""
    text = """\
apiVersion: banana/v9
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: hidden}}
---
kind: TierList
items:
- metadata: {name: untyped}
---
apiVersion: apps/v1
kind: DeploymentList
items:
- metadata: {name: web, namespace: default}
---
apiVersion: v1
kind: Namespace
metadata: {name: shown}
"""
    result = load_text(text, "l.yaml")
    assert [r.resource.ident for r in result.resources] == ["Namespace/shown"]
    assert [str(p) for p in result.problems] == [
        "l.yaml:1: a List's apiVersion must be v1 (kubectl) or projectcalico.org/v3,"
        " not 'banana/v9'",
        "l.yaml:6: TierList has no apiVersion: its items' kind is not known",
    ]
    assert result.skipped == ("Deployment.apps",)
