"""Benchmark inputs shaped like Calico's own Felix calculation-graph benchmarks.

The shapes are written as a live Kubernetes cluster holds them, the way ``kubectl get ... -o
json`` prints them: v1 Namespaces, ServiceAccounts and Pods (scheduled, Running, with the
Calico CNI plugin's annotations), networking.k8s.io/v1 NetworkPolicies, and the
projectcalico.org/v3 Tier, GlobalNetworkPolicies and GlobalNetworkSets of a cluster with the
Calico API server, plus the v1 Node ``host-local`` whose dataplane is computed (its pods have
``spec.nodeName: host-local``; the other pods are spread, a hundred a node, over nodes named
``node-NNNNN`` that are not written). The files are JSON ``List`` documents of at most 1000
items, named 00000.json, 00001.json, ...; their text is compact (kubectl indents), their
content is kubectl's. Every shape also holds the four system namespaces, a ``default``
ServiceAccount in each namespace and the ``default`` Tier, as every cluster does.

The Go benchmarks followed are in ``felix/calc/calc_graph_bench_test.go`` of
github.com/projectcalico/calico (the snapshot benchmarks as named since calico PR #10289, the
isolated-customers one from PR #11866; read at commit 87c15906f2). Each shape's counts
at ``--scale 1`` are the Go benchmark's; ``--scale`` multiplies every count (at least 1 of
each is kept).

``tags``
    ``BenchmarkSnapshot200Local250kTotal10000TagPols`` (``benchInitialSnap(b, 250_000, 200,
    0, 10000, 0)``, with ``makeEndpointUpdates``, ``generateLabels``, ``makeTagPolicies``,
    ``makeNamespaceUpdates``). 250,000 remote pods and 200 on host-local, in the 100
    namespaces ``namespace-0`` .. ``namespace-99`` (pod n in namespace n % 100), each with six
    labels: ``one-in-10/11/20/30/40: value-(seed % n)`` and one of the 31 marker labels
    (``FOO_BAR``, ``calico/FizzBuzz``, ``xcalico/Bazzle``, ...) set to ``"true"``; IPv4
    addresses handed out in order from 10.0.0.1. 10,000 GlobalNetworkPolicies ``tag-pol-N``
    in the default tier, selecting ``has(marker[N % 31])`` with five ingress Allow rules
    from ``has(marker[(N + j) % 31])``, j = 0..4.

``tenants``
    ``BenchmarkIsolatedCustomers100k`` (``benchIsolatedCustomers(b, 100_000, 1, 100)``, with
    ``makeCustomerNamespaceUpdates``, ``makeCustomerPolicies``, ``makeAllCustomerEndpoints``,
    ``makeCustomerPodLabels``, ``deterministicString``). 100,000 namespaces ``customer-N``
    labelled ``namespace-id`` (20 characters) and ``production: "true"/"false"``; one pod
    each (named as Go names it), every thousandth on host-local (100 local), with the 15
    labels of the Go code (five unique ids, four binary, four small-set, one marker, one of
    ~5000 tenant ids); one isolation policy a namespace. Go's policy is namespaced, so it is
    written as the Kubernetes NetworkPolicy ``isolation`` that means the same: every pod of
    the namespace, ingress from and egress to the namespace's pods, and egress to kube-dns
    10.96.0.10/32 on UDP 53.

``netsets``
    ``BenchmarkSnapshot200Local10kTotal10000NetsetPols`` (``benchInitialSnap(b, 10000, 200,
    0, 0, 10000)``, with ``makeNetSetAndPolUpdates``, ``generateNetSetIPs``). The endpoints
    and namespaces of ``tags`` at 10,000 remote and 200 local pods, no tag policies, and
    10,000 GlobalNetworkSets ``network-set-N`` labelled ``network-set-name``, whose sizes
    cycle through 1, 1, 1, 1, 2, 3, 4, 5, 100 and 1000 single addresses (from 10.0.0.1 on,
    about 1.1 million in all), each with a GlobalNetworkPolicy ``network-set-pol-N`` that
    selects ``all()`` and allows ingress from ``network-set-name == 'network-set-N'``. Go's
    ``BenchmarkSnapshot200Local10kTotal1000NetsetPols`` differs only in having 1000 of them.

``varied``
    No Go benchmark: the shape widens what the three above cover. About 50,000 pods (200 on
    host-local) in 400 labelled namespaces, from Deployments, StatefulSets and Jobs, with
    1 to 20 labels each, one to three containers with named ports (the same name on
    different numbers and protocols), several service accounts a namespace with labels, a
    tenth of the pods dual-stack, and a few pods Succeeded, Failed, Pending or on the host's
    network; about 1200 Kubernetes NetworkPolicies (podSelector, namespaceSelector, both,
    ipBlock with except, named and numeric ports, port ranges, default denies) and about 800
    GlobalNetworkPolicies in three tiers whose selectors take every form (``all()``,
    ``has``, ``!has``, ``==``, ``!=``, ``in``, ``not in``, ``starts with``, ``ends with``,
    ``contains``, ``&&``, ``||``, ``!``, parentheses) and whose rules use namespace
    selectors, service account names and selectors, nets, named ports, ICMP, and the Allow,
    Deny, Log and Pass actions; 150 GlobalNetworkSets. Rule selectors are mostly narrow (an
    app, a namespace, a release, ANDed with any form), as real rules are: rules whose
    selectors match half the cluster would make IP sets of tens of millions of members.

Usage: ``python bench/felix_shapes.py SHAPE DIR [--scale S]``. Everything is drawn from
seeded generators: the same arguments write the same bytes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import re
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSONDict = dict[str, Any]

LOCAL_NODE = "host-local"
LOCAL_NODE_IP = "172.16.0.1"
PODS_PER_REMOTE_NODE = 100
ITEMS_PER_FILE = 1000
SEED = 20250430
BASE_TIME = dt.datetime(2026, 1, 5, 8, 0, 0, tzinfo=dt.UTC)
SA_TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CALICO_V3 = "projectcalico.org/v3"
K8S_NETPOL = "networking.k8s.io/v1"
KUBE_DNS_CIDR = "10.96.0.10/32"

# --------------------------------------------------------------------------------------------
# Output


@dataclass
class Summary:
    files: int = 0
    documents: int = 0
    bytes: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    local_pods: int = 0


class ListWriter:
    """Writes items into numbered ``List`` files of at most ``per_file`` items each."""

    def __init__(self, out: Path, per_file: int = ITEMS_PER_FILE) -> None:
        self.out = out
        self.per_file = per_file
        self.items: list[JSONDict] = []
        self.summary = Summary()
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            if re.fullmatch(r"\d{5}\.json", old.name):
                old.unlink()

    def add(self, item: JSONDict) -> None:
        self.items.append(item)
        self.summary.kinds[item["kind"]] += 1
        if item["kind"] == "Pod" and item["spec"].get("nodeName") == LOCAL_NODE:
            self.summary.local_pods += 1
        if len(self.items) >= self.per_file:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        doc = {
            "apiVersion": "v1",
            "items": self.items,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"
        path = self.out / f"{self.summary.files:05d}.json"
        path.write_text(text, encoding="utf-8")
        self.summary.files += 1
        self.summary.documents += len(self.items)
        self.summary.bytes += len(text.encode("utf-8"))
        self.items = []

    def close(self) -> Summary:
        self.flush()
        return self.summary


# --------------------------------------------------------------------------------------------
# Cluster bookkeeping and Kubernetes documents


def scaled(count: int, scale: float) -> int:
    return max(1, round(count * scale))


def ipv4(value: int) -> str:
    return f"{value >> 24 & 255}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}"


class Cluster:
    """What the API server would have stamped: uids, resource versions, timestamps."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.resource_version = 1000
        self.clock = 0

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def hexid(self, chars: int) -> str:
        return f"{self.rng.getrandbits(chars * 4):0{chars}x}"

    def suffix(self, chars: int) -> str:
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        return "".join(self.rng.choice(alphabet) for _ in range(chars))

    def next_rv(self) -> str:
        self.resource_version += self.rng.randint(1, 7)
        return str(self.resource_version)

    def stamp(self, advance: int = 1) -> str:
        self.clock += advance
        when = BASE_TIME + dt.timedelta(seconds=self.clock)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def meta(
        self, name: str, namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> JSONDict:
        meta: JSONDict = {"creationTimestamp": self.stamp()}
        if labels:
            meta["labels"] = labels
        meta["name"] = name
        if namespace is not None:
            meta["namespace"] = namespace
        meta["resourceVersion"] = self.next_rv()
        meta["uid"] = self.uid()
        return meta

    # --- core kinds --------------------------------------------------------------------------

    def node(self, name: str, ip: str) -> JSONDict:
        meta = self.meta(
            name,
            labels={
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
            },
        )
        meta["annotations"] = {
            "node.alpha.kubernetes.io/ttl": "0",
            "projectcalico.org/IPv4Address": f"{ip}/16",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"]},
            "status": {
                "addresses": [
                    {"address": ip, "type": "InternalIP"},
                    {"address": name, "type": "Hostname"},
                ],
                "allocatable": {"cpu": "32", "memory": "131072Mi", "pods": "250"},
                "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "250"},
                "conditions": [
                    {
                        "lastHeartbeatTime": self.stamp(0),
                        "lastTransitionTime": self.stamp(0),
                        "message": "kubelet is posting ready status",
                        "reason": "KubeletReady",
                        "status": "True",
                        "type": "Ready",
                    }
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kernelVersion": "6.1.0-28-amd64",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.34.2",
                    "operatingSystem": "linux",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                },
            },
        }

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> JSONDict:
        all_labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": self.meta(name, labels=all_labels),
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def service_account(
        self, namespace: str, name: str, labels: dict[str, str] | None = None
    ) -> JSONDict:
        return {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": self.meta(name, namespace, labels),
        }

    def tier(self, name: str, order: float, default_action: str) -> JSONDict:
        return {
            "apiVersion": CALICO_V3,
            "kind": "Tier",
            "metadata": self.meta(name),
            "spec": {"defaultAction": default_action, "order": order},
        }

    def global_policy(self, name: str, spec: JSONDict) -> JSONDict:
        return {
            "apiVersion": CALICO_V3,
            "kind": "GlobalNetworkPolicy",
            "metadata": self.meta(name),
            "spec": spec,
        }

    def global_network_set(self, name: str, labels: dict[str, str], nets: list[str]) -> JSONDict:
        return {
            "apiVersion": CALICO_V3,
            "kind": "GlobalNetworkSet",
            "metadata": self.meta(name, labels=labels),
            "spec": {"nets": nets},
        }

    def network_policy(self, namespace: str, name: str, spec: JSONDict) -> JSONDict:
        meta = self.meta(name, namespace)
        meta["generation"] = 1
        return {
            "apiVersion": K8S_NETPOL,
            "kind": "NetworkPolicy",
            "metadata": meta,
            "spec": spec,
        }

    def pod(self, p: PodPlan) -> JSONDict:
        """A pod as kubectl prints it once the scheduler, kubelet and Calico CNI are done."""
        created = self.stamp()
        started = self.stamp(0)
        meta: JSONDict = {}
        if p.ips and not p.host_network:
            v4 = [ip for ip in p.ips if ":" not in ip]
            cidrs = [f"{ip}/128" if ":" in ip else f"{ip}/32" for ip in p.ips]
            meta["annotations"] = {
                "cni.projectcalico.org/containerID": self.hexid(64),
                "cni.projectcalico.org/podIP": f"{v4[0]}/32" if v4 else cidrs[0],
                "cni.projectcalico.org/podIPs": ",".join(cidrs),
            }
        meta["creationTimestamp"] = created
        if p.deleting:
            meta["deletionGracePeriodSeconds"] = 30
            meta["deletionTimestamp"] = self.stamp(30)
        if p.owner is not None:
            meta["generateName"] = p.generate_name
        meta["labels"] = p.labels
        meta["name"] = p.name
        meta["namespace"] = p.namespace
        if p.owner is not None:
            kind, owner_name, owner_uid = p.owner
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": kind,
                    "name": owner_name,
                    "uid": owner_uid,
                }
            ]
        meta["resourceVersion"] = self.next_rv()
        meta["uid"] = self.uid()

        volume = f"kube-api-access-{self.suffix(5)}"
        containers: list[JSONDict] = []
        statuses: list[JSONDict] = []
        for c in p.containers:
            container: JSONDict = {
                "image": c.image,
                "imagePullPolicy": "IfNotPresent",
                "name": c.name,
            }
            if c.ports:
                ports: list[JSONDict] = []
                for port_name, number, protocol in c.ports:
                    entry: JSONDict = {"containerPort": number}
                    if port_name:
                        entry["name"] = port_name
                    entry["protocol"] = protocol
                    ports.append(entry)
                container["ports"] = ports
            container["resources"] = {
                "limits": {"memory": "256Mi"},
                "requests": {"cpu": "50m", "memory": "64Mi"},
            }
            container["terminationMessagePath"] = "/dev/termination-log"
            container["terminationMessagePolicy"] = "File"
            container["volumeMounts"] = [
                {"mountPath": SA_TOKEN_MOUNT, "name": volume, "readOnly": True}
            ]
            containers.append(container)
            status: JSONDict = {
                "image": c.image,
                "imageID": f"{c.image.split(':')[0]}@sha256:{self.hexid(64)}",
                "lastState": {},
                "name": c.name,
                "ready": p.phase == "Running",
                "restartCount": 0,
                "started": p.phase == "Running",
            }
            if p.phase == "Pending":
                status["state"] = {"waiting": {"reason": "ContainerCreating"}}
            elif p.phase == "Running":
                status["containerID"] = f"containerd://{self.hexid(64)}"
                status["state"] = {"running": {"startedAt": started}}
            else:
                status["containerID"] = f"containerd://{self.hexid(64)}"
                status["state"] = {
                    "terminated": {
                        "containerID": status["containerID"],
                        "exitCode": 0 if p.phase == "Succeeded" else 1,
                        "finishedAt": started,
                        "reason": "Completed" if p.phase == "Succeeded" else "Error",
                        "startedAt": started,
                    }
                }
            statuses.append(status)

        spec: JSONDict = {
            "containers": containers,
            "dnsPolicy": "ClusterFirstWithHostNet" if p.host_network else "ClusterFirst",
            "enableServiceLinks": True,
        }
        if p.host_network:
            spec["hostNetwork"] = True
        if p.node:
            spec["nodeName"] = p.node
        spec.update(
            {
                "preemptionPolicy": "PreemptLowerPriority",
                "priority": 0,
                "restartPolicy": "Never" if p.owner and p.owner[0] == "Job" else "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "serviceAccount": p.service_account,
                "serviceAccountName": p.service_account,
                "terminationGracePeriodSeconds": 30,
                "tolerations": [
                    {
                        "effect": "NoExecute",
                        "key": "node.kubernetes.io/not-ready",
                        "operator": "Exists",
                        "tolerationSeconds": 300,
                    },
                    {
                        "effect": "NoExecute",
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "tolerationSeconds": 300,
                    },
                ],
                "volumes": [
                    {
                        "name": volume,
                        "projected": {
                            "defaultMode": 420,
                            "sources": [
                                {
                                    "serviceAccountToken": {
                                        "expirationSeconds": 3607,
                                        "path": "token",
                                    }
                                },
                                {
                                    "configMap": {
                                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                        "name": "kube-root-ca.crt",
                                    }
                                },
                                {
                                    "downwardAPI": {
                                        "items": [
                                            {
                                                "fieldRef": {
                                                    "apiVersion": "v1",
                                                    "fieldPath": "metadata.namespace",
                                                },
                                                "path": "namespace",
                                            }
                                        ]
                                    }
                                },
                            ],
                        },
                    }
                ],
            }
        )

        running = "True" if p.phase == "Running" else "False"
        status_doc: JSONDict = {
            "conditions": [
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                    "status": running,
                    "type": "PodReadyToStartContainers",
                },
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                    "status": "True",
                    "type": "Initialized",
                },
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                    "status": running,
                    "type": "Ready",
                },
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": started,
                    "status": running,
                    "type": "ContainersReady",
                },
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                    "status": "True" if p.node else "False",
                    "type": "PodScheduled",
                },
            ],
            "containerStatuses": statuses,
        }
        if p.node:
            status_doc["hostIP"] = p.host_ip
            status_doc["hostIPs"] = [{"ip": p.host_ip}]
        status_doc["phase"] = p.phase
        if p.ips:
            status_doc["podIP"] = p.ips[0]
            status_doc["podIPs"] = [{"ip": ip} for ip in p.ips]
        status_doc["qosClass"] = "Burstable"
        status_doc["startTime"] = created
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": spec,
            "status": status_doc,
        }


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    ports: tuple[tuple[str, int, str], ...] = ()


