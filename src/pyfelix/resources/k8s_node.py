"""Kubernetes' Node (v1) as ``kubectl get nodes -o yaml`` prints it.

On the Kubernetes API datastore Calico keeps no Node object of its own: it reads each v1 Node,
whose ``projectcalico.org/*`` annotations calico-node wrote (addresses, tunnel addresses, VXLAN
MACs, WireGuard keys). pyfelix.resources.k8s_conversion.calico_node turns one into the Calico
Node Felix sees. The fields Calico reads are typed; the rest of Kubernetes' Node is accepted
and left out (``UNREAD``: a node's images and conditions are most of its JSON).
"""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import STR, STR_LIST, ListOf, Nested, Spec, field

#: A node spec's fields Calico never reads.
_NODE_SPEC_UNREAD = frozenset(
    ("configSource", "externalID", "providerID", "taints", "unschedulable"),
)
#: A node status's fields Calico never reads.
_NODE_STATUS_UNREAD = frozenset(
    (
        "allocatable",
        "capacity",
        "conditions",
        "config",
        "daemonEndpoints",
        "declaredFeatures",
        "features",
        "images",
        "nodeInfo",
        "phase",
        "runtimeHandlers",
        "volumesAttached",
        "volumesInUse",
    ),
)


@attrs.frozen
class KubernetesNodeSpec(Spec):
    UNREAD = _NODE_SPEC_UNREAD
    pod_cidr: str = field("podCIDR", STR, default="")
    pod_cidrs: tuple[str, ...] = field("podCIDRs", STR_LIST, factory=tuple)


@attrs.frozen
class KubernetesNodeAddress(Spec):
    type: str = field("type", STR, default="", keep_empty=True)
    address: str = field("address", STR, default="", keep_empty=True)


@attrs.frozen
class KubernetesNodeStatus(Spec):
    UNREAD = _NODE_STATUS_UNREAD
    addresses: tuple[KubernetesNodeAddress, ...] = field(
        "addresses", ListOf(Nested(KubernetesNodeAddress)), factory=tuple
    )


@register
@attrs.frozen
class KubernetesNode(Resource):
    """Becomes the Calico Node of the same name (``k8s_conversion.calico_node``)."""

    KIND = "KubernetesNode"
    MANIFEST_KIND = "Node"
    API_VERSION = "v1"
    PLURAL = "nodes"
    SPEC = KubernetesNodeSpec
    STATUS = KubernetesNodeStatus
    spec: KubernetesNodeSpec = attrs.field(factory=KubernetesNodeSpec)
    status: KubernetesNodeStatus | None = None
