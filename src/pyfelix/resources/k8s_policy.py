"""Kubernetes' NetworkPolicy (networking.k8s.io/v1), as the API server stores it.

Inside pyfelix the kind is KubernetesNetworkPolicy (Calico's model calls it that), so it sits
beside Calico's own NetworkPolicy of the same name; manifests spell it ``NetworkPolicy``
with apiVersion networking.k8s.io/v1. What it means is Calico's conversion
(pyfelix.resources.k8s_conversion); whether its values are allowed, the API server's rules
(pyfelix.validation).

Absent and empty differ where Kubernetes' Go types use pointers: a peer's ``podSelector`` or
``namespaceSelector`` left out is None, ``{}`` an empty selector (everything).
"""

from __future__ import annotations

import attrs

from pyfelix.resources.kubernetes import RawStatus
from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    INT,
    INT_OR_STR,
    STR,
    STR_LIST,
    STR_MAP,
    ListOf,
    Nested,
    Spec,
    field,
)
from pyfelix.values import FrozenMap


@attrs.frozen
class LabelSelectorRequirement(Spec):
    key: str = field("key", STR, default="", keep_empty=True)
    operator: str = field("operator", STR, default="", keep_empty=True)
    values: tuple[str, ...] = field("values", STR_LIST, factory=tuple)


@attrs.frozen
class LabelSelector(Spec):
    """matchLabels and matchExpressions, ANDed; both empty selects everything."""

    match_labels: FrozenMap[str] = field("matchLabels", STR_MAP, factory=FrozenMap)
    match_expressions: tuple[LabelSelectorRequirement, ...] = field(
        "matchExpressions", ListOf(Nested(LabelSelectorRequirement)), factory=tuple
    )


@attrs.frozen
class IPBlock(Spec):
    cidr: str = field("cidr", STR, default="", keep_empty=True)
    except_: tuple[str, ...] = field("except", STR_LIST, factory=tuple)


@attrs.frozen
class NetworkPolicyPeer(Spec):
    pod_selector: LabelSelector | None = field(
        "podSelector", Nested(LabelSelector), keep_empty=True
    )
    namespace_selector: LabelSelector | None = field(
        "namespaceSelector", Nested(LabelSelector), keep_empty=True
    )
    ip_block: IPBlock | None = field("ipBlock", Nested(IPBlock))


@attrs.frozen
class NetworkPolicyPort(Spec):
    #: TCP when left out.
    protocol: str | None = field("protocol", STR)
    #: A number or a named port; every port when left out.
    port: int | str | None = field("port", INT_OR_STR)
    end_port: int | None = field("endPort", INT)


@attrs.frozen
class IngressRule(Spec):
    peers: tuple[NetworkPolicyPeer, ...] = field(
        "from", ListOf(Nested(NetworkPolicyPeer)), factory=tuple
    )
    ports: tuple[NetworkPolicyPort, ...] = field(
        "ports", ListOf(Nested(NetworkPolicyPort)), factory=tuple
    )


@attrs.frozen
class EgressRule(Spec):
    peers: tuple[NetworkPolicyPeer, ...] = field(
        "to", ListOf(Nested(NetworkPolicyPeer)), factory=tuple
    )
    ports: tuple[NetworkPolicyPort, ...] = field(
        "ports", ListOf(Nested(NetworkPolicyPort)), factory=tuple
    )


@attrs.frozen
class KubernetesNetworkPolicySpec(Spec):
    pod_selector: LabelSelector = field(
        "podSelector", Nested(LabelSelector), factory=LabelSelector, keep_empty=True
    )
    policy_types: tuple[str, ...] = field("policyTypes", STR_LIST, factory=tuple)
    ingress: tuple[IngressRule, ...] = field("ingress", ListOf(Nested(IngressRule)), factory=tuple)
    egress: tuple[EgressRule, ...] = field("egress", ListOf(Nested(EgressRule)), factory=tuple)


@register
@attrs.frozen
class KubernetesNetworkPolicy(Resource):
    """Becomes Calico's NetworkPolicy ``knp.default.<name>`` in tier default (order 1000)."""

    KIND = "KubernetesNetworkPolicy"
    MANIFEST_KIND = "NetworkPolicy"
    API_VERSION = "networking.k8s.io/v1"
    PLURAL = "networkpolicies"
    NAMESPACED = True
    SPEC = KubernetesNetworkPolicySpec
    STATUS = RawStatus
    spec: KubernetesNetworkPolicySpec = attrs.field(factory=KubernetesNetworkPolicySpec)
    status: RawStatus | None = None