@dataclass
class PodPlan:
    name: str
    namespace: str
    labels: dict[str, str]
    service_account: str = "default"
    containers: tuple[Container, ...] = (Container("app", "registry.example/app:1.0"),)
    node: str = ""
    host_ip: str = ""
    ips: list[str] = field(default_factory=list)
    phase: str = "Running"
    owner: tuple[str, str, str] | None = None
    generate_name: str = ""
    host_network: bool = False
    deleting: bool = False


class RemoteNodes:
    """Places pods that are not host-local on node-00000, node-00001, ... a hundred each."""

    def __init__(self) -> None:
        self.placed = 0

    def place(self) -> tuple[str, str]:
        index = self.placed // PODS_PER_REMOTE_NODE
        self.placed += 1
        return f"node-{index:05d}", ipv4((172 << 24 | 16 << 16) + 2 + index)


def write_cluster_basics(cluster: Cluster, out: ListWriter) -> None:
    """What every cluster holds: the node computed for, its system namespaces, Calico's tier."""
    out.add(cluster.node(LOCAL_NODE, LOCAL_NODE_IP))
    out.add(cluster.tier("default", 1_000_000, "Deny"))
    for name in ("default", "kube-node-lease", "kube-public", "kube-system"):
        out.add(cluster.namespace(name))
        out.add(cluster.service_account(name, "default"))


