"""What a live Calico cluster on the Kubernetes API datastore holds, read as it is.

tests/data/live-cluster is shaped as ``kubectl get ... -A -o yaml`` prints a kubeadm cluster
running Calico with Calico IPAM and no Calico API server: pods whose addresses only Calico's
CNI annotations carry (as CIDRs), finished and deleting pods, v1 Nodes annotated by
calico-node, Calico's kinds as crd.projectcalico.org/v1 custom resources (with their
metadata annotation, an older client's ``default.`` policy name, BlockAffinity's string
``deleted``, an operator's ``bpfLogLevel: ""``), and the Deployments, ConfigMaps and Events
that ``kubectl get all`` adds. The expectations are libcalico-go's conversions
(k8s/conversion, k8s/resources).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyfelix.resources import Pod, load_text
from pyfelix.resources.crd import converted_uid
from pyfelix.resources.k8s_conversion import calico_node, pod_addresses, workload_endpoint
from pyfelix.resources.k8s_node import KubernetesNode
from pyfelix.validation import ValidationContext, validate_resource
from tests.conftest import REPO
from tests.test_dry_run_cli import pyfelix

LIVE = REPO / "tests" / "data" / "live-cluster"
SKIPPED = (
    "skipped 7 resources of kinds Felix does not read: 1 ConfigMap, 1 DaemonSet.apps, "
    "1 Deployment.apps, 1 Event, 1 IPAMHandle.crd.projectcalico.org, "
    "1 KubeControllersConfiguration.crd.projectcalico.org, 1 ReplicaSet.apps"
)


def test_validate_takes_the_dump_as_it_is_and_counts_what_it_skips() -> None:
    result = pyfelix("validate", str(LIVE))
    assert result.returncode == 0, result.stdout
    assert result.stderr.strip() == SKIPPED
    assert result.stdout.startswith("valid: 28 resources in 3 file(s)")
    # Kinds as kubectl names them: Kubernetes' NetworkPolicy beside Calico's.
    assert "1 NetworkPolicy, 1 NetworkPolicy.networking.k8s.io" in result.stdout
    assert "2 Node," in result.stdout


def test_dry_run_programs_the_pods_cni_left_addresses_for() -> None:
    """frontend's address is in its status, backend's only in Calico's annotation as a CIDR;
    the finished Job pod, the deleting pod whose address CNI released and the host-network
    pod are no endpoints. stdout is the JSON document alone."""
    result = pyfelix("dry-run", "--hostname", "worker-1", "--format", "json", str(LIVE))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == SKIPPED
    view = json.loads(result.stdout)
    endpoints = {e["id"].split("/")[-3]: e["ipv4_nets"] for e in view["workload_endpoints"]}
    assert endpoints == {
        "shop%2fbackend-5f6d7c8b9a-7hq2m": ["10.244.36.69/32"],
        "shop%2ffrontend-7c9d8b6f5d-x2k4q": ["10.244.36.68/32"],
    }
    # The custom resources' policies under their v3 names: an older client's
    # "default.allow-dns" is allow-dns; a tiered name keeps its tier.
    assert sorted((p["kind"], p["namespace"], p["name"]) for p in view["policies"]) == [
        ("GlobalNetworkPolicy", "", "allow-dns"),
        ("GlobalNetworkPolicy", "", "security.block-known-bad"),
        ("KubernetesNetworkPolicy", "shop", "backend-from-frontend"),
        ("NetworkPolicy", "shop", "frontend-ingress"),
    ]
    routes = {r["dst"]: r for r in view["routes"]}
    # The v1 Nodes' annotations: the other node's block is reached through its host address.
    assert routes["10.244.133.0/26"]["dst_node_ip"] == "192.168.122.10"
    assert routes["10.244.36.64/26"]["types"] == ["LOCAL_WORKLOAD"]
    # The network set took its labels from the custom resource's metadata annotation.
    members = {s["source"].get("selector"): s["members"] for s in view["ipsets"]}
    assert members['threat-feed == "known-bad"'] == ["198.51.100.0/24", "203.0.113.17/32"]


def test_a_hostname_the_input_does_not_know_is_reported() -> None:
    result = pyfelix("dry-run", "--hostname", "worker-9", "--format", "json", str(LIVE))
    assert result.returncode == 0
    assert (
        "--hostname worker-9 names no node and no endpoint of the input"
        " (the nodes it holds: control-plane, worker-1)"
    ) in result.stderr
    json.loads(result.stdout)


def test_problems_go_to_stderr_and_skip_invalid_shows_what_the_agent_programs(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkPolicy\n"
        "metadata: {name: broken}\nspec: {selector: 'app ==', order: 1}\n"
    )
    refused = pyfelix(
        "dry-run", "--hostname", "worker-1", "--format", "json", str(LIVE), str(broken)
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert "GlobalNetworkPolicy/broken: spec.selector" in refused.stderr
    kept = pyfelix(
        "dry-run",
        "--hostname",
        "worker-1",
        "--format",
        "json",
        "--skip-invalid",
        str(LIVE),
        str(broken),
    )
    assert kept.returncode == 0, kept.stderr
    assert "treated as absent:" in kept.stderr
    assert "GlobalNetworkPolicy/broken" in kept.stderr
    policies = {p["name"] for p in json.loads(kept.stdout)["policies"]}
    assert "broken" not in policies
    assert "allow-dns" in policies


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\n", "skipped"),
        (
            "apiVersion: operator.tigera.io/v1\nkind: Installation\nmetadata: {name: default}\n",
            "skipped",
        ),
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", "skipped"),
        ("apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: p}\n", "skipped"),
        # A kind nobody knows in a group Felix reads is a typo, or a newer API: refused.
        ("apiVersion: v1\nkind: Podd\nmetadata: {name: p}\n", "unknown kind 'Podd'"),
        (
            "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkPolice\n"
            "metadata: {name: p}\n",
            "unknown kind 'GlobalNetworkPolice'",
        ),
        (
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolcy\nmetadata: {name: p}\n",
            "unknown kind 'NetworkPolcy'",
        ),
    ],
)
def test_what_is_skipped_and_what_stays_an_error(doc: str, expected: str) -> None:
    loaded = load_text(doc, "x.yaml")
    if expected == "skipped":
        assert loaded.problems == ()
        assert len(loaded.skipped) == 1
    else:
        assert [p.message for p in loaded.problems] == [expected]
        assert loaded.skipped == ()


def _pod(**overrides: Any) -> Pod:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": {}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"},
    }
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        doc[section][field] = value
    return Pod.from_manifest(doc)


def _problems(resource: Any) -> list[str]:
    return [f"{p.field}: {p.message}" for p in validate_resource(resource, ValidationContext())]


def test_pod_addresses_in_getpodips_order() -> None:
    """status.podIPs, then status.podIP, then Calico's plural and singular annotations, then
    AWS's; the first that is set is taken whole, each entry a CIDR or an IP."""
    both = {"cni.projectcalico.org/podIPs": "10.0.0.1/32,fd00::1/128"}
    assert pod_addresses(_pod(metadata__annotations=both)) == ("10.0.0.1/32", "fd00::1/128")
    single = {"cni.projectcalico.org/podIP": "10.0.0.2/32"}
    assert pod_addresses(_pod(metadata__annotations=single)) == ("10.0.0.2/32",)
    aws = {"vpc.amazonaws.com/pod-ips": "10.0.0.3"}
    assert pod_addresses(_pod(metadata__annotations=aws)) == ("10.0.0.3/32",)
    status = _pod(metadata__annotations=both, status__podIP="10.0.0.9")
    assert pod_addresses(status) == ("10.0.0.9/32",)
    plural = _pod(status__podIP="10.0.0.9", status__podIPs=[{"ip": "10.0.0.9"}, {"ip": "fd00::9"}])
    assert pod_addresses(plural) == ("10.0.0.9/32", "fd00::9/128")
    assert pod_addresses(_pod()) == ()


