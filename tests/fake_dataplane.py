"""A strict fake dataplane: applies the calculation graph's messages and fails on any message
that a real dataplane could not apply in that order (a delta to an unknown IP set, a policy
naming a set not yet created, an endpoint naming a policy or profile not yet sent, a policy or
set removed while still referenced, a VXLAN route before its VTEP)."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from pyfelix import messages as m
from pyfelix.calc.rule_scanner import rule_ipsets


class OrderingViolation(AssertionError):
    """The calculation graph sent something the dataplane cannot apply yet."""


def _rule_set_ids(rules: Any) -> set[str]:
    return {data.id for rule in rules for data in rule_ipsets(rule)}


@attrs.define
class StrictDataplane:
    ipsets: dict[str, set[str]] = attrs.Factory(dict)
    ipset_types: dict[str, str] = attrs.Factory(dict)
    policies: dict[m.PolicyID, m.ActivePolicyUpdate] = attrs.Factory(dict)
    profiles: dict[str, m.ActiveProfileUpdate] = attrs.Factory(dict)
    workloads: dict[Any, m.WorkloadEndpointUpdate] = attrs.Factory(dict)
    hosts: dict[Any, m.HostEndpointUpdate] = attrs.Factory(dict)
    routes: dict[str, m.RouteUpdate] = attrs.Factory(dict)
    vteps: dict[str, m.VXLANTunnelEndpointUpdate] = attrs.Factory(dict)
    keyed: dict[tuple[str, Any], Any] = attrs.Factory(dict)
    config: dict[str, str] | None = None
    encapsulation: m.Encapsulation | None = None
    in_sync: bool = False
    not_ready: bool = False
    received: list[Any] = attrs.Factory(list)

    def fail(self, message: str) -> None:
        raise OrderingViolation(message)

    def _referenced_sets(self) -> set[str]:
        used: set[str] = set()
        for policy in self.policies.values():
            used |= _rule_set_ids(policy.policy.inbound_rules + policy.policy.outbound_rules)
        for profile in self.profiles.values():
            used |= _rule_set_ids(profile.profile.inbound_rules + profile.profile.outbound_rules)
        return used

    def _endpoint_policies(self) -> set[m.PolicyID]:
        used: set[m.PolicyID] = set()
        endpoints: list[Any] = [*self.workloads.values(), *self.hosts.values()]
        for endpoint in endpoints:
            tiers = list(endpoint.tiers)
            if isinstance(endpoint, m.HostEndpointUpdate):
                tiers += [
                    *endpoint.untracked_tiers,
                    *endpoint.pre_dnat_tiers,
                    *endpoint.forward_tiers,
                ]
            for tier in tiers:
                used.update(tier.ingress_policies)
                used.update(tier.egress_policies)
        return used

    def _endpoint_profiles(self) -> set[str]:
        endpoints: list[Any] = [*self.workloads.values(), *self.hosts.values()]
        return {p for e in endpoints for p in e.endpoint.profile_ids}

    def apply(self, msg: Any) -> None:
        self.received.append(msg)
        if isinstance(msg, m.InSync):
            self.in_sync = True
        elif isinstance(msg, m.ConfigUpdate):
            self.config = dict(msg.config)
        elif isinstance(msg, m.DatastoreNotReady):
            self.not_ready = True
        elif isinstance(msg, m.IPSetUpdate):
            self.ipsets[msg.id] = set(msg.members)
            self.ipset_types[msg.id] = msg.type
        elif isinstance(msg, m.IPSetDeltaUpdate):
            if msg.id not in self.ipsets:
                self.fail(f"delta for unknown IP set {msg.id}")
            self.ipsets[msg.id] -= msg.removed
            self.ipsets[msg.id] |= msg.added
        elif isinstance(msg, m.IPSetRemove):
            if msg.id not in self.ipsets:
                self.fail(f"removal of unknown IP set {msg.id}")
            if msg.id in self._referenced_sets():
                self.fail(f"IP set {msg.id} removed while a rule uses it")
            del self.ipsets[msg.id]
        elif isinstance(msg, m.ActivePolicyUpdate | m.ActiveProfileUpdate):
            body = msg.policy if isinstance(msg, m.ActivePolicyUpdate) else msg.profile
            missing = _rule_set_ids(body.inbound_rules + body.outbound_rules) - set(self.ipsets)
            if missing:
                self.fail(f"{msg.id} uses IP sets not yet created: {sorted(missing)}")
            if isinstance(msg, m.ActivePolicyUpdate):
                self.policies[msg.id] = msg
            else:
                self.profiles[msg.id] = msg
        elif isinstance(msg, m.ActivePolicyRemove):
            if msg.id not in self.policies:
                self.fail(f"removal of unknown policy {msg.id}")
            if msg.id in self._endpoint_policies():
                self.fail(f"policy {msg.id} removed while an endpoint uses it")
            del self.policies[msg.id]
        elif isinstance(msg, m.ActiveProfileRemove):
            if msg.id not in self.profiles:
                self.fail(f"removal of unknown profile {msg.id}")
            if msg.id in self._endpoint_profiles():
                self.fail(f"profile {msg.id} removed while an endpoint uses it")
            del self.profiles[msg.id]
        elif isinstance(msg, m.WorkloadEndpointUpdate | m.HostEndpointUpdate):
            self._check_endpoint(msg)
            target: dict[Any, Any] = (
                self.workloads if isinstance(msg, m.WorkloadEndpointUpdate) else self.hosts
            )
            target[msg.id] = msg
        elif isinstance(msg, m.WorkloadEndpointRemove | m.HostEndpointRemove):
            target2: dict[Any, Any] = (
                self.workloads if isinstance(msg, m.WorkloadEndpointRemove) else self.hosts
            )
            if msg.id not in target2:
                self.fail(f"removal of unknown endpoint {msg.id}")
            del target2[msg.id]
        elif isinstance(msg, m.RouteUpdate):
            remote = msg.types & {"REMOTE_WORKLOAD", "REMOTE_TUNNEL"}
            if msg.tunnel == "vxlan" and remote and msg.dst_node not in self.vteps:
                self.fail(f"VXLAN route to {msg.dst} before the VTEP of {msg.dst_node}")
            self.routes[msg.dst] = msg
        elif isinstance(msg, m.RouteRemove):
            if msg.dst not in self.routes:
                self.fail(f"removal of unknown route {msg.dst}")
            del self.routes[msg.dst]
        elif isinstance(msg, m.VXLANTunnelEndpointUpdate):
            self.vteps[msg.node] = msg
        elif isinstance(msg, m.VXLANTunnelEndpointRemove):
            if msg.node not in self.vteps:
                self.fail(f"removal of unknown VTEP {msg.node}")
            users = [
                r.dst
                for r in self.routes.values()
                if r.dst_node == msg.node
                and r.tunnel == "vxlan"
                and r.types & {"REMOTE_WORKLOAD", "REMOTE_TUNNEL"}
            ]
            if users:
                self.fail(f"VTEP {msg.node} removed while routes use it: {users}")
            del self.vteps[msg.node]
        elif isinstance(msg, m.Encapsulation):
            self.encapsulation = msg
        else:
            self._keyed(msg)

    def _check_endpoint(self, msg: m.WorkloadEndpointUpdate | m.HostEndpointUpdate) -> None:
        tiers = list(msg.tiers)
        if isinstance(msg, m.HostEndpointUpdate):
            tiers += [*msg.untracked_tiers, *msg.pre_dnat_tiers, *msg.forward_tiers]
        for tier in tiers:
            for policy in tier.ingress_policies + tier.egress_policies:
                if policy not in self.policies:
                    self.fail(f"endpoint {msg.id} names policy {policy} not yet sent")
        for profile in msg.endpoint.profile_ids:
            if profile not in self.profiles:
                self.fail(f"endpoint {msg.id} names profile {profile} not yet sent")

    _KEYED: ClassVar[dict[type, tuple[str, bool]]] = {
        m.ServiceAccountUpdate: ("sa", True),
        m.ServiceAccountRemove: ("sa", False),
        m.NamespaceUpdate: ("ns", True),
        m.NamespaceRemove: ("ns", False),
        m.WireguardEndpointUpdate: ("wg", True),
        m.WireguardEndpointRemove: ("wg", False),
        m.HostMetadataUpdate: ("host", True),
        m.HostMetadataRemove: ("host", False),
        m.IPAMPoolUpdate: ("pool", True),
        m.IPAMPoolRemove: ("pool", False),
        m.ServiceUpdate: ("svc", True),
        m.ServiceRemove: ("svc", False),
    }

    def _keyed(self, msg: Any) -> None:
        kind, is_update = self._KEYED[type(msg)]
        key = (
            (msg.namespace, msg.name)
            if kind == "svc"
            else getattr(msg, "id", None) or getattr(msg, "hostname", None)
        )
        if is_update:
            self.keyed[(kind, key)] = msg
        else:
            if (kind, key) not in self.keyed:
                self.fail(f"removal of unknown {kind} {key}")
            del self.keyed[(kind, key)]

    def view(self) -> dict[str, Any]:
        """Everything the dataplane holds, comparable between runs."""
        return {
            "ipsets": {k: frozenset(v) for k, v in self.ipsets.items()},
            "policies": dict(self.policies),
            "profiles": dict(self.profiles),
            "workloads": dict(self.workloads),
            "hosts": dict(self.hosts),
            "routes": dict(self.routes),
            "vteps": dict(self.vteps),
            "keyed": dict(self.keyed),
            "config": self.config,
            "encapsulation": self.encapsulation,
        }