# --------------------------------------------------------------------------------------------
# tags and netsets: benchInitialSnap


MARKER_LABELS = (
    "FOO_BAR",
    "FOO_BAR",
    "BIFF_BOP",
    "calico/FizzBuzz",
    "calico/BoffBip",
    "calico/Bazzle",
    "calico/Razzle",
    "calico/DoopDeeDoo",
    "calico/SOME_LABEL",
    "calico/BORED_NOW",
    "MyMarkerLabel",
    "xFOO_BAR",
    "xBIFF_BOP",
    "xcalico/FizzBuzz",
    "xcalico/BoffBip",
    "xcalico/Bazzle",
    "xcalico/Razzle",
    "xcalico/DoopDeeDoo",
    "xcalico/SOME_LABEL",
    "xcalico/BORED_NOW",
    "yxMyMarkerLabel",
    "yxFOO_BAR",
    "yxBIFF_BOP",
    "yxcalico/FizzBuzz",
    "yxcalico/BoffBip",
    "yxcalico/Bazzle",
    "yxcalico/Razzle",
    "yxcalico/DoopDeeDoo",
    "yxcalico/SOME_LABEL",
    "yxcalico/BORED_NOW",
    "yxMyMarkerLabel",
)
TAG_NAMESPACES = 100
TAG_RULES_PER_POLICY = 5
NETSET_SIZES = (1, 1, 1, 1, 2, 3, 4, 5, 100, 1000)
FIRST_IP = 0x0A000001  # 10.0.0.1, where Go's getNextIP and generateNetSetIPs start


def tag_labels(seed: int) -> dict[str, str]:
    """Go's generateLabels for its labelSeed (1 for the first endpoint)."""
    labels = {f"one-in-{n}": f"value-{seed % n}" for n in (10, 11, 20, 30, 40)}
    labels[MARKER_LABELS[seed % len(MARKER_LABELS)]] = "true"
    return labels


def write_snapshot_endpoints(
    cluster: Cluster, out: ListWriter, remote: int, local: int, namespaces: int
) -> None:
    """makeEndpointUpdates for the remote hosts, then for the local one: wep-n in
    namespace-(n % 100), addresses in order from 10.0.0.1, labels from a running seed."""
    for n in range(namespaces):
        out.add(cluster.namespace(f"namespace-{n}"))
        out.add(cluster.service_account(f"namespace-{n}", "default"))
    nodes = RemoteNodes()
    next_ip = FIRST_IP
    label_seed = 0
    for count, is_local in ((remote, False), (local, True)):
        for n in range(count):
            label_seed += 1
            node, host_ip = (LOCAL_NODE, LOCAL_NODE_IP) if is_local else nodes.place()
            plan = PodPlan(
                name=f"local-wep-{n}" if is_local else f"wep-{n}",
                namespace=f"namespace-{n % namespaces}",
                labels=tag_labels(label_seed),
                containers=(Container("app", "registry.example/app:1.0", (("", 8080, "TCP"),)),),
                node=node,
                host_ip=host_ip,
                ips=[ipv4(next_ip)],
            )
            next_ip += 1
            out.add(cluster.pod(plan))


def write_tag_policies(cluster: Cluster, out: ListWriter, count: int) -> None:
    """makeTagPolicies: tag-pol-N selects has(marker N) and allows five markers in."""
    markers = len(MARKER_LABELS)
    for n in range(count):
        rules = [
            {
                "action": "Allow",
                "destination": {},
                "source": {"selector": f"has({MARKER_LABELS[(n + j) % markers]})"},
            }
            for j in range(TAG_RULES_PER_POLICY)
        ]
        spec = {
            "ingress": rules,
            "selector": f"has({MARKER_LABELS[n % markers]})",
            "tier": "default",
            "types": ["Ingress"],
        }
        out.add(cluster.global_policy(f"tag-pol-{n}", spec))


