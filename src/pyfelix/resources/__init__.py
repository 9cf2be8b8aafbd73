"""Calico v3 (and the needed Kubernetes) resources as frozen attrs classes.

Each kind has ``from_manifest(doc)`` (calicoctl's format) and ``to_manifest()``; the loader reads
files and directories. Structure is checked here (unknown fields, wrong types); whether values
are allowed is :mod:`pyfelix.validation`'s job.
"""

from pyfelix.resources.cluster import (
    BGPConfiguration,
    ClusterInformation,
    FelixConfiguration,
    Node,
)
from pyfelix.resources.endpoints import HostEndpoint, WorkloadEndpoint
from pyfelix.resources.k8s_policy import (
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    KubernetesClusterNetworkPolicy,
    KubernetesNetworkPolicy,
)
from pyfelix.resources.kubernetes import EndpointSlice, Namespace, Service, ServiceAccount
from pyfelix.resources.loader import LoadResult, Located, load_paths, load_text
from pyfelix.resources.meta import KINDS, ObjectMeta, Resource
from pyfelix.resources.networks import (
    BlockAffinity,
    GlobalNetworkSet,
    IPAMBlock,
    IPPool,
    NetworkSet,
)
from pyfelix.resources.pods import Pod
from pyfelix.resources.policy import (
    POLICY_KINDS,
    GlobalNetworkPolicy,
    NetworkPolicy,
    Profile,
    StagedGlobalNetworkPolicy,
    StagedNetworkPolicy,
    Tier,
)
from pyfelix.resources.rules import EntityRule, Rule
from pyfelix.values import Port

__all__ = [
    "KINDS",
    "POLICY_KINDS",
    "AdminNetworkPolicy",
    "BGPConfiguration",
    "BaselineAdminNetworkPolicy",
    "BlockAffinity",
    "ClusterInformation",
    "EndpointSlice",
    "EntityRule",
    "FelixConfiguration",
    "GlobalNetworkPolicy",
    "GlobalNetworkSet",
    "HostEndpoint",
    "IPAMBlock",
    "IPPool",
    "KubernetesClusterNetworkPolicy",
    "KubernetesNetworkPolicy",
    "LoadResult",
    "Located",
    "Namespace",
    "NetworkPolicy",
    "NetworkSet",
    "Node",
    "ObjectMeta",
    "Pod",
    "Port",
    "Profile",
    "Resource",
    "Rule",
    "Service",
    "ServiceAccount",
    "StagedGlobalNetworkPolicy",
    "StagedNetworkPolicy",
    "Tier",
    "WorkloadEndpoint",
    "load_paths",
    "load_text",
]
