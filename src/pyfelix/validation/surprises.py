"""What is valid but would surprise a Calico operator: inputs Felix programs one way where
Calico's API server, or a reader of the manifest, expects another. ``validate`` and
``dry-run`` print each as a warning on stderr; nothing is refused for them.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyfelix.resources import AdminNetworkPolicy, BaselineAdminNetworkPolicy, Resource
from pyfelix.resources.policy import BUILTIN_TIERS


def policy_tier(resource: Resource) -> str | None:
    """The tier a policy is in (None for anything but a policy)."""
    tier = getattr(getattr(resource, "spec", None), "effective_tier", None)
    return tier if isinstance(tier, str) else None


def missing_tiers(tiers: Iterable[str], policies: Iterable[tuple[str, str]]) -> list[str]:
    """A line for each policy (ident, tier) whose tier is neither among ``tiers`` (the Tier
    resources) nor one Calico creates itself."""
    known = set(tiers) | set(BUILTIN_TIERS)
    return [
        f"{ident}: tier {tier} does not exist: Calico's API server would refuse this policy;"
        " Felix (and pyfelix) programs it in a tier ordered after every other, whose default"
        " action is Deny"
        for ident, tier in policies
        if tier not in known
    ]


def widened_named_ports(resource: Resource) -> list[str]:
    """A line for each ``namedPort`` of an (Baseline)AdminNetworkPolicy rule: Calico
    (3.29-3.31, the releases that read these kinds) matched it as every protocol and port,
    and Felix (and pyfelix) enforce that, so the rule reaches far more than the port it
    names."""
    if not isinstance(resource, AdminNetworkPolicy | BaselineAdminNetworkPolicy):
        return []
    lines = []
    for direction in ("ingress", "egress"):
        for index, rule in enumerate(getattr(resource.spec, direction, ())):
            for number, port in enumerate(rule.ports or ()):
                if port.named_port is None:
                    continue
                lines.append(
                    f"{resource.ident}: spec.{direction}[{index}].ports[{number}].namedPort"
                    f" {port.named_port}: Calico never supported named ports in this kind and"
                    " matches every protocol and port instead (so does pyfelix); name the"
                    " port's number or range to narrow the rule"
                )
    return lines


def surprises(resources: Iterable[Resource]) -> list[str]:
    """A line for each surprise, in the resources' order."""
    resources = list(resources)
    tiers = [r.name for r in resources if r.KIND == "Tier"]
    policies = [(r.ident, tier) for r in resources if (tier := policy_tier(r)) is not None]
    return missing_tiers(tiers, policies) + [
        line for resource in resources for line in widened_named_ports(resource)
    ]
