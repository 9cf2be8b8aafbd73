"""Tiers, policies (global, namespaced and staged) and profiles."""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import ConditionsStatus, Resource, register
from pyfelix.resources.rules import RULES, Rule
from pyfelix.resources.schema import BOOL, FLOAT, STR, STR_LIST, STR_MAP, Spec, field
from pyfelix.values import FrozenMap

DEFAULT_TIER = "default"
# Felix's order for the default tier when no Tier resource gives one.
DEFAULT_TIER_ORDER = 1_000_000.0
#: The tiers Calico creates at start-up (order, default action), which exist without a Tier
#: resource: the Kubernetes cluster-scoped policies' two either side of default.
BUILTIN_TIERS: dict[str, tuple[float, str]] = {
    DEFAULT_TIER: (DEFAULT_TIER_ORDER, "Deny"),
    "kube-admin": (1_000.0, "Pass"),
    "kube-baseline": (10_000_000.0, "Pass"),
    # Calico 3.29-3.31's, for AdminNetworkPolicy and BaselineAdminNetworkPolicy.
    "adminnetworkpolicy": (1_000.0, "Pass"),
    "baselineadminnetworkpolicy": (10_000_000.0, "Pass"),
}


@attrs.frozen
class TierSpec(Spec):
    order: float | None = field("order", FLOAT)
    default_action: str = field("defaultAction", STR, default="")


@register
@attrs.frozen
class Tier(Resource):
    KIND = "Tier"
    PLURAL = "tiers"
    SPEC = TierSpec
    STATUS = ConditionsStatus
    spec: TierSpec = attrs.field(factory=TierSpec)
    status: ConditionsStatus | None = None


@attrs.frozen
class NetworkPolicySpec(Spec):
    """Fields every policy kind has (NetworkPolicy's spec)."""

    tier: str = field("tier", STR, default="")
    order: float | None = field("order", FLOAT)
    ingress: tuple[Rule, ...] = field("ingress", RULES, factory=tuple)
    egress: tuple[Rule, ...] = field("egress", RULES, factory=tuple)
    selector: str = field("selector", STR, default="")
    types: tuple[str, ...] = field("types", STR_LIST, factory=tuple)
    service_account_selector: str = field("serviceAccountSelector", STR, default="")
    performance_hints: tuple[str, ...] = field("performanceHints", STR_LIST, factory=tuple)

    @property
    def effective_tier(self) -> str:
        """spec.tier, or "default"; never derived from a "tier.name" policy name."""
        return self.tier or DEFAULT_TIER

    @property
    def effective_types(self) -> tuple[str, ...]:
        """Calico's defaulting: Ingress, plus Egress when egress rules exist (both if both)."""
        if self.types:
            return self.types
        if self.egress and not self.ingress:
            return ("Egress",)
        if self.egress:
            return ("Ingress", "Egress")
        return ("Ingress",)


@attrs.frozen
class GlobalNetworkPolicySpec(NetworkPolicySpec):
    do_not_track: bool = field("doNotTrack", BOOL, default=False)
    pre_dnat: bool = field("preDNAT", BOOL, default=False)
    apply_on_forward: bool = field("applyOnForward", BOOL, default=False)
    namespace_selector: str = field("namespaceSelector", STR, default="")


@attrs.frozen
class StagedNetworkPolicySpec(NetworkPolicySpec):
    staged_action: str = field("stagedAction", STR, default="")


@attrs.frozen
class StagedGlobalNetworkPolicySpec(GlobalNetworkPolicySpec):
    staged_action: str = field("stagedAction", STR, default="")


@register
@attrs.frozen
class GlobalNetworkPolicy(Resource):
    KIND = "GlobalNetworkPolicy"
    PLURAL = "globalnetworkpolicies"
    SPEC = GlobalNetworkPolicySpec
    spec: GlobalNetworkPolicySpec = attrs.field(factory=GlobalNetworkPolicySpec)


@register
@attrs.frozen
class NetworkPolicy(Resource):
    KIND = "NetworkPolicy"
    PLURAL = "networkpolicies"
    NAMESPACED = True
    SPEC = NetworkPolicySpec
    spec: NetworkPolicySpec = attrs.field(factory=NetworkPolicySpec)


@register
@attrs.frozen
class StagedGlobalNetworkPolicy(Resource):
    """Carried through the pipeline for visibility; never enforced."""

    KIND = "StagedGlobalNetworkPolicy"
    PLURAL = "stagedglobalnetworkpolicies"
    SPEC = StagedGlobalNetworkPolicySpec
    spec: StagedGlobalNetworkPolicySpec = attrs.field(factory=StagedGlobalNetworkPolicySpec)


@register
@attrs.frozen
class StagedNetworkPolicy(Resource):
    """Carried through the pipeline for visibility; never enforced."""

    KIND = "StagedNetworkPolicy"
    PLURAL = "stagednetworkpolicies"
    NAMESPACED = True
    SPEC = StagedNetworkPolicySpec
    spec: StagedNetworkPolicySpec = attrs.field(factory=StagedNetworkPolicySpec)


@attrs.frozen
class ProfileSpec(Spec):
    ingress: tuple[Rule, ...] = field("ingress", RULES, factory=tuple)
    egress: tuple[Rule, ...] = field("egress", RULES, factory=tuple)
    labels_to_apply: FrozenMap[str] = field("labelsToApply", STR_MAP, factory=FrozenMap)


@register
@attrs.frozen
class Profile(Resource):
    KIND = "Profile"
    PLURAL = "profiles"
    SPEC = ProfileSpec
    spec: ProfileSpec = attrs.field(factory=ProfileSpec)


POLICY_KINDS: tuple[type[Resource], ...] = (
    GlobalNetworkPolicy,
    NetworkPolicy,
    StagedGlobalNetworkPolicy,
    StagedNetworkPolicy,
)

__all__ = [
    "BUILTIN_TIERS",
    "DEFAULT_TIER",
    "DEFAULT_TIER_ORDER",
    "POLICY_KINDS",
    "GlobalNetworkPolicy",
    "GlobalNetworkPolicySpec",
    "NetworkPolicy",
    "NetworkPolicySpec",
    "Profile",
    "ProfileSpec",
    "StagedGlobalNetworkPolicy",
    "StagedNetworkPolicy",
    "Tier",
    "TierSpec",
]
