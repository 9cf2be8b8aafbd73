"""Kubernetes' NetworkPolicy (networking.k8s.io/v1) and the cluster-scoped ClusterNetworkPolicy
(policy.networking.k8s.io/v1alpha2), as the API server stores them.

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


@attrs.frozen(cache_hash=True)
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
    SHARED_SPEC = True
    STATUS = RawStatus
    spec: KubernetesNetworkPolicySpec = attrs.field(factory=KubernetesNetworkPolicySpec)
    status: RawStatus | None = None


@attrs.frozen
class StagedKubernetesNetworkPolicySpec(KubernetesNetworkPolicySpec):
    staged_action: str = field("stagedAction", STR, default="")


@register
@attrs.frozen
class StagedKubernetesNetworkPolicy(Resource):
    """Calico's staged twin of a Kubernetes NetworkPolicy (projectcalico.org/v3, a
    NetworkPolicy's spec and a stagedAction): converted as its twin would be, keyed as staged,
    and, as every staged policy, never enforced."""

    KIND = "StagedKubernetesNetworkPolicy"
    PLURAL = "stagedkubernetesnetworkpolicies"
    NAMESPACED = True
    SPEC = StagedKubernetesNetworkPolicySpec
    spec: StagedKubernetesNetworkPolicySpec = attrs.field(factory=StagedKubernetesNetworkPolicySpec)


# ------------------------------------------------------------------------ cluster-scoped


@attrs.frozen
class PodsPeer(Spec):
    """Pods by namespace and pod labels (both required; ``{}`` is every one)."""

    namespace_selector: LabelSelector = field(
        "namespaceSelector", Nested(LabelSelector), factory=LabelSelector, keep_empty=True
    )
    pod_selector: LabelSelector = field(
        "podSelector", Nested(LabelSelector), factory=LabelSelector, keep_empty=True
    )


@attrs.frozen
class ClusterPeer(Spec):
    """Exactly one of its fields; ``networks`` only as an egress peer."""

    namespaces: LabelSelector | None = field("namespaces", Nested(LabelSelector), keep_empty=True)
    pods: PodsPeer | None = field("pods", Nested(PodsPeer), keep_empty=True)
    networks: tuple[str, ...] = field("networks", STR_LIST, factory=tuple)


@attrs.frozen
class PortRange(Spec):
    start: int = field("start", INT, default=0, keep_empty=True)
    end: int = field("end", INT, default=0, keep_empty=True)


@attrs.frozen
class DestinationPort(Spec):
    number: int | None = field("number", INT)
    range: PortRange | None = field("range", Nested(PortRange))


@attrs.frozen
class ProtocolPorts(Spec):
    destination_port: DestinationPort | None = field(
        "destinationPort", Nested(DestinationPort), keep_empty=True
    )


@attrs.frozen
class ClusterProtocol(Spec):
    """Exactly one of tcp, udp, sctp (each with its destination port) or a named port."""

    tcp: ProtocolPorts | None = field("tcp", Nested(ProtocolPorts), keep_empty=True)
    udp: ProtocolPorts | None = field("udp", Nested(ProtocolPorts), keep_empty=True)
    sctp: ProtocolPorts | None = field("sctp", Nested(ProtocolPorts), keep_empty=True)
    destination_named_port: str | None = field("destinationNamedPort", STR)


@attrs.frozen
class ClusterIngressRule(Spec):
    name: str = field("name", STR, default="")
    action: str = field("action", STR, default="", keep_empty=True)
    peers: tuple[ClusterPeer, ...] = field(
        "from", ListOf(Nested(ClusterPeer)), factory=tuple, keep_empty=True
    )
    protocols: tuple[ClusterProtocol, ...] = field(
        "protocols", ListOf(Nested(ClusterProtocol)), factory=tuple
    )


@attrs.frozen
class ClusterEgressRule(Spec):
    name: str = field("name", STR, default="")
    action: str = field("action", STR, default="", keep_empty=True)
    peers: tuple[ClusterPeer, ...] = field(
        "to", ListOf(Nested(ClusterPeer)), factory=tuple, keep_empty=True
    )
    protocols: tuple[ClusterProtocol, ...] = field(
        "protocols", ListOf(Nested(ClusterProtocol)), factory=tuple
    )


@attrs.frozen
class ClusterSubject(Spec):
    namespaces: LabelSelector | None = field("namespaces", Nested(LabelSelector), keep_empty=True)
    pods: PodsPeer | None = field("pods", Nested(PodsPeer), keep_empty=True)


@attrs.frozen
class ClusterNetworkPolicySpec(Spec):
    tier: str = field("tier", STR, default="", keep_empty=True)
    priority: int = field("priority", INT, default=0, keep_empty=True)
    subject: ClusterSubject = field(
        "subject", Nested(ClusterSubject), factory=ClusterSubject, keep_empty=True
    )
    ingress: tuple[ClusterIngressRule, ...] = field(
        "ingress", ListOf(Nested(ClusterIngressRule)), factory=tuple
    )
    egress: tuple[ClusterEgressRule, ...] = field(
        "egress", ListOf(Nested(ClusterEgressRule)), factory=tuple
    )


@register
@attrs.frozen
class KubernetesClusterNetworkPolicy(Resource):
    """The cluster-scoped policy API (policy.networking.k8s.io): tier Admin or Baseline,
    becoming a Calico policy in tier kube-admin or kube-baseline, ordered by priority."""

    KIND = "KubernetesClusterNetworkPolicy"
    MANIFEST_KIND = "ClusterNetworkPolicy"
    API_VERSION = "policy.networking.k8s.io/v1alpha2"
    PLURAL = "clusternetworkpolicies"
    SPEC = ClusterNetworkPolicySpec
    STATUS = RawStatus
    spec: ClusterNetworkPolicySpec = attrs.field(factory=ClusterNetworkPolicySpec)
    status: RawStatus | None = None


# ------------------------------------------------------------------------ v1alpha1 (3.29-3.31)


@attrs.frozen
class AdminPortNumber(Spec):
    protocol: str | None = field("protocol", STR)
    port: int = field("port", INT, default=0, keep_empty=True)


@attrs.frozen
class AdminPortRange(Spec):
    protocol: str | None = field("protocol", STR)
    start: int = field("start", INT, default=0, keep_empty=True)
    end: int = field("end", INT, default=0, keep_empty=True)


@attrs.frozen
class AdminPolicyPort(Spec):
    """Exactly one of a port number, a range or a named port (TCP when no protocol)."""

    port_number: AdminPortNumber | None = field("portNumber", Nested(AdminPortNumber))
    port_range: AdminPortRange | None = field("portRange", Nested(AdminPortRange))
    named_port: str | None = field("namedPort", STR)


@attrs.frozen
class AdminPeer(Spec):
    """Exactly one field; nodes, networks and domainNames only as egress peers."""

    namespaces: LabelSelector | None = field("namespaces", Nested(LabelSelector), keep_empty=True)
    pods: PodsPeer | None = field("pods", Nested(PodsPeer), keep_empty=True)
    nodes: LabelSelector | None = field("nodes", Nested(LabelSelector), keep_empty=True)
    networks: tuple[str, ...] = field("networks", STR_LIST, factory=tuple)
    domain_names: tuple[str, ...] = field("domainNames", STR_LIST, factory=tuple)


@attrs.frozen
class AdminIngressRule(Spec):
    name: str = field("name", STR, default="")
    action: str = field("action", STR, default="", keep_empty=True)
    peers: tuple[AdminPeer, ...] = field(
        "from", ListOf(Nested(AdminPeer)), factory=tuple, keep_empty=True
    )
    ports: tuple[AdminPolicyPort, ...] | None = field("ports", ListOf(Nested(AdminPolicyPort)))


@attrs.frozen
class AdminEgressRule(Spec):
    name: str = field("name", STR, default="")
    action: str = field("action", STR, default="", keep_empty=True)
    peers: tuple[AdminPeer, ...] = field(
        "to", ListOf(Nested(AdminPeer)), factory=tuple, keep_empty=True
    )
    ports: tuple[AdminPolicyPort, ...] | None = field("ports", ListOf(Nested(AdminPolicyPort)))


@attrs.frozen
class BaselineAdminNetworkPolicySpec(Spec):
    subject: ClusterSubject = field(
        "subject", Nested(ClusterSubject), factory=ClusterSubject, keep_empty=True
    )
    ingress: tuple[AdminIngressRule, ...] = field(
        "ingress", ListOf(Nested(AdminIngressRule)), factory=tuple
    )
    egress: tuple[AdminEgressRule, ...] = field(
        "egress", ListOf(Nested(AdminEgressRule)), factory=tuple
    )


@attrs.frozen
class AdminNetworkPolicySpec(BaselineAdminNetworkPolicySpec):
    priority: int = field("priority", INT, default=0, keep_empty=True)


@register
@attrs.frozen
class AdminNetworkPolicy(Resource):
    """The older cluster-scoped API Calico 3.29-3.31 read: a Calico policy
    ``kanp.adminnetworkpolicy.<name>`` in tier adminnetworkpolicy, ordered by priority."""

    KIND = "AdminNetworkPolicy"
    API_VERSION = "policy.networking.k8s.io/v1alpha1"
    PLURAL = "adminnetworkpolicies"
    SPEC = AdminNetworkPolicySpec
    STATUS = RawStatus
    spec: AdminNetworkPolicySpec = attrs.field(factory=AdminNetworkPolicySpec)
    status: RawStatus | None = None


@register
@attrs.frozen
class BaselineAdminNetworkPolicy(Resource):
    """Its baseline (a singleton named ``default``): ``kbanp.baselineadminnetworkpolicy.
    <name>`` in tier baselineadminnetworkpolicy, at order 1000."""

    KIND = "BaselineAdminNetworkPolicy"
    API_VERSION = "policy.networking.k8s.io/v1alpha1"
    PLURAL = "baselineadminnetworkpolicies"
    SPEC = BaselineAdminNetworkPolicySpec
    STATUS = RawStatus
    spec: BaselineAdminNetworkPolicySpec = attrs.field(factory=BaselineAdminNetworkPolicySpec)
    status: RawStatus | None = None
