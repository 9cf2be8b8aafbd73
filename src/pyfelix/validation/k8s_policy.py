"""Kubernetes' NetworkPolicy as the API server validates it (ValidateNetworkPolicy: label
selectors, policy types, ports and endPort, peers and ipBlocks) and ClusterNetworkPolicy as
its CRD does (tier, priority, one subject, one field per peer and protocol, port ranges), each
problem naming its field. The converted Calico policy is then valid by construction."""

from __future__ import annotations

from pyfelix.resources.k8s_policy import (
    AdminEgressRule,
    AdminIngressRule,
    AdminNetworkPolicy,
    AdminNetworkPolicySpec,
    AdminPeer,
    AdminPolicyPort,
    BaselineAdminNetworkPolicy,
    ClusterEgressRule,
    ClusterIngressRule,
    ClusterPeer,
    ClusterProtocol,
    ClusterSubject,
    EgressRule,
    IngressRule,
    KubernetesClusterNetworkPolicy,
    KubernetesNetworkPolicy,
    LabelSelector,
    NetworkPolicyPeer,
    NetworkPolicyPort,
    PodsPeer,
)
from pyfelix.validation.common import (
    Checker,
    check_cidr,
    check_enum,
    check_labels,
    check_nets,
    port_name_problem,
    qualified_name_problem,
)

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
PROTOCOLS = ("TCP", "UDP", "SCTP")
POLICY_TYPES = ("Ingress", "Egress")


def check_label_selector(c: Checker, selector: LabelSelector) -> None:
    check_labels(c.at("matchLabels"), selector.match_labels)
    for index, requirement in enumerate(selector.match_expressions):
        rc = c.at("matchExpressions").at(index)
        problem = qualified_name_problem(requirement.key)
        if problem:
            rc.at("key").error(f"invalid label key {requirement.key!r}: {problem}")
        check_enum(rc.at("operator"), requirement.operator, OPERATORS)
        if requirement.operator in ("In", "NotIn"):
            rc.at("values").check(
                bool(requirement.values),
                f"must be specified when operator is {requirement.operator}",
            )
        elif requirement.operator in ("Exists", "DoesNotExist"):
            rc.at("values").check(
                not requirement.values,
                f"may not be specified when operator is {requirement.operator}",
            )


def _check_port(c: Checker, port: NetworkPolicyPort) -> None:
    if port.protocol is not None:
        check_enum(c.at("protocol"), port.protocol, PROTOCOLS)
    if isinstance(port.port, int):
        c.at("port").check(
            1 <= port.port <= 65535, f"port {port.port} invalid: must be between 1 and 65535"
        )
    elif isinstance(port.port, str):
        problem = port_name_problem(port.port)
        if problem:
            c.at("port").error(f"invalid port name {port.port!r}: {problem}")
    if port.end_port is None:
        return
    ec = c.at("endPort")
    if not isinstance(port.port, int):
        ec.error("may not be specified when port is not a number")
        return
    if ec.check(
        1 <= port.end_port <= 65535, f"endPort {port.end_port} invalid: must be between 1 and 65535"
    ):
        ec.check(port.end_port >= port.port, "must be greater than or equal to port")


def _check_peer(c: Checker, peer: NetworkPolicyPeer) -> None:
    selectors = peer.pod_selector is not None or peer.namespace_selector is not None
    if peer.ip_block is None and not selectors:
        c.error("must specify a peer (podSelector, namespaceSelector or ipBlock)")
    if peer.ip_block is not None and selectors:
        c.error("may not specify ipBlock together with podSelector or namespaceSelector")
    if peer.pod_selector is not None:
        check_label_selector(c.at("podSelector"), peer.pod_selector)
    if peer.namespace_selector is not None:
        check_label_selector(c.at("namespaceSelector"), peer.namespace_selector)
    if peer.ip_block is None:
        return
    bc = c.at("ipBlock")
    if not peer.ip_block.cidr:
        bc.at("cidr").error("must not be empty")
        return
    network = check_cidr(bc.at("cidr"), peer.ip_block.cidr)
    for index, cidr in enumerate(peer.ip_block.except_):
        xc = bc.at("except").at(index)
        excluded = check_cidr(xc, cidr)
        if network is None or excluded is None:
            continue
        if excluded.version != network.version:
            xc.error(f"{cidr!r} is not in the address family of cidr {peer.ip_block.cidr!r}")
        elif not (excluded.subnet_of(network) and excluded.prefixlen > network.prefixlen):  # type: ignore[arg-type]
            xc.error(f"{cidr!r} must be a strict subset of cidr {peer.ip_block.cidr!r}")