def test_only_the_address_source_calico_takes_is_checked() -> None:
    # A stale, unparsable annotation beside the status address is never read by Calico.
    stale = _pod(
        metadata__annotations={"cni.projectcalico.org/podIP": "garbage"}, status__podIP="10.0.0.9"
    )
    assert _problems(stale) == []
    wrong = _pod(metadata__annotations={"cni.projectcalico.org/podIPs": "10.0.0.1/32,nonsense"})
    assert _problems(wrong) == [
        "metadata.annotations.cni.projectcalico.org/podIPs: invalid CIDR 'nonsense'"
    ]
    assert _problems(_pod(status__podIPs=[{"ip": "10.0.0.1/40"}])) == [
        "status.podIPs[0].ip: invalid CIDR '10.0.0.1/40'"
    ]


def test_finished_and_released_pods_have_no_addresses() -> None:
    released = _pod(
        metadata__annotations={"cni.projectcalico.org/podIP": ""},
        metadata__deletionTimestamp="2026-11-30T09:20:41Z",
        status__podIP="10.0.0.5",
    )
    assert workload_endpoint(released).spec.ip_networks == ()  # type: ignore[union-attr]
    # Being deleted, but CNI has not released the address yet: still an endpoint.
    deleting = _pod(
        metadata__annotations={"cni.projectcalico.org/podIP": "10.0.0.5/32"},
        metadata__deletionTimestamp="2026-11-30T09:20:41Z",
        status__podIP="10.0.0.5",
    )
    assert workload_endpoint(deleting).spec.ip_networks == ("10.0.0.5/32",)  # type: ignore[union-attr]
    done = _pod(status__phase="Succeeded", status__podIP="10.0.0.5")
    assert workload_endpoint(done).spec.ip_networks == ()  # type: ignore[union-attr]


