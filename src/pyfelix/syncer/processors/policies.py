"""Policies and tiers: Calico's, staged, and those converted from the Kubernetes kinds; their
rules and the selector folding Felix's IP set ids depend on (Calico's string forms exactly,
since the ids hash the canonical form of the folded selector)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs

from pyfelix import model
from pyfelix.ipnet import canonical_networks
from pyfelix.model import (
    NAMESPACE_LABEL,
    NAMESPACE_LABEL_PREFIX,
    SERVICE_ACCOUNT_LABEL,
    SERVICE_ACCOUNT_LABEL_PREFIX,
)
from pyfelix.resources.rules import EntityRule
from pyfelix.resources.rules import Rule as V3Rule
from pyfelix.selector import SelectorError, parse_selector
from pyfelix.values import FrozenMap

if TYPE_CHECKING:
    from pyfelix.resources import (
        GlobalNetworkPolicy,
        KubernetesClusterNetworkPolicy,
        KubernetesNetworkPolicy,
        Resource,
        Tier,
    )
    from pyfelix.resources.k8s_policy import AdminNetworkPolicy, BaselineAdminNetworkPolicy
from pyfelix.syncer.processors.common import (
    KV,
    normalise_action,
    normalise_protocol,
)

# ------------------------------------------------------------------------ selector folding


def prefixed_canonical(text: str, prefix: str) -> str | None:
    """``text`` with every label prefixed, in canonical form; None if it does not parse."""
    try:
        return str(parse_selector(text).with_label_prefix(prefix))
    except SelectorError:
        return None


def _append(current: str, addition: str | None) -> str:
    if addition is None:
        return current
    return f"({current}) && {addition}" if current else addition


def policy_selector(spec: Any, namespace: str) -> str:
    """The endpoint selector Felix uses for a policy (namespace and SA selectors folded in)."""
    if namespace:
        scope = f"{NAMESPACE_LABEL} == '{namespace}'"
        selector = f"({spec.selector}) && {scope}" if spec.selector else scope
    else:
        selector = spec.selector
        ns_selector = getattr(spec, "namespace_selector", "")
        if ns_selector:
            selector = _append(selector, prefixed_canonical(ns_selector, NAMESPACE_LABEL_PREFIX))
            selector = selector.replace("all()", f"has({NAMESPACE_LABEL})")
    if spec.service_account_selector:
        selector = _append(
            selector,
            prefixed_canonical(spec.service_account_selector, SERVICE_ACCOUNT_LABEL_PREFIX),
        )
        if not namespace:
            selector = selector.replace("all()", f"has({SERVICE_ACCOUNT_LABEL})")
    return selector


#: The rule selectors made last, each kept as the one string of its text: a namespace's
#: rules repeat theirs (from its pods, to its pods), a string each where 100,000 tenants'
#: were 23 MB. Bounded, not interned: most of a cluster's are its one namespace's own.
_SELECTORS_KEPT = 256
_RECENT_SELECTORS: dict[str, str] = {}


def entity_selector(entity: EntityRule, namespace: str) -> str:
    """A rule side's selector with its namespace selector, service accounts and scope (the
    string made last for the same text, if among the last ``_SELECTORS_KEPT``)."""
    text = _entity_selector(entity, namespace)
    kept = _RECENT_SELECTORS.get(text)
    if kept is not None:
        return kept
    if len(_RECENT_SELECTORS) >= _SELECTORS_KEPT:
        _RECENT_SELECTORS.clear()
    _RECENT_SELECTORS[text] = text
    return text


def _entity_selector(entity: EntityRule, namespace: str) -> str:
    ns_part = ""
    if entity.namespace_selector:
        ns_part = prefixed_canonical(entity.namespace_selector, NAMESPACE_LABEL_PREFIX) or ""
        ns_part = ns_part.replace("all()", f"has({NAMESPACE_LABEL})")
        ns_part = ns_part.replace("global()", f"!has({NAMESPACE_LABEL})")
    elif namespace:
        ns_part = f"{NAMESPACE_LABEL} == '{namespace}'"
    sa_part = ""
    accounts = entity.service_accounts
    if accounts is not None:
        sa_selector = (
            prefixed_canonical(accounts.selector, SERVICE_ACCOUNT_LABEL_PREFIX)
            if accounts.selector
            else None
        )
        names = ""
        if accounts.names:
            quoted = ", ".join(f'"{n}"' for n in sorted(set(accounts.names)))
            names = f"{SERVICE_ACCOUNT_LABEL} in {{{quoted}}}"
        both = f"({sa_selector}) && ({names})"
        sa_part = both if sa_selector and names else (sa_selector or names)
    if sa_part and entity.selector:
        body = f"({sa_part}) && ({entity.selector})"
    else:
        body = sa_part or entity.selector
    if ns_part and (body or entity.not_selector or entity.namespace_selector):
        return f"({ns_part}) && ({body})" if body else ns_part
    return body


# ---------------------------------------------------------------------------------- rules


RULE_CACHE = 16384


@functools.lru_cache(maxsize=RULE_CACHE)
def convert_rule(rule: V3Rule, namespace: str) -> model.Rule:
    src, dst = rule.source, rule.destination
    icmp, not_icmp = rule.icmp, rule.not_icmp
    return model.Rule(
        action=normalise_action(rule.action),
        ip_version=rule.ip_version,
        protocol=normalise_protocol(rule.protocol),
        not_protocol=normalise_protocol(rule.not_protocol),
        icmp_type=icmp.type if icmp else None,
        icmp_code=icmp.code if icmp else None,
        not_icmp_type=not_icmp.type if not_icmp else None,
        not_icmp_code=not_icmp.code if not_icmp else None,
        src_nets=canonical_networks(src.nets),
        not_src_nets=canonical_networks(src.not_nets),
        src_selector=entity_selector(src, namespace),
        not_src_selector=src.not_selector,
        src_ports=src.ports,
        not_src_ports=src.not_ports,
        src_service=src.services.name if src.services else "",
        src_service_namespace=(src.services.namespace or namespace) if src.services else "",
        dst_nets=canonical_networks(dst.nets),
        not_dst_nets=canonical_networks(dst.not_nets),
        dst_selector=entity_selector(dst, namespace),
        not_dst_selector=dst.not_selector,
        dst_ports=dst.ports,
        not_dst_ports=dst.not_ports,
        dst_service=dst.services.name if dst.services else "",
        dst_service_namespace=(dst.services.namespace or namespace) if dst.services else "",
        http=rule.http,
        annotations=rule.metadata.annotations if rule.metadata else FrozenMap(),
        original_src_selector=src.selector,
        original_src_namespace_selector=src.namespace_selector,
        original_dst_selector=dst.selector,
        original_dst_namespace_selector=dst.namespace_selector,
    )


def _rules(rules: tuple[V3Rule, ...], namespace: str) -> tuple[model.Rule, ...]:
    return tuple(convert_rule(r, namespace) for r in rules)


# ------------------------------------------------------------------------------ per kind


@functools.lru_cache(maxsize=64)
def _lowered(types: tuple[str, ...]) -> tuple[str, ...]:
    """A policy's types as Felix's model spells them, one tuple for all policies alike (a
    new tuple and strings for each were 9 MB for 100,000 policies). Bounded: the input is
    not validated yet where the agent converts it."""
    return tuple(t.lower() for t in types)


def _policy(resource: Any, origin: Resource | None = None, kind: str = "") -> list[KV]:
    """A Calico policy, or (``origin``) the one Calico converted a Kubernetes policy into:
    keyed by the Kubernetes kind then (or ``kind``), as Felix keys it."""
    spec = resource.spec
    namespace = resource.namespace if resource.NAMESPACED else ""
    kind = kind or (origin.KIND if origin is not None else resource.KIND)
    key = model.PolicyKey(resource.name, namespace, kind, spec.effective_tier)
    staged_action = getattr(spec, "staged_action", "")
    if staged_action == "Delete":
        return [(key, None)]
    value = model.Policy(
        namespace=namespace,
        tier=spec.effective_tier,
        order=spec.order,
        inbound_rules=_rules(spec.ingress, namespace),
        outbound_rules=_rules(spec.egress, namespace),
        selector=policy_selector(spec, namespace),
        types=_lowered(spec.effective_types),
        do_not_track=getattr(spec, "do_not_track", False),
        pre_dnat=getattr(spec, "pre_dnat", False),
        apply_on_forward=getattr(spec, "apply_on_forward", False),
        performance_hints=spec.performance_hints,
        staged_action=staged_action,
        origin=origin or resource,
    )
    return [(key, value)]


# The Kubernetes kinds' conversions import those kinds' classes: when the first of them is
# converted, not by every agent (see pyfelix.resources.meta.MANIFEST_KIND_MODULES).


def _kubernetes_network_policy(policy: KubernetesNetworkPolicy) -> list[KV]:
    """A Kubernetes NetworkPolicy as Calico converts it; its staged twin converted the same
    and keyed as staged (Felix then programs nothing of it), or, with stagedAction Delete,
    nothing at all."""
    from pyfelix.resources.k8s_conversion import network_policy  # noqa: PLC0415

    staged_action = getattr(policy.spec, "staged_action", "")
    if staged_action == "Delete":
        return []
    kvs = _policy(network_policy(policy), origin=policy)
    if staged_action:
        kvs = [
            (key, attrs.evolve(value, staged_action=staged_action))
            if isinstance(value, model.Policy)
            else (key, value)
            for key, value in kvs
        ]
    return kvs


def _kubernetes_cluster_network_policy(policy: KubernetesClusterNetworkPolicy) -> list[KV]:
    from pyfelix.resources.k8s_conversion import cluster_network_policy  # noqa: PLC0415

    converted = cluster_network_policy(policy)
    return _policy(converted, origin=policy) if converted is not None else []


def _admin_network_policy(policy: AdminNetworkPolicy) -> list[KV]:
    """Calico 3.29-3.31 keyed these as the GlobalNetworkPolicies they became."""
    from pyfelix.resources.k8s_conversion import admin_network_policy  # noqa: PLC0415

    return _converted_admin_policy(admin_network_policy(policy), policy)


def _baseline_admin_network_policy(policy: BaselineAdminNetworkPolicy) -> list[KV]:
    from pyfelix.resources.k8s_conversion import baseline_admin_network_policy  # noqa: PLC0415

    return _converted_admin_policy(baseline_admin_network_policy(policy), policy)


def _converted_admin_policy(converted: GlobalNetworkPolicy | None, origin: Resource) -> list[KV]:
    return [] if converted is None else _policy(converted, origin=origin, kind=converted.KIND)


def _tier(tier: Tier) -> list[KV]:
    action = "Pass" if tier.spec.default_action == "Pass" else "Deny"
    return [(model.TierKey(tier.name), model.Tier(tier.spec.order, action, origin=tier))]
