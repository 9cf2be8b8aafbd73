"""The kinds of a live cluster's dump that Felix never consumes, and are skipped unread.

``kubectl get all -A -o yaml`` holds Deployments, ReplicaSets and Events beside the pods and
policies; Calico's own groups hold kinds for BGP, IPAM bookkeeping and kube-controllers. Felix
reads none of them, so a dump that has them is loaded as it is, and the loader counts what it
left out. A kind nobody knows in a group Calico or Kubernetes networking defines is a typo or a
newer API, and stays an error: only the groups and kinds below are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The groups Felix reads kinds from: anything of another group is never consumed.
READ_GROUPS = frozenset(
    {
        "",  # core v1: pods, namespaces, service accounts, nodes, services
        "projectcalico.org",
        "crd.projectcalico.org",
        "networking.k8s.io",
        "policy.networking.k8s.io",
        "discovery.k8s.io",
    }
)

#: Kinds of those groups that Felix's syncer does not watch.
UNREAD_KINDS: Mapping[str, frozenset[str]] = {
    "": frozenset(
        {
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
        }
    ),
    "networking.k8s.io": frozenset({"IPAddress", "Ingress", "IngressClass", "ServiceCIDR"}),
    "discovery.k8s.io": frozenset(),
    "policy.networking.k8s.io": frozenset(),
    # BGP is the BGP daemon's, IPAM handles and reservations the IPAM plugin's, the rest the
    # controllers' and the operator's.
    "projectcalico.org": frozenset(
        {
            "BGPFilter",
            "BGPPeer",
            "CalicoNodeStatus",
            "IPAMConfiguration",
            "IPReservation",
            "KubeControllersConfiguration",
        }
    ),
    "crd.projectcalico.org": frozenset(
        {
            "BGPFilter",
            "BGPPeer",
            "CalicoNodeStatus",
            "IPAMConfig",
            "IPAMHandle",
            "IPReservation",
            "KubeControllersConfiguration",
        }
    ),
}


def group_of(api_version: str) -> str:
    """``apps`` of ``apps/v1``; the core group (``v1``) is ``""``."""
    return api_version.rpartition("/")[0]


def unread_kind(doc: Mapping[str, Any]) -> str | None:
    """The label (``Deployment.apps``, ``ConfigMap``) a document Felix never consumes is
    counted under, or None for one the loader must read (or refuse)."""
    kind, api_version = doc.get("kind"), doc.get("apiVersion")
    if type(kind) is not str or type(api_version) is not str or not kind or not api_version:
        return None
    group = group_of(api_version)
    if group not in READ_GROUPS:
        return f"{kind}.{group}"
    if kind in UNREAD_KINDS[group]:
        return f"{kind}.{group}" if group else kind
    return None


def skipped_line(labels: Iterable[str]) -> str | None:
    """One line counting what was skipped, by kind; None when nothing was."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    if not counts:
        return None
    total = sum(counts.values())
    kinds = ", ".join(f"{counts[label]} {label}" for label in sorted(counts))
    noun = "resource" if total == 1 else "resources"
    return f"skipped {total} {noun} of kinds Felix does not read: {kinds}"
