"""Calico v3 (and the needed Kubernetes) resources as frozen attrs classes.

Each kind has ``from_manifest(doc)`` (calicoctl's format) and ``to_manifest()``; the loader reads
files and directories. Structure is checked here (unknown fields, wrong types); whether values
are allowed is :mod:`pyfelix.validation`'s job.

The kinds are imported on first use (``from pyfelix.resources import WorkloadEndpoint``
imports one module): the agent's first-read child needs only the loader, before the agent's
own imports. The loader's kind lookups import the modules of the kind looked up
(``meta.MANIFEST_KIND_MODULES``); ``KINDS`` imports every kind's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
        StagedKubernetesNetworkPolicy,
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

#: Where each name of the package is defined.
_LOCATIONS = {
    "BGPConfiguration": "pyfelix.resources.cluster",
    "ClusterInformation": "pyfelix.resources.cluster",
    "FelixConfiguration": "pyfelix.resources.cluster",
    "Node": "pyfelix.resources.cluster",
    "HostEndpoint": "pyfelix.resources.endpoints",
    "WorkloadEndpoint": "pyfelix.resources.endpoints",
    "AdminNetworkPolicy": "pyfelix.resources.k8s_policy",
    "BaselineAdminNetworkPolicy": "pyfelix.resources.k8s_policy",
    "KubernetesClusterNetworkPolicy": "pyfelix.resources.k8s_policy",
    "KubernetesNetworkPolicy": "pyfelix.resources.k8s_policy",
    "StagedKubernetesNetworkPolicy": "pyfelix.resources.k8s_policy",
    "EndpointSlice": "pyfelix.resources.kubernetes",
    "Namespace": "pyfelix.resources.kubernetes",
    "Service": "pyfelix.resources.kubernetes",
    "ServiceAccount": "pyfelix.resources.kubernetes",
    "LoadResult": "pyfelix.resources.loader",
    "Located": "pyfelix.resources.loader",
    "load_paths": "pyfelix.resources.loader",
    "load_text": "pyfelix.resources.loader",
    "KINDS": "pyfelix.resources.meta",
    "ObjectMeta": "pyfelix.resources.meta",
    "Resource": "pyfelix.resources.meta",
    "BlockAffinity": "pyfelix.resources.networks",
    "GlobalNetworkSet": "pyfelix.resources.networks",
    "IPAMBlock": "pyfelix.resources.networks",
    "IPPool": "pyfelix.resources.networks",
    "NetworkSet": "pyfelix.resources.networks",
    "Pod": "pyfelix.resources.pods",
    "POLICY_KINDS": "pyfelix.resources.policy",
    "GlobalNetworkPolicy": "pyfelix.resources.policy",
    "NetworkPolicy": "pyfelix.resources.policy",
    "Profile": "pyfelix.resources.policy",
    "StagedGlobalNetworkPolicy": "pyfelix.resources.policy",
    "StagedNetworkPolicy": "pyfelix.resources.policy",
    "Tier": "pyfelix.resources.policy",
    "EntityRule": "pyfelix.resources.rules",
    "Rule": "pyfelix.resources.rules",
    "Port": "pyfelix.values",
}


def __getattr__(name: str) -> object:
    """Each name imported from its module when first asked for (``KINDS`` with every kind)."""
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "KINDS":
        importlib.import_module("pyfelix.resources.meta").known_kinds()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
    "StagedKubernetesNetworkPolicy",
    "StagedNetworkPolicy",
    "Tier",
    "WorkloadEndpoint",
    "load_paths",
    "load_text",
]