WIREGUARD_KEY = "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY="


def _node(annotations: dict[str, str], **rest: Any) -> KubernetesNode:
    doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "labels": {"kubernetes.io/hostname": "n1"},
            "annotations": annotations,
        },
        **rest,
    }
    return KubernetesNode.from_manifest(doc)


def test_v1_node_as_calico_node() -> None:
    node = calico_node(
        _node(
            {
                "projectcalico.org/IPv4Address": "192.168.1.5/24",
                "projectcalico.org/IPv6Address": "fd00:1::5/64",
                "projectcalico.org/IPv4IPIPTunnelAddr": "10.0.7.1",
                "projectcalico.org/IPv4VXLANTunnelAddr": "10.0.7.0",
                "projectcalico.org/VXLANTunnelMACAddr": "66:9e:0b:71:c4:2d",
                "projectcalico.org/IPv4WireguardInterfaceAddr": "10.0.7.2",
                "projectcalico.org/WireguardPublicKey": WIREGUARD_KEY,
                "projectcalico.org/ASNumber": "1.10",
                "projectcalico.org/labels": '{"rack": "r2", "kubernetes.io/hostname": "stale"}',
            },
            spec={"podCIDRs": ["10.244.1.0/24"]},
            status={
                "addresses": [
                    {"type": "InternalIP", "address": "192.168.1.5"},
                    {"type": "Hostname", "address": "n1"},
                    {"type": "ExternalIP", "address": "203.0.113.5"},
                ]
            },
        )
    )
    assert dict(node.labels) == {"rack": "r2", "kubernetes.io/hostname": "n1"}
    assert node.spec.bgp is not None
    assert (node.spec.bgp.ipv4_address, node.spec.bgp.ipv6_address) == (
        "192.168.1.5/24",
        "fd00:1::5/64",
    )
    assert node.spec.bgp.ipv4_ipip_tunnel_addr == "10.0.7.1"
    assert node.spec.bgp.as_number == 65546
    assert (node.spec.ipv4_vxlan_tunnel_addr, node.spec.vxlan_tunnel_mac_addr) == (
        "10.0.7.0",
        "66:9e:0b:71:c4:2d",
    )
    assert node.spec.wireguard is not None
    assert node.spec.wireguard.interface_ipv4_address == "10.0.7.2"
    assert node.status is not None
    assert node.status.wireguard_public_key == WIREGUARD_KEY
    assert node.status.pod_cidrs == ("10.244.1.0/24",)
    assert [(a.address, a.type) for a in node.spec.addresses] == [
        ("192.168.1.5/24", "CalicoNodeIP"),
        ("fd00:1::5/64", "CalicoNodeIP"),
        ("192.168.1.5", "InternalIP"),
        ("203.0.113.5", "ExternalIP"),
    ]
    assert [(r.node_name, r.orchestrator) for r in node.spec.orch_refs] == [("n1", "k8s")]


def test_invalid_node_annotations_are_ignored_as_calico_ignores_them() -> None:
    node = calico_node(
        _node(
            {
                "projectcalico.org/IPv4Address": "fd00::1/64",  # not IPv4
                "projectcalico.org/IPv4VXLANTunnelAddr": "10.0.7.1/24",  # host bits
                "projectcalico.org/VXLANTunnelMACAddr": "66:9e:0b",
                "projectcalico.org/labels": "not json",
            }
        )
    )
    assert node.spec.bgp is None
    assert (node.spec.ipv4_vxlan_tunnel_addr, node.spec.vxlan_tunnel_mac_addr) == ("", "")
    assert dict(node.labels) == {"kubernetes.io/hostname": "n1"}