def check_kubernetes_network_policy(c: Checker, policy: KubernetesNetworkPolicy) -> None:
    spec = policy.spec
    sc = c.at("spec")
    check_label_selector(sc.at("podSelector"), spec.pod_selector)
    for index, policy_type in enumerate(spec.policy_types):
        check_enum(sc.at("policyTypes").at(index), policy_type, POLICY_TYPES)
    if len(set(spec.policy_types)) != len(spec.policy_types):
        sc.at("policyTypes").error("duplicate policy type")
    directions: tuple[tuple[str, str, tuple[IngressRule | EgressRule, ...]], ...] = (
        ("ingress", "from", spec.ingress),
        ("egress", "to", spec.egress),
    )
    for direction, peers_field, rules in directions:
        for index, rule in enumerate(rules):
            rc = sc.at(direction).at(index)
            for p_index, peer in enumerate(rule.peers):
                _check_peer(rc.at(peers_field).at(p_index), peer)
            for p_index, port in enumerate(rule.ports):
                _check_port(rc.at("ports").at(p_index), port)


MAX_CLUSTER_RULES = 25
CLUSTER_TIERS = ("Admin", "Baseline")
CLUSTER_ACTIONS = ("Accept", "Deny", "Pass")


def _one_of(c: Checker, present: dict[str, bool]) -> None:
    count = sum(present.values())
    if count != 1:
        c.error(f"must set exactly one of {', '.join(present)} (set: {count})")


def _check_pods_peer(c: Checker, pods: PodsPeer) -> None:
    check_label_selector(c.at("namespaceSelector"), pods.namespace_selector)
    check_label_selector(c.at("podSelector"), pods.pod_selector)


def _check_subject(c: Checker, subject: ClusterSubject) -> None:
    """Exactly one of namespaces and pods, each a valid selector."""
    _one_of(c, {"namespaces": subject.namespaces is not None, "pods": subject.pods is not None})
    if subject.namespaces is not None:
        check_label_selector(c.at("namespaces"), subject.namespaces)
    if subject.pods is not None:
        _check_pods_peer(c.at("pods"), subject.pods)


def _check_cluster_peer(c: Checker, peer: ClusterPeer, egress: bool) -> None:
    fields = {"namespaces": peer.namespaces is not None, "pods": peer.pods is not None}
    if egress:
        fields["networks"] = bool(peer.networks)
    elif peer.networks:
        c.at("networks").error("only an egress peer may name networks")
        return
    _one_of(c, fields)
    if peer.namespaces is not None:
        check_label_selector(c.at("namespaces"), peer.namespaces)
    if peer.pods is not None:
        _check_pods_peer(c.at("pods"), peer.pods)
    c.at("networks").check(len(peer.networks) <= MAX_CLUSTER_RULES, "at most 25 networks")
    check_nets(c.at("networks"), peer.networks)


def _check_cluster_protocol(c: Checker, protocol: ClusterProtocol) -> None:
    by_name = {"tcp": protocol.tcp, "udp": protocol.udp, "sctp": protocol.sctp}
    present = {name: value is not None for name, value in by_name.items()}
    present["destinationNamedPort"] = protocol.destination_named_port is not None
    _one_of(c, present)
    if protocol.destination_named_port is not None:
        problem = port_name_problem(protocol.destination_named_port)
        if problem:
            c.at("destinationNamedPort").error(
                f"invalid port name {protocol.destination_named_port!r}: {problem}"
            )
    for name, ports in by_name.items():
        if ports is None:
            continue
        port = ports.destination_port
        pc = c.at(name).at("destinationPort")
        if port is None:
            pc.error("must be specified")
            continue
        _one_of(pc, {"number": port.number is not None, "range": port.range is not None})
        if port.number is not None:
            pc.at("number").check(
                1 <= port.number <= 65535, f"port {port.number} invalid: must be 1-65535"
            )
        if port.range is not None:
            rc = pc.at("range")
            for end, value in (("start", port.range.start), ("end", port.range.end)):
                rc.at(end).check(1 <= value <= 65535, f"port {value} invalid: must be 1-65535")
            rc.check(port.range.start < port.range.end, "start port must be less than end port")