def write_netsets_and_policies(cluster: Cluster, out: ListWriter, count: int) -> None:
    """makeNetSetAndPolUpdates: network-set-N of /32s and the policy that allows it in."""
    next_ip = FIRST_IP
    for n in range(count):
        name = f"network-set-{n}"
        size = NETSET_SIZES[n % len(NETSET_SIZES)]
        nets = [f"{ipv4(next_ip + i)}/32" for i in range(size)]
        next_ip += size
        out.add(cluster.global_network_set(name, {"network-set-name": name}, nets))
        spec = {
            "ingress": [
                {
                    "action": "Allow",
                    "destination": {},
                    "source": {"selector": f"network-set-name == '{name}'"},
                }
            ],
            "selector": "all()",
            "tier": "default",
            "types": ["Ingress"],
        }
        out.add(cluster.global_policy(f"network-set-pol-{n}", spec))


def shape_tags(cluster: Cluster, out: ListWriter, scale: float) -> None:
    write_cluster_basics(cluster, out)
    write_tag_policies(cluster, out, scaled(10_000, scale))
    write_snapshot_endpoints(
        cluster, out, scaled(250_000, scale), scaled(200, scale), scaled(TAG_NAMESPACES, scale)
    )


def shape_netsets(cluster: Cluster, out: ListWriter, scale: float) -> None:
    write_cluster_basics(cluster, out)
    write_snapshot_endpoints(
        cluster, out, scaled(10_000, scale), scaled(200, scale), scaled(TAG_NAMESPACES, scale)
    )
    write_netsets_and_policies(cluster, out, scaled(10_000, scale))


# --------------------------------------------------------------------------------------------
# tenants: benchIsolatedCustomers

M64 = (1 << 64) - 1
SAAS_ENVIRONMENTS = ("dev", "staging", "prod")
SAAS_POD_TIERS = ("frontend", "backend", "middleware", "data")
SAAS_REGIONS = ("us-east", "us-west", "eu-west", "ap-south")
SAAS_TEAMS = ("platform", "payments", "identity", "growth", "infra")


def deterministic_string(n: int, length: int) -> str:
    """Go's deterministicString: a hex-like string of the given length seeded by n."""
    chars = "abcdef0123456789"
    v = (n * 2654435761 + 1) & M64
    out = []
    for _ in range(length):
        out.append(chars[v % 16])
        v = (v * 6364136223846793005 + 1442695040888963407) & M64
    return "".join(out)