def test_custom_resource_metadata_and_fields_as_calico_reads_them() -> None:
    loaded = load_text((LIVE / "calico-crds.yaml").read_text(), "crds.yaml")
    assert loaded.problems == ()
    by_name = {(r.resource.KIND, r.resource.name): r.resource for r in loaded.resources}
    dns = by_name["GlobalNetworkPolicy", "allow-dns"]
    assert dict(dns.labels) == {"owner": "platform"}
    assert "projectcalico.org/metadata" not in dns.metadata.annotations
    assert dns.metadata.uid == converted_uid("f5a6b7c8-d9e0-4f1a-2b3c-4d5e6f7a8b9c")
    affinity = by_name["BlockAffinity", "worker-1-10-244-36-64-26"]
    assert affinity.spec.deleted is False  # type: ignore[attr-defined]
    bad = (LIVE / "calico-crds.yaml").read_text().replace('deleted: "false"', 'deleted: "nope"')
    assert [p.field for p in load_text(bad, "crds.yaml").problems] == ["spec.deleted"]


def test_converted_uid_is_calicos_involution() -> None:
    """The bits of each byte reversed but for the version and variant bytes: converting twice
    gives the uid back, and the version and variant stay a v4 UUID's."""
    original = "f5a6b7c8-d9e0-4f1a-2b3c-4d5e6f7a8b9c"
    converted = converted_uid(original)
    assert converted is not None
    assert converted != original
    assert converted_uid(converted) == original
    assert converted[14] == "4"
    assert converted_uid("not-a-uid") is None


def test_node_tunnel_addresses_with_use_pod_cidr() -> None:
    """usePodCIDR (host-local IPAM): the IPIP address is the pod CIDR's first address, and so
    is the WireGuard one of a node with a WireGuard key; VXLAN addresses still come from the
    annotations. An IPv6 pod CIDR gives no IPIP address, and no annotation stands in."""
    annotations = {
        "projectcalico.org/IPv4IPIPTunnelAddr": "10.9.9.9",
        "projectcalico.org/IPv4VXLANTunnelAddr": "10.8.8.8",
        "projectcalico.org/IPv4WireguardInterfaceAddr": "10.7.7.7",
    }
    spec = {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}
    node = calico_node(_node(annotations, spec=spec), pod_cidr=True)
    assert node.spec.bgp is not None
    assert node.spec.bgp.ipv4_ipip_tunnel_addr == "10.244.1.1"
    assert node.spec.ipv4_vxlan_tunnel_addr == "10.8.8.8"
    assert node.spec.wireguard is None
    keyed = {**annotations, "projectcalico.org/WireguardPublicKey": "a" * 43 + "="}
    node = calico_node(_node(keyed, spec=spec), pod_cidr=True)
    assert node.spec.wireguard is not None
    assert node.spec.wireguard.interface_ipv4_address == "10.244.1.1"
    v6 = {"podCIDR": "fd00:1::/64", "podCIDRs": ["fd00:1::/64"]}
    node = calico_node(_node(annotations, spec=v6), pod_cidr=True)
    assert node.spec.bgp is None or node.spec.bgp.ipv4_ipip_tunnel_addr == ""
    # Without usePodCIDR the annotations say it all.
    node = calico_node(_node(annotations, spec=spec))
    assert node.spec.bgp is not None
    assert node.spec.bgp.ipv4_ipip_tunnel_addr == "10.9.9.9"


def test_use_pod_cidr_routes_follow_the_nodes_pod_cidrs() -> None:
    """With USE_POD_CIDR=true (as calico-node's environment sets it for host-local IPAM) each
    Node's pod CIDR is a block affine to it: the other node's is reached through its host
    address, this node's is local, and the tunnel addresses are the CIDRs' first addresses.
    IPAM blocks in the input are not read, as Felix then lists none."""
    argv = [sys.executable, "-m", "pyfelix", "dry-run", "--hostname", "worker-1"]
    result = subprocess.run(
        [*argv, "--format", "json", str(LIVE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env=os.environ | {"USE_POD_CIDR": "true"},
    )
    assert result.returncode == 0, result.stderr
    routes = {r["dst"]: r for r in json.loads(result.stdout)["routes"]}
    assert routes["10.244.0.0/24"]["dst_node_ip"] == "192.168.122.10"
    assert routes["10.244.0.0/24"]["types"] == ["REMOTE_WORKLOAD"]
    assert routes["10.244.1.0/24"]["types"] == ["LOCAL_WORKLOAD"]
    assert routes["10.244.0.1/32"]["types"] == ["REMOTE_TUNNEL"]
    assert "10.244.133.0/26" not in routes
