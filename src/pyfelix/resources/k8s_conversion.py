"""Kubernetes objects as Calico's Kubernetes datastore turns them into Calico's own (Calico
3.32 and master: libcalico-go/lib/backend/k8s/conversion).

A NetworkPolicy becomes the NetworkPolicy of the same name and namespace in tier ``default``
at order 1000, its pod selector restricted to Kubernetes pods; the rest of pyfelix then
treats it as the Calico policy it is (the kind stays KubernetesNetworkPolicy, so Felix's chain
names ``cali-pi-knp/<namespace>/<name>`` and explanations name the Kubernetes object).

The conversion is a pure function of the object; what cannot be converted (a port Calico
cannot parse) is left out with its rule, as Calico drops such a rule, and validation
(pyfelix.validation) reports it by name first.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import attrs

from pyfelix.resources.k8s_policy import (
    KubernetesNetworkPolicy,
    LabelSelector,
    NetworkPolicyPeer,
    NetworkPolicyPort,
)
from pyfelix.resources.meta import ObjectMeta
from pyfelix.resources.policy import NetworkPolicy, NetworkPolicySpec
from pyfelix.resources.rules import EntityRule, Rule
from pyfelix.values import Port

ORCHESTRATOR_LABEL = "projectcalico.org/orchestrator"
#: Every selector Calico makes from a pod selector starts here: only Kubernetes pods.
PODS_ONLY = f"{ORCHESTRATOR_LABEL} == 'k8s'"
KNP_TIER = "default"
KNP_ORDER = 1000.0


class ConversionError(ValueError):
    """A part of a Kubernetes object Calico cannot convert (its rule is left out)."""


def k8s_selector(selector: LabelSelector | None, *, pods: bool) -> str:
    """A LabelSelector as Calico writes it: for pods always with the Kubernetes-pods term;
    for namespaces ``all()`` when empty and "" when absent (the policy's own namespace).
    matchLabels sorted by key, then matchExpressions in the order given."""
    terms = [PODS_ONLY] if pods else []
    if selector is None:
        return " && ".join(terms)
    if not pods and not selector.match_labels and not selector.match_expressions:
        return "all()"
    for key in sorted(selector.match_labels):
        terms.append(f"{key} == '{selector.match_labels[key]}'")
    for expression in selector.match_expressions:
        values = "', '".join(expression.values)
        if expression.operator == "In":
            terms.append(f"{expression.key} in {{ '{values}' }}")
        elif expression.operator == "NotIn":
            terms.append(f"{expression.key} not in {{ '{values}' }}")
        elif expression.operator == "Exists":
            terms.append(f"has({expression.key})")
        elif expression.operator == "DoesNotExist":
            terms.append(f"! has({expression.key})")
    return " && ".join(terms)


def _network(cidr: str) -> str:
    """Go's ParseCIDR written back: the masked network."""
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError as exc:
        raise ConversionError(f"invalid CIDR {cidr!r}") from exc


def _peer(peer: NetworkPolicyPeer | None) -> EntityRule:
    if peer is None:
        return EntityRule()
    if peer.ip_block is not None:
        return EntityRule(
            nets=(_network(peer.ip_block.cidr),),
            not_nets=tuple(_network(cidr) for cidr in peer.ip_block.except_),
        )
    return EntityRule(
        selector=k8s_selector(peer.pod_selector, pods=True),
        namespace_selector=k8s_selector(peer.namespace_selector, pods=False),
    )


def _port(port: NetworkPolicyPort) -> tuple[str, tuple[Port, ...] | None]:
    """(protocol, ports) of one port entry; ports None means every port of the protocol."""
    protocol = (port.protocol or "TCP").upper()
    if port.port is None:
        return protocol, None
    text = str(port.port)
    if port.end_port is not None:
        text = f"{text}:{port.end_port}"
    try:
        return protocol, (Port.parse(text),)
    except ValueError as exc:
        raise ConversionError(str(exc)) from exc


def simplify_ports(ports: Sequence[Port]) -> tuple[Port, ...]:
    """Calico's SimplifyPorts: named ports first, then numbers and ranges merged into the
    fewest ranges, in order; left as given when there is nothing to merge."""
    if len(ports) <= 1:
        return tuple(ports)
    named = [p for p in ports if p.is_named]
    numbers = sorted(
        {n for p in ports if not p.is_named for n in range(p.min_port, p.max_port + 1)}
    )
    if len(numbers) <= 1:
        return tuple(ports)
    merged: list[Port] = []
    start = previous = numbers[0]
    for number in numbers[1:]:
        if number != previous + 1:
            merged.append(Port(start, previous))
            start = number
        previous = number
    merged.append(Port(start, previous))
    return (*named, *merged)


def _rules(
    peers: Sequence[NetworkPolicyPeer], ports: Sequence[NetworkPolicyPort], ingress: bool
) -> list[Rule]:
    """One Kubernetes rule as Calico's: a rule per protocol (sorted) and peer (in order)."""
    by_protocol: dict[str, list[Port] | None] = {}
    if not ports:
        by_protocol = {"": None}
    for port in ports:
        protocol, given = _port(port)
        if given is None:
            by_protocol[protocol] = None
        elif protocol not in by_protocol:
            by_protocol[protocol] = list(given)
        elif (known := by_protocol[protocol]) is not None:
            known.extend(given)
    sides = [_peer(p) for p in peers] or [_peer(None)]
    rules = []
    for protocol in sorted(by_protocol):
        numbers = by_protocol[protocol]
        matched = simplify_ports(numbers) if numbers else ()
        for side in sides:
            if ingress:
                source, destination = side, EntityRule(ports=matched)
            else:
                source, destination = EntityRule(), attrs.evolve(side, ports=matched)
            rules.append(
                Rule(
                    action="Allow",
                    protocol=protocol or None,
                    source=source,
                    destination=destination,
                )
            )
    return rules


def _converted_rules(
    rules: Sequence[tuple[Sequence[NetworkPolicyPeer], Sequence[NetworkPolicyPort]]],
    ingress: bool,
) -> tuple[Rule, ...]:
    out: list[Rule] = []
    for peers, ports in rules:
        try:
            out += _rules(peers, ports, ingress)
        except ConversionError:
            continue  # Calico drops the rule; validation named it
    return tuple(out)


def network_policy(policy: KubernetesNetworkPolicy) -> NetworkPolicy:
    """The Calico NetworkPolicy Calico makes of a Kubernetes one (same name and namespace)."""
    spec = policy.spec
    types = [t for t in ("Ingress", "Egress") if t in spec.policy_types] or ["Ingress"]
    converted = NetworkPolicySpec(
        tier=KNP_TIER,
        order=KNP_ORDER,
        selector=k8s_selector(spec.pod_selector, pods=True),
        types=tuple(types),
        ingress=_converted_rules([(r.peers, r.ports) for r in spec.ingress], ingress=True),
        egress=_converted_rules([(r.peers, r.ports) for r in spec.egress], ingress=False),
    )
    metadata = ObjectMeta(
        name=policy.name,
        namespace=policy.namespace,
        uid=policy.metadata.uid,
        resource_version=policy.metadata.resource_version,
        creation_timestamp=policy.metadata.creation_timestamp,
    )
    return NetworkPolicy(metadata=metadata, spec=converted)
