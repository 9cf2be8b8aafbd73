"""A strict fake dataplane: applies the calculation graph's messages and fails on any message
that a real dataplane could not apply in that order (a delta to an unknown IP set, a policy
naming a set not yet created, an endpoint naming a policy or profile not yet sent, a policy or
set removed while still referenced). A VXLAN route may name a node whose VTEP is not (or no
longer) known, as Felix's mock dataplane allows: the routes manager waits for it."""

from __future__ import annotations

from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix_dataplane.state import NodeState

KEYED_REMOVALS = (
    m.ServiceAccountRemove,
    m.NamespaceRemove,
    m.WireguardEndpointRemove,
    m.HostMetadataRemove,
    m.IPAMPoolRemove,
    m.ServiceRemove,
)


class OrderingViolation(AssertionError):
    """The calculation graph sent something the dataplane cannot apply yet."""


def _rule_set_ids(update: m.ActivePolicyUpdate | m.ActiveProfileUpdate) -> set[str]:
    """The IP sets the update's rules match on, as the graph resolved them."""
    ids: set[str] = set()
    for parsed in update.inbound + update.outbound:
        for value in attrs.astuple(parsed.ipsets, recurse=False):
            ids.update((value,) if isinstance(value, str) else value)
    return ids - {""}


@attrs.define
class StrictDataplane(NodeState):
    """The dry-run dataplane, refusing anything a real dataplane could not apply in order."""

    received: list[Any] = attrs.Factory(list)

    def fail(self, message: str) -> None:
        raise OrderingViolation(message)

    def _referenced_sets(self) -> set[str]:
        used: set[str] = set()
        for policy in self.policies.values():
            used |= _rule_set_ids(policy)
        for profile in self.profiles.values():
            used |= _rule_set_ids(profile)
        return used

    def _endpoint_policies(self) -> set[m.PolicyID]:
        used: set[m.PolicyID] = set()
        for endpoint in [*self.workloads.values(), *self.hosts.values()]:
            for tier in _all_tiers(endpoint):
                used.update(tier.ingress_policies)
                used.update(tier.egress_policies)
        return used

    def _endpoint_profiles(self) -> set[str]:
        endpoints: list[Any] = [*self.workloads.values(), *self.hosts.values()]
        return {p for e in endpoints for p in e.endpoint.profile_ids}

    def apply(self, msg: Any) -> None:
        self.received.append(msg)
        self.check(msg)
        super().apply(msg)

    def check(self, msg: Any) -> None:
        if isinstance(msg, m.IPSetDeltaUpdate) and msg.id not in self.ipsets:
            self.fail(f"delta for unknown IP set {msg.id}")
        elif isinstance(msg, m.IPSetRemove):
            if msg.id not in self.ipsets:
                self.fail(f"removal of unknown IP set {msg.id}")
            if msg.id in self._referenced_sets():
                self.fail(f"IP set {msg.id} removed while a rule uses it")
        elif isinstance(msg, m.ActivePolicyUpdate | m.ActiveProfileUpdate):
            missing = _rule_set_ids(msg) - set(self.ipsets)
            if missing:
                self.fail(f"{msg.id} uses IP sets not yet created: {sorted(missing)}")
        elif isinstance(msg, m.ActivePolicyRemove):
            if msg.id not in self.policies:
                self.fail(f"removal of unknown policy {msg.id}")
            if msg.id in self._endpoint_policies():
                self.fail(f"policy {msg.id} removed while an endpoint uses it")
        elif isinstance(msg, m.ActiveProfileRemove):
            if msg.id not in self.profiles:
                self.fail(f"removal of unknown profile {msg.id}")
            if msg.id in self._endpoint_profiles():
                self.fail(f"profile {msg.id} removed while an endpoint uses it")
        elif isinstance(msg, m.WorkloadEndpointUpdate | m.HostEndpointUpdate):
            for tier in _all_tiers(msg):
                for policy in tier.ingress_policies + tier.egress_policies:
                    if policy not in self.policies:
                        self.fail(f"endpoint {msg.id} names policy {policy} not yet sent")
            for profile in msg.endpoint.profile_ids:
                if profile not in self.profiles:
                    self.fail(f"endpoint {msg.id} names profile {profile} not yet sent")
        elif (isinstance(msg, m.WorkloadEndpointRemove) and msg.id not in self.workloads) or (
            isinstance(msg, m.HostEndpointRemove) and msg.id not in self.hosts
        ):
            self.fail(f"removal of unknown endpoint {msg.id}")
        elif isinstance(msg, m.RouteRemove) and msg.dst not in self.routes:
            self.fail(f"removal of unknown route {msg.dst}")
        elif isinstance(msg, m.VXLANTunnelEndpointRemove) and msg.node not in self.vteps:
            self.fail(f"removal of unknown VTEP {msg.node}")
        elif type(msg) in KEYED_REMOVALS and not self.holds(msg):
            self.fail(f"removal of unknown {type(msg).__name__}: {msg}")

    def view(self) -> dict[str, Any]:
        """Everything the dataplane holds, comparable between runs."""
        return {
            "ipsets": {k: frozenset(members) for k, (_, members) in self.ipsets.items()},
            "policies": dict(self.policies),
            "profiles": dict(self.profiles),
            "workloads": dict(self.workloads),
            "hosts": dict(self.hosts),
            "routes": dict(self.routes),
            "vteps": dict(self.vteps),
            "keyed": {
                "pools": dict(self.pools),
                "host_metadata": dict(self.host_metadata),
                "wireguard": dict(self.wireguard),
                "namespaces": dict(self.namespaces),
                "service_accounts": dict(self.service_accounts),
                "services": dict(self.services),
            },
            "config": self.config_text,
            "encapsulation": self.encapsulation,
        }


def _all_tiers(endpoint: Any) -> list[m.TierInfo]:
    tiers = list(endpoint.tiers)
    if isinstance(endpoint, m.HostEndpointUpdate):
        tiers += [*endpoint.untracked_tiers, *endpoint.pre_dnat_tiers, *endpoint.forward_tiers]
    return tiers