def check_cluster_network_policy(c: Checker, policy: KubernetesClusterNetworkPolicy) -> None:
    spec = policy.spec
    sc = c.at("spec")
    check_enum(sc.at("tier"), spec.tier, CLUSTER_TIERS)
    sc.at("priority").check(0 <= spec.priority <= 1000, "must be between 0 and 1000")
    _check_subject(sc.at("subject"), spec.subject)
    directions: tuple[tuple[str, str, tuple[ClusterIngressRule | ClusterEgressRule, ...]], ...] = (
        ("ingress", "from", spec.ingress),
        ("egress", "to", spec.egress),
    )
    for direction, peers_field, rules in directions:
        sc.at(direction).check(len(rules) <= MAX_CLUSTER_RULES, "at most 25 rules")
        for index, rule in enumerate(rules):
            rc = sc.at(direction).at(index)
            check_enum(rc.at("action"), rule.action, CLUSTER_ACTIONS)
            rc.at("name").check(len(rule.name) <= 100, "must be no more than 100 characters")
            peers = rc.at(peers_field)
            peers.check(1 <= len(rule.peers) <= MAX_CLUSTER_RULES, "must list 1 to 25 peers")
            for p_index, peer in enumerate(rule.peers):
                _check_cluster_peer(peers.at(p_index), peer, egress=direction == "egress")
            rc.at("protocols").check(len(rule.protocols) <= MAX_CLUSTER_RULES, "at most 25")
            for p_index, protocol in enumerate(rule.protocols):
                _check_cluster_protocol(rc.at("protocols").at(p_index), protocol)


MAX_ADMIN_RULES = 100


def _check_admin_peer(c: Checker, peer: AdminPeer, egress: bool) -> None:
    fields = {"namespaces": peer.namespaces is not None, "pods": peer.pods is not None}
    egress_only = {
        "nodes": peer.nodes is not None,
        "networks": bool(peer.networks),
        "domainNames": bool(peer.domain_names),
    }
    if egress:
        fields |= egress_only
    elif any(egress_only.values()):
        c.error("only an egress peer may name nodes, networks or domainNames")
        return
    _one_of(c, fields)
    if peer.namespaces is not None:
        check_label_selector(c.at("namespaces"), peer.namespaces)
    if peer.pods is not None:
        _check_pods_peer(c.at("pods"), peer.pods)
    if peer.nodes is not None:
        check_label_selector(c.at("nodes"), peer.nodes)
    check_nets(c.at("networks"), peer.networks)


def _check_admin_port(c: Checker, port: AdminPolicyPort) -> None:
    present = {
        "portNumber": port.port_number is not None,
        "portRange": port.port_range is not None,
        "namedPort": port.named_port is not None,
    }
    _one_of(c, present)
    for name, value in (("portNumber", port.port_number), ("portRange", port.port_range)):
        if value is not None and value.protocol is not None:
            check_enum(c.at(name).at("protocol"), value.protocol, PROTOCOLS)
    if port.port_number is not None:
        number = port.port_number.port
        c.at("portNumber").at("port").check(1 <= number <= 65535, f"port {number} invalid")
    if port.port_range is not None:
        rc = c.at("portRange")
        start, end = port.port_range.start, port.port_range.end
        for bound, number in (("start", start), ("end", end)):
            rc.at(bound).check(1 <= number <= 65535, f"port {number} invalid: must be 1-65535")
        rc.check(start < end, "start must be less than end")


def check_admin_network_policy(
    c: Checker, policy: AdminNetworkPolicy | BaselineAdminNetworkPolicy
) -> None:
    """AdminNetworkPolicy and BaselineAdminNetworkPolicy (v1alpha1) as their CRDs check them;
    the baseline is a singleton named default."""
    spec = policy.spec
    sc = c.at("spec")
    baseline = isinstance(policy, BaselineAdminNetworkPolicy)
    if baseline:
        c.at("metadata").at("name").check(
            policy.name == "default", "a BaselineAdminNetworkPolicy must be named default"
        )
    elif isinstance(policy.spec, AdminNetworkPolicySpec):
        priority = policy.spec.priority
        sc.at("priority").check(0 <= priority <= 1000, "must be between 0 and 1000")
    _check_subject(sc.at("subject"), spec.subject)
    actions = ("Allow", "Deny") if baseline else ("Allow", "Deny", "Pass")
    directions: tuple[tuple[str, str, tuple[AdminIngressRule | AdminEgressRule, ...]], ...] = (
        ("ingress", "from", spec.ingress),
        ("egress", "to", spec.egress),
    )
    for direction, peers_field, rules in directions:
        sc.at(direction).check(len(rules) <= MAX_ADMIN_RULES, "at most 100 rules")
        for index, rule in enumerate(rules):
            rc = sc.at(direction).at(index)
            check_enum(rc.at("action"), rule.action, actions)
            peers = rc.at(peers_field)
            peers.check(1 <= len(rule.peers) <= MAX_ADMIN_RULES, "must list 1 to 100 peers")
            for p_index, peer in enumerate(rule.peers):
                _check_admin_peer(peers.at(p_index), peer, egress=direction == "egress")
            for p_index, port in enumerate(rule.ports or ()):
                _check_admin_port(rc.at("ports").at(p_index), port)
