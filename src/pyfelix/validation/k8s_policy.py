"""Kubernetes' NetworkPolicy as the API server validates it (ValidateNetworkPolicy): label
selectors, policy types, ports and endPort, peers and ipBlocks, each problem naming its
field. The converted Calico policy is then valid by construction."""

from __future__ import annotations

from pyfelix.resources.k8s_policy import (
    EgressRule,
    IngressRule,
    KubernetesNetworkPolicy,
    LabelSelector,
    NetworkPolicyPeer,
    NetworkPolicyPort,
)
from pyfelix.validation.common import (
    Checker,
    check_cidr,
    check_enum,
    check_labels,
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