def customer_pod_labels(i: int) -> dict[str, str]:
    """Go's makeCustomerPodLabels for the pod at global index i."""
    return {
        "pod-id": deterministic_string(i * 5, 20),
        "instance-id": deterministic_string(i * 5 + 1, 20),
        "short-id": deterministic_string(i * 5 + 2, 10),
        "config-hash": deterministic_string(i * 5 + 3, 20),
        "version-tag": deterministic_string(i * 5 + 4, 8),
        "enabled": str(i % 2),
        "debug": str(i // 2 % 2),
        "canary": str(i // 4 % 2),
        "managed": str(i // 8 % 2),
        "environment": SAAS_ENVIRONMENTS[i % len(SAAS_ENVIRONMENTS)],
        "tier": SAAS_POD_TIERS[i % len(SAAS_POD_TIERS)],
        "region": SAAS_REGIONS[i % len(SAAS_REGIONS)],
        "team": SAAS_TEAMS[i % len(SAAS_TEAMS)],
        "managed-by": "saas-controller",
        "tenant-id": deterministic_string(i % 5000, 10),
    }


def isolation_policy() -> JSONDict:
    """makeCustomerPolicies' policy, as the Kubernetes policy that means the same."""
    return {
        "egress": [
            {"to": [{"podSelector": {}}]},
            {
                "ports": [{"port": 53, "protocol": "UDP"}],
                "to": [{"ipBlock": {"cidr": KUBE_DNS_CIDR}}],
            },
        ],
        "ingress": [{"from": [{"podSelector": {}}]}],
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
    }


def shape_tenants(cluster: Cluster, out: ListWriter, scale: float) -> None:
    customers = scaled(100_000, scale)
    pods_per_namespace = 1
    local_wanted = min(scaled(100, scale), customers * pods_per_namespace)
    stride = max(1, customers * pods_per_namespace // local_wanted)
    write_cluster_basics(cluster, out)
    for n in range(customers):
        ns = f"customer-{n}"
        labels = {
            "namespace-id": deterministic_string(n, 20),
            "production": "true" if n % 2 == 0 else "false",
        }
        out.add(cluster.namespace(ns, labels))
        out.add(cluster.service_account(ns, "default"))
        out.add(cluster.network_policy(ns, "isolation", isolation_policy()))
    nodes = RemoteNodes()
    next_ip = FIRST_IP
    local = 0
    index = 0
    for n in range(customers):
        ns = f"customer-{n}"
        for p in range(pods_per_namespace):
            name = f"app-{(n * 7 + 3) & 0xFFFFFFFF:09x}-{(p * 13 + n * 17 + 5) & 0xFFFF:05x}"
            if local < local_wanted and index % stride == 0:
                node, host_ip = LOCAL_NODE, LOCAL_NODE_IP
                local += 1
            else:
                node, host_ip = nodes.place()
            plan = PodPlan(
                name=name,
                namespace=ns,
                labels=customer_pod_labels(index),
                containers=(Container("app", "registry.example/saas:2.4", (("", 8080, "TCP"),)),),
                node=node,
                host_ip=host_ip,
                ips=[ipv4(next_ip)],
            )
            next_ip += 1
            index += 1
            out.add(cluster.pod(plan))


# --------------------------------------------------------------------------------------------
# varied

WORDS = (
    "api",
    "web",
    "cart",
    "checkout",
    "auth",
    "search",
    "catalog",
    "billing",
    "ledger",
    "mailer",
    "notify",
    "gateway",
    "ingest",
    "report",
    "media",
    "thumbs",
    "session",
    "profile",
    "orders",
    "payments",
    "pricing",
    "stock",
    "audit",
    "metrics",
    "tracing",
    "feature",
    "queue",
    "cache",
    "db",
    "etl",
)
TEAMS = tuple(f"team-{w}" for w in ("red", "blue", "green", "gold", "iron", "jade", "onyx"))
ENVS = ("dev", "qa", "staging", "prod")
SA_NAMES = ("api", "web", "worker", "batch", "monitor", "db", "ingress", "operator")
PORT_CATALOGUE: tuple[tuple[str, tuple[int, ...], str], ...] = (
    ("http", (80, 8080, 8000), "TCP"),
    ("https", (443, 8443), "TCP"),
    ("grpc", (9090, 50051), "TCP"),
    ("metrics", (9100, 9102, 8081), "TCP"),
    ("dns", (53,), "UDP"),
    ("dns-tcp", (53,), "TCP"),
    ("postgres", (5432,), "TCP"),
    ("redis", (6379,), "TCP"),
    ("kafka", (9092, 9093), "TCP"),
    ("admin", (9000, 9001), "TCP"),
    ("health", (8086, 8087), "TCP"),
    ("syslog", (514,), "UDP"),
    ("statsd", (8125,), "UDP"),
    ("diameter", (3868,), "SCTP"),
)
NET_FIELDS = frozenset({"nets", "notNets"})


def label_vocabulary() -> list[tuple[str, tuple[str, ...]]]:
    """Label keys pods draw from, with value sets from 1 to 5000 values."""
    vocab: list[tuple[str, tuple[str, ...]]] = [
        ("component", ("api", "web", "worker", "db", "cache", "queue", "proxy", "cron")),
        ("tier", ("frontend", "backend", "data", "edge")),
        ("env", ENVS),
        ("version", tuple(f"v{i}" for i in range(1, 13))),
        ("track", ("stable", "canary")),
        ("release", tuple(f"r{i:03d}" for i in range(40))),
        ("team", TEAMS),
        ("region", ("us-east", "us-west", "eu-west", "eu-north", "ap-south", "ap-east")),
        ("zone", tuple(f"zone-{c}{i}" for c in "abc" for i in range(6))),
        ("app.kubernetes.io/part-of", WORDS[:12]),
        ("app.kubernetes.io/managed-by", ("helm", "kustomize", "argocd")),
        ("helm.sh/chart", tuple(f"{w}-1.{i}.0" for w in WORDS[:10] for i in range(5))),
        ("security.example.com/pci", ("true",)),
        ("security.example.com/exposure", ("internal", "partner", "public")),
        ("example.com/owner", tuple(f"owner-{i:03d}" for i in range(200))),
        ("build-id", tuple(deterministic_string(i, 12) for i in range(5000))),
        ("sidecar.istio.io/inject", ("true", "false")),
        ("istio.io/rev", ("stable", "canary", "1-22")),
        ("monitoring", ("enabled",)),
        ("backup", ("daily", "weekly", "none")),
        ("cost-center", tuple(f"cc-{i}" for i in range(100, 130))),
        ("data-class", ("public", "internal", "confidential", "restricted")),
    ]
    vocab += [(f"feature-{i}", ("on", "off")) for i in range(20)]
    vocab += [(f"lbl-{i:02d}", ("a", "b", "c")) for i in range(60)]
    return vocab


class VariedCluster:
    """Plans the varied shape: namespaces, service accounts, workloads, pods, policies."""

    def __init__(self, cluster: Cluster, scale: float) -> None:
        self.cluster = cluster
        self.rng = random.Random(SEED + 4)
        self.scale = scale
        self.vocab = label_vocabulary()
        self.vocab_keys = [key for key, _ in self.vocab]
        self.vocab_map = dict(self.vocab)
        self.namespaces: list[str] = []
        self.ns_labels: dict[str, dict[str, str]] = {}
        self.ns_sas: dict[str, list[str]] = {}
        self.ns_apps: dict[str, list[str]] = {}
        self.sa_labels: dict[tuple[str, str], dict[str, str]] = {}
        self.pods: list[PodPlan] = []
        self.netset_labels: list[dict[str, str]] = []

    # --- namespaces and service accounts -----------------------------------------------------

    def plan_namespaces(self) -> None:
        rng = self.rng
        for i in range(scaled(400, self.scale)):
            name = f"{rng.choice(WORDS)}-{i:03d}"
            labels = {"team": rng.choice(TEAMS), "env": rng.choice(ENVS)}
            extras = (
                ("compliance", ("pci", "hipaa", "sox", "none")),
                ("tenant", tuple(f"t-{t:02d}" for t in range(50))),
                ("istio-injection", ("enabled", "disabled")),
                ("pod-security.kubernetes.io/enforce", ("restricted", "baseline", "privileged")),
                ("cost-center", tuple(f"cc-{c}" for c in range(100, 130))),
                ("example.com/tier", ("gold", "silver", "bronze")),
            )
            for key, values in rng.sample(extras, rng.randint(0, 4)):
                labels[key] = rng.choice(values)
            self.namespaces.append(name)
            self.ns_labels[name] = labels
            sas = ["default", *sorted(rng.sample(SA_NAMES, rng.randint(2, 5)))]
            self.ns_sas[name] = sas
            self.ns_apps[name] = []
            for sa in sas:
                sa_labels: dict[str, str] = {}
                if sa != "default":
                    sa_labels["role"] = sa
                    if rng.random() < 0.3:
                        sa_labels["example.com/privileged"] = "true"
                    if rng.random() < 0.5:
                        sa_labels["team"] = labels["team"]
                self.sa_labels[(name, sa)] = sa_labels

    def write_namespaces(self, out: ListWriter) -> None:
        cluster = self.cluster
        for ns in self.namespaces:
            out.add(cluster.namespace(ns, self.ns_labels[ns]))
            for sa in self.ns_sas[ns]:
                out.add(cluster.service_account(ns, sa, self.sa_labels[(ns, sa)] or None))

    # --- workloads and pods ------------------------------------------------------------------

    def workload_labels(self, app: str, required: list[tuple[str, str]]) -> dict[str, str]:
        rng = self.rng
        total = rng.randint(1, 20)
        labels = {"app": app}
        for key, value in required[: total - 1]:
            labels[key] = value
        extra = total - len(labels)
        if extra > 0:
            for key in rng.sample(self.vocab_keys, extra):
                labels.setdefault(key, rng.choice(self.vocab_map[key]))
        return labels

    def containers(self) -> tuple[Container, ...]:
        rng = self.rng
        out: list[Container] = []
        used: set[tuple[int, str]] = set()
        for index in range(rng.choice((1, 1, 1, 2, 2, 3))):
            ports: list[tuple[str, int, str]] = []
            for name, numbers, protocol in rng.sample(PORT_CATALOGUE, rng.randint(0, 3)):
                number = rng.choice(numbers)
                if (number, protocol) in used or any(name == p[0] for p in ports):
                    continue
                used.add((number, protocol))
                ports.append((name if rng.random() < 0.85 else "", number, protocol))
            cname = "main" if index == 0 else rng.choice(("sidecar", "proxy", "exporter"))
            if any(c.name == cname for c in out):
                cname = f"{cname}-{index}"
            image = f"registry.example/{rng.choice(WORDS)}:{rng.randint(1, 9)}.{rng.randint(0, 30)}"
            out.append(Container(cname, image, tuple(ports)))
        return tuple(out)

    def plan_pods(self) -> None:
        rng = self.rng
        cluster = self.cluster
        target = scaled(50_000, self.scale)
        weights = [1.0 / (1 + i) ** 0.6 for i in range(len(self.namespaces))]
        counter = 0
        while len(self.pods) < target:
            ns = rng.choices(self.namespaces, weights)[0]
            counter += 1
            app = f"{rng.choice(WORDS)}-{counter}"
            self.ns_apps[ns].append(app)
            kind = rng.choices(("Deployment", "StatefulSet", "Job"), (70, 15, 15))[0]
            remaining = target - len(self.pods)
            sa = rng.choice(self.ns_sas[ns])
            containers = self.containers()
            if kind == "Deployment":
                replicas = min(remaining, max(1, int(rng.paretovariate(1.1))), 300)
                template_hash = cluster.suffix(10)
                labels = self.workload_labels(app, [("pod-template-hash", template_hash)])
                owner = ("ReplicaSet", f"{app}-{template_hash}", cluster.uid())
                for _ in range(replicas):
                    name = f"{owner[1]}-{cluster.suffix(5)}"
                    self.pods.append(PodPlan(name, ns, dict(labels), sa, containers, owner=owner))
                    self.pods[-1].generate_name = f"{owner[1]}-"
            elif kind == "StatefulSet":
                replicas = min(remaining, rng.randint(1, 12))
                revision = f"{app}-{cluster.suffix(10)}"
                owner = ("StatefulSet", app, cluster.uid())
                base = self.workload_labels(app, [("controller-revision-hash", revision)])
                for ordinal in range(replicas):
                    labels = dict(base)
                    if len(labels) < 20:
                        labels["statefulset.kubernetes.io/pod-name"] = f"{app}-{ordinal}"
                    if len(labels) < 20:
                        labels["apps.kubernetes.io/pod-index"] = str(ordinal)
                    plan = PodPlan(f"{app}-{ordinal}", ns, labels, sa, containers, owner=owner)
                    plan.generate_name = f"{app}-"
                    self.pods.append(plan)
            else:
                replicas = min(remaining, rng.randint(1, 4))
                job_uid = cluster.uid()
                owner = ("Job", app, job_uid)
                labels = self.workload_labels(
                    app,
                    [
                        ("batch.kubernetes.io/job-name", app),
                        ("job-name", app),
                        ("batch.kubernetes.io/controller-uid", job_uid),
                        ("controller-uid", job_uid),
                    ],
                )
                for _ in range(replicas):
                    plan = PodPlan(
                        f"{app}-{cluster.suffix(5)}", ns, dict(labels), sa, containers, owner=owner
                    )
                    plan.generate_name = f"{app}-"
                    roll = rng.random()
                    plan.phase = "Succeeded" if roll < 0.15 else "Failed" if roll < 0.2 else ""
                    self.pods.append(plan)

    def place_pods(self) -> None:
        """host-local gets its share at random; the rest fill node-NNNNN, each from its own
        /26 blocks of 10.64.0.0/10 (and fd00:10:64::/48 for the dual-stack tenth)."""
        rng = self.rng
        local = set(rng.sample(range(len(self.pods)), min(len(self.pods), scaled(200, self.scale))))
        remote_nodes = max(1, math.ceil(len(self.pods) / PODS_PER_REMOTE_NODE))
        blocks: dict[str, tuple[int, int]] = {}
        next_block = [0]

        def allocate(node: str) -> int:
            block, used = blocks.get(node, (-1, 64))
            if used >= 64:
                block, used = next_block[0], 0
                next_block[0] += 1
            blocks[node] = (block, used + 1)
            return block * 64 + used

        for index, pod in enumerate(self.pods):
            if index in local:
                pod.node, pod.host_ip = LOCAL_NODE, LOCAL_NODE_IP
            else:
                node_index = rng.randrange(remote_nodes)
                pod.node = f"node-{node_index:05d}"
                pod.host_ip = ipv4((172 << 24 | 16 << 16) + 2 + node_index)
            roll = rng.random()
            if not pod.phase:
                pod.phase = "Running"
            if roll < 0.01:
                pod.phase = "Pending"
                continue
            if roll < 0.015 and pod.owner is not None and pod.owner[0] != "Job":
                pod.host_network = True
                pod.ips = [pod.host_ip]
                continue
            offset = allocate(pod.node)
            pod.ips = [ipv4((10 << 24 | 64 << 16) + offset)]
            if rng.random() < 0.1:
                pod.ips.append(f"fd00:10:64::{offset >> 16:x}:{offset & 0xFFFF:x}")
            if roll > 0.995:
                pod.deleting = True

    # --- selectors ---------------------------------------------------------------------------

    def quoted_values(self, values: Sequence[str], count: int) -> str:
        chosen = self.rng.sample(list(values), min(count, len(values)))
        return ", ".join(f'"{v}"' for v in chosen)

    def selector_atom(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            return "all()"
        if roll < 0.1:
            ns = rng.choice(self.namespaces)
            return f'projectcalico.org/namespace == "{ns}"'
        if roll < 0.17:
            key = rng.choice(("team", "env", "compliance", "tenant"))
            values = {
                "team": TEAMS,
                "env": ENVS,
                "compliance": ("pci", "hipaa", "sox", "none"),
                "tenant": tuple(f"t-{t:02d}" for t in range(50)),
            }[key]
            return f'pcns.{key} == "{rng.choice(values)}"'
        if roll < 0.22:
            ns = rng.choice(self.namespaces)
            apps = self.ns_apps[ns] or ["none"]
            return f'app == "{rng.choice(apps)}"'
        key = rng.choice(self.vocab_keys)
        values = self.vocab_map[key]
        form = rng.randrange(10)
        value = rng.choice(values)
        if form == 0:
            return f"has({key})"
        if form == 1:
            return f"!has({key})"
        if form == 2:
            return f'{key} == "{value}"'
        if form == 3:
            return f'{key} != "{value}"'
        if form == 4:
            return f"{key} in {{{self.quoted_values(values, rng.randint(1, 4))}}}"
        if form == 5:
            return f"{key} not in {{{self.quoted_values(values, rng.randint(1, 3))}}}"
        if form == 6:
            return f'{key} starts with "{value[: max(1, len(value) // 2)]}"'
        if form == 7:
            return f'{key} ends with "{value[len(value) // 2 :]}"'
        if form == 8:
            return f'{key} contains "{value[1:3] or value}"'
        return f'!({key} == "{value}")'

    def selector(self, depth: int = 2) -> str:
        rng = self.rng
        if depth == 0 or rng.random() < 0.35:
            return self.selector_atom()
        parts = [self.selector(depth - 1) for _ in range(rng.randint(2, 3))]
        if rng.random() < 0.3:
            # Mixed operators without parentheses: && binds tighter than ||.
            text = parts[0]
            for part in parts[1:]:
                text += rng.choice((" && ", " || ")) + part
        else:
            text = rng.choice((" && ", " || ")).join(f"({p})" if "|" in p else p for p in parts)
        return f"({text})" if rng.random() < 0.3 else text

    def rule_selector(self) -> str:
        """A rule's selector: mostly narrow (an app, a namespace, a release), as real rules
        are, so that the IP sets stay the size a real cluster's would; a twentieth are broad.
        Each IP set holds every matching address cluster-wide."""
        rng = self.rng
        ns = rng.choice(self.namespaces)
        roll = rng.random()
        if roll < 0.35:
            base = f'app == "{rng.choice(self.ns_apps[ns] or ["none"])}"'
        elif roll < 0.5:
            apps = [rng.choice(self.ns_apps[rng.choice(self.namespaces)] or ["none"])]
            apps += [rng.choice(self.ns_apps[ns] or ["none"]) for _ in range(rng.randint(1, 2))]
            base = f"app in {{{self.quoted_values(sorted(set(apps)), 3)}}}"
        elif roll < 0.7:
            base = f'projectcalico.org/namespace == "{ns}"'
        elif roll < 0.9:
            key = rng.choice(("release", "example.com/owner", "build-id", "helm.sh/chart"))
            base = f'{key} == "{rng.choice(self.vocab_map[key])}"'
        elif roll < 0.95 and self.netset_labels:
            labels = rng.choice(self.netset_labels)
            key = rng.choice(sorted(labels))
            return f'{key} == "{labels[key]}"'
        else:
            return self.selector(1)
        if rng.random() < 0.5:
            extra = self.selector(1)
            base += f" && ({extra})" if "||" in extra else f" && {extra}"
        return base

    # --- Kubernetes NetworkPolicies ----------------------------------------------------------

    def label_selector(self, ns: str | None, allow_empty: bool = True) -> JSONDict:
        rng = self.rng
        if allow_empty and rng.random() < 0.15:
            return {}
        sel: JSONDict = {}
        if ns is not None and self.ns_apps[ns] and rng.random() < 0.7:
            sel["matchLabels"] = {"app": rng.choice(self.ns_apps[ns])}
        elif rng.random() < 0.5:
            key = rng.choice(self.vocab_keys)
            sel["matchLabels"] = {key: rng.choice(self.vocab_map[key])}
        if rng.random() < 0.4 or not sel:
            expressions: list[JSONDict] = []
            for key in rng.sample(self.vocab_keys, rng.randint(1, 3)):
                op = rng.choice(("In", "NotIn", "Exists", "DoesNotExist"))
                expr: JSONDict = {"key": key, "operator": op}
                if op in ("In", "NotIn"):
                    values = self.vocab_map[key]
                    expr["values"] = rng.sample(list(values), min(len(values), rng.randint(1, 3)))
                expressions.append(expr)
            sel["matchExpressions"] = expressions
        return sel

    def namespace_selector(self) -> JSONDict:
        rng = self.rng
        roll = rng.random()
        if roll < 0.15:
            return {}
        if roll < 0.5:
            ns = rng.choice(self.namespaces)
            return {"matchLabels": {"kubernetes.io/metadata.name": ns}}
        if roll < 0.8:
            return {"matchLabels": {"team": rng.choice(TEAMS)}}
        return {
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": rng.sample(ENVS, rng.randint(1, 2))},
                {
                    "key": "compliance",
                    "operator": rng.choice(("Exists", "DoesNotExist")),
                },
            ]
        }

    def ip_block(self) -> JSONDict:
        rng = self.rng
        if rng.random() < 0.15:
            return {"cidr": "fd00:10:64::/48", "except": ["fd00:10:64::/64"]}
        second = rng.randrange(256)
        block: JSONDict = {"cidr": f"10.{second}.0.0/16"}
        if rng.random() < 0.5:
            block["except"] = [f"10.{second}.{rng.randrange(256)}.0/24"]
        if rng.random() < 0.2:
            block = {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12"]}
        return block

    def k8s_peer(self, ns: str) -> JSONDict:
        rng = self.rng
        roll = rng.random()
        if roll < 0.35:
            return {"podSelector": self.label_selector(ns)}
        if roll < 0.6:
            return {"namespaceSelector": self.namespace_selector()}
        if roll < 0.85:
            return {
                "namespaceSelector": self.namespace_selector(),
                "podSelector": self.label_selector(None),
            }
        return {"ipBlock": self.ip_block()}

    def k8s_ports(self) -> list[JSONDict]:
        rng = self.rng
        ports: list[JSONDict] = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            if roll < 0.4:
                name, numbers, protocol = rng.choice(PORT_CATALOGUE)
                ports.append({"port": name, "protocol": protocol})
            elif roll < 0.75:
                _, numbers, protocol = rng.choice(PORT_CATALOGUE)
                ports.append({"port": rng.choice(numbers), "protocol": protocol})
            elif roll < 0.9:
                low = rng.randrange(1024, 30000)
                ports.append(
                    {"endPort": low + rng.randint(1, 2000), "port": low, "protocol": "TCP"}
                )
            else:
                ports.append({"protocol": rng.choice(("TCP", "UDP"))})
        return ports

    def k8s_rules(self, ns: str, direction: str) -> list[JSONDict]:
        rng = self.rng
        peer_key = "from" if direction == "ingress" else "to"
        rules: list[JSONDict] = []
        for _ in range(rng.randint(1, 4)):
            rule: JSONDict = {}
            if rng.random() < 0.9:
                rule[peer_key] = [self.k8s_peer(ns) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.7:
                rule["ports"] = self.k8s_ports()
            rules.append(rule)
        return rules

    def k8s_policy(self, ns: str, index: int) -> tuple[str, JSONDict]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.08:
            return "default-deny-ingress", {"podSelector": {}, "policyTypes": ["Ingress"]}
        if roll < 0.12:
            return "default-deny-all", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        if roll < 0.18:
            return "allow-dns", {
                "egress": [
                    {
                        "ports": [
                            {"port": 53, "protocol": "UDP"},
                            {"port": "dns-tcp", "protocol": "TCP"},
                        ],
                        "to": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                                },
                                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                            }
                        ],
                    }
                ],
                "podSelector": {},
                "policyTypes": ["Egress"],
            }
        if roll < 0.22:
            return "allow-all-ingress", {
                "ingress": [{}],
                "podSelector": self.label_selector(ns, allow_empty=False),
                "policyTypes": ["Ingress"],
            }
        types = rng.choice((["Ingress"], ["Ingress"], ["Egress"], ["Ingress", "Egress"]))
        spec: JSONDict = {}
        if "Egress" in types:
            spec["egress"] = self.k8s_rules(ns, "egress")
        if "Ingress" in types:
            spec["ingress"] = self.k8s_rules(ns, "ingress")
        spec["podSelector"] = self.label_selector(ns)
        spec["policyTypes"] = types
        return f"policy-{index}", spec

    # --- Calico GlobalNetworkPolicies ---------------------------------------------------------

    def entity(self, protocol: str | None, family: int, destination: bool) -> JSONDict:
        rng = self.rng
        ent: JSONDict = {}
        roll = rng.random()
        if roll < 0.4:
            ent["selector"] = self.rule_selector()
        elif roll < 0.5 and self.netset_labels:
            labels = rng.choice(self.netset_labels)
            key = rng.choice(sorted(labels))
            ent["selector"] = f'{key} == "{labels[key]}"'
        elif roll < 0.6:
            v4 = ("10.64.0.0/12", "192.168.0.0/16", "203.0.113.0/24", "198.51.100.7/32")
            v6 = ("fd00:10:64::/48", "2001:db8::/32", "2001:db8:1::5/128")
            nets = v6 if family == 6 else v4
            ent["nets" if rng.random() < 0.8 else "notNets"] = rng.sample(nets, rng.randint(1, 2))
        if rng.random() < 0.2:
            ent["namespaceSelector"] = rng.choice(
                (
                    "all()",
                    f'team == "{rng.choice(TEAMS)}"',
                    f'env in {{"{rng.choice(ENVS)}", "{rng.choice(ENVS)}"}}',
                    'has(compliance) && compliance != "none"',
                    f'projectcalico.org/name == "{rng.choice(self.namespaces)}"',
                )
            )
        if rng.random() < 0.08:
            ent["notSelector"] = self.rule_selector()
        if rng.random() < 0.15:
            accounts: JSONDict = {}
            if rng.random() < 0.5:
                accounts["names"] = rng.sample(SA_NAMES, rng.randint(1, 3))
            if rng.random() < 0.7 or not accounts:
                accounts["selector"] = rng.choice(
                    (
                        f'role == "{rng.choice(SA_NAMES)}"',
                        'example.com/privileged == "true"',
                        f'role in {{"{rng.choice(SA_NAMES)}", "{rng.choice(SA_NAMES)}"}}',
                        f'has(role) && team == "{rng.choice(TEAMS)}"',
                        "!has(role)",
                    )
                )
            ent["serviceAccounts"] = accounts
        if protocol in ("TCP", "UDP", "SCTP") and (destination or rng.random() < 0.1):
            ports: list[int | str] = []
            for _ in range(rng.randint(1, 3)):
                kind = rng.random()
                matching = [c for c in PORT_CATALOGUE if c[2] == protocol] or [PORT_CATALOGUE[0]]
                name, numbers, _ = rng.choice(matching)
                if kind < 0.45:
                    ports.append(name)
                elif kind < 0.8:
                    ports.append(rng.choice(numbers))
                else:
                    low = rng.randrange(1024, 60000)
                    ports.append(f"{low}:{low + rng.randint(1, 500)}")
            ent["ports" if rng.random() < 0.85 else "notPorts"] = ports
        return ent

    def calico_rule(self, tier: str) -> JSONDict:
        rng = self.rng
        actions = ("Allow", "Deny", "Log", "Pass")
        weights = (60, 20, 5, 15 if tier != "default" else 3)
        rule: JSONDict = {"action": rng.choices(actions, weights)[0]}
        protocol = rng.choices(
            (None, "TCP", "UDP", "SCTP", "ICMP", "ICMPv6"), (25, 45, 15, 3, 8, 4)
        )[0]
        family = 6 if protocol == "ICMPv6" else 4 if protocol == "ICMP" else rng.choice((4, 4, 6))
        rule["destination"] = self.entity(protocol, family, True)
        if protocol in ("ICMP", "ICMPv6") and rng.random() < 0.6:
            rule["icmp"] = {"code": 0, "type": 8 if protocol == "ICMP" else 128}
        if protocol in ("ICMP", "ICMPv6") or NET_FIELDS & rule["destination"].keys():
            rule["ipVersion"] = family
        if protocol is not None:
            rule["protocol"] = protocol
        elif rng.random() < 0.1:
            rule["notProtocol"] = "UDP"
        rule["source"] = self.entity(protocol, family, False)
        if "ipVersion" not in rule and NET_FIELDS & rule["source"].keys():
            rule["ipVersion"] = family
        return rule

    def global_policy(self, tier: str, index: int) -> tuple[str, JSONDict]:
        rng = self.rng
        spec: JSONDict = {}
        types = rng.choice((["Ingress"], ["Ingress"], ["Egress"], ["Ingress", "Egress"]))
        if "Egress" in types:
            spec["egress"] = [self.calico_rule(tier) for _ in range(rng.randint(1, 4))]
        if "Ingress" in types:
            spec["ingress"] = [self.calico_rule(tier) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.15:
            spec["namespaceSelector"] = f'team == "{rng.choice(TEAMS)}"'
        if rng.random() < 0.8:
            spec["order"] = rng.choice((10, 100, 250.5, 500, 1000, rng.randint(1, 5000)))
        spec["selector"] = self.selector()
        if rng.random() < 0.1:
            spec["serviceAccountSelector"] = f'role == "{rng.choice(SA_NAMES)}"'
        spec["tier"] = tier
        spec["types"] = types
        prefix = "" if tier == "default" else f"{tier}."
        return f"{prefix}gnp-{index}", spec

    def network_set(self, index: int) -> tuple[str, dict[str, str], list[str]]:
        rng = self.rng
        labels = {"netset-role": rng.choice(("partner", "threat", "saas", "office", "vendor"))}
        if rng.random() < 0.5:
            labels["feed"] = f"feed-{rng.randrange(20)}"
        nets: list[str] = []
        for _ in range(rng.choice((1, 2, 3, 5, 8, 20, 60, 250))):
            if rng.random() < 0.1:
                nets.append(f"2001:db8:{rng.randrange(65536):x}::/48")
            else:
                prefix = rng.choice((32, 32, 32, 28, 24, 20, 16))
                value = rng.getrandbits(32) & ~((1 << (32 - prefix)) - 1) & 0xFFFFFFFF
                nets.append(f"{ipv4(value)}/{prefix}")
        return f"netset-{index}", labels, sorted(set(nets))

    # --- the whole shape ----------------------------------------------------------------------

    def write(self, out: ListWriter) -> None:
        cluster = self.cluster
        rng = self.rng
        self.plan_namespaces()
        self.plan_pods()
        self.place_pods()
        write_cluster_basics(cluster, out)
        out.add(cluster.tier("security", 100, "Pass"))
        out.add(cluster.tier("platform", 200, "Deny"))
        self.write_namespaces(out)

        for index in range(scaled(150, self.scale)):
            name, labels, nets = self.network_set(index)
            self.netset_labels.append(labels)
            out.add(cluster.global_network_set(name, labels, nets))

        tiers = ("default",) * 5 + ("security", "platform")
        for index in range(scaled(800, self.scale)):
            name, spec = self.global_policy(rng.choice(tiers), index)
            out.add(cluster.global_policy(name, spec))

        weights = [1.0 / (1 + i) ** 0.4 for i in range(len(self.namespaces))]
        taken: set[tuple[str, str]] = set()
        for index in range(scaled(1200, self.scale)):
            ns = rng.choices(self.namespaces, weights)[0]
            name, spec = self.k8s_policy(ns, index)
            if (ns, name) in taken:
                name = f"{name}-{index}"
            taken.add((ns, name))
            out.add(cluster.network_policy(ns, name, spec))

        for pod in self.kube_dns():
            out.add(cluster.pod(pod))
        for pod in self.pods:
            out.add(cluster.pod(pod))

    def kube_dns(self) -> Iterator[PodPlan]:
        owner = ("ReplicaSet", "coredns-668d6bf9bc", self.cluster.uid())
        container = Container(
            "coredns",
            "registry.k8s.io/coredns/coredns:v1.11.3",
            (("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"), ("metrics", 9153, "TCP")),
        )
        for index, (node, host_ip) in enumerate(
            ((LOCAL_NODE, LOCAL_NODE_IP), ("node-00000", ipv4((172 << 24 | 16 << 16) + 2)))
        ):
            yield PodPlan(
                name=f"coredns-668d6bf9bc-{self.cluster.suffix(5)}",
                namespace="kube-system",
                labels={"k8s-app": "kube-dns", "pod-template-hash": "668d6bf9bc"},
                service_account="coredns",
                containers=(container,),
                node=node,
                host_ip=host_ip,
                ips=[f"10.127.255.{2 + index}"],
                owner=owner,
                generate_name="coredns-668d6bf9bc-",
            )


def shape_varied(cluster: Cluster, out: ListWriter, scale: float) -> None:
    VariedCluster(cluster, scale).write(out)
    out.add(cluster.service_account("kube-system", "coredns"))


# --------------------------------------------------------------------------------------------
# CLI

SHAPES: dict[str, Callable[[Cluster, ListWriter, float], None]] = {
    "tags": shape_tags,
    "tenants": shape_tenants,
    "netsets": shape_netsets,
    "varied": shape_varied,
}


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write Kubernetes-shaped inputs modelled on Felix's calc-graph benchmarks.",
    )
    parser.add_argument("shape", choices=sorted(SHAPES), metavar="SHAPE", help=", ".join(SHAPES))
    parser.add_argument("dir", type=Path, metavar="DIR", help="where the NNNNN.json files go")
    parser.add_argument(
        "--scale", type=positive_float, default=1.0, help="multiplies every count (default 1)"
    )
    args = parser.parse_args(argv)
    shape: str = args.shape
    scale: float = args.scale
    seed = SEED + sorted(SHAPES).index(shape)
    cluster = Cluster(seed)
    out = ListWriter(args.dir)
    SHAPES[shape](cluster, out, scale)
    summary = out.close()
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.kinds.items()))
    print(
        f"{shape} x{scale:g}: {summary.documents} documents ({kinds}; "
        f"{summary.local_pods} pods on {LOCAL_NODE}) in {summary.files} files, "
        f"{summary.bytes / 1e6:.1f} MB, in {args.dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
