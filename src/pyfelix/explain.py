"""Explain a policy decision: which policy (or tier end, or profile) decides a flow, and how.

It walks the same state the dataplane is given — the endpoints' ordered tiers, the active
policies' and profiles' rules, the IP sets' members — the way the rendered chains do: egress of
the source endpoint, then ingress of the destination; per tier, the first rule that matches
decides (Pass moves to the next tier, Log goes on); a tier with policies and no verdict drops
unless its default action is Pass; then the profiles; then drop.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import attrs

from pyfelix import messages as m
from pyfelix.values import Port
from pyfelix_dataplane.state import NodeState

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "sctp": 132, "udplite": 136}


KUBERNETES_POLICY = "KubernetesNetworkPolicy"
#: How explanations name the policies converted from Kubernetes objects.
KUBERNETES_KINDS = {
    KUBERNETES_POLICY: "Kubernetes NetworkPolicy",
    "KubernetesClusterNetworkPolicy": "Kubernetes ClusterNetworkPolicy",
}


#: Calico 3.29-3.31 named the policies it made of these by prefix.
OLD_ADMIN_PREFIXES = {
    "kanp.adminnetworkpolicy.": "Kubernetes AdminNetworkPolicy",
    "kbanp.baselineadminnetworkpolicy.": "Kubernetes BaselineAdminNetworkPolicy",
}


def policy_label(tier: str, policy: m.PolicyID) -> str:
    """``tier/namespace/name`` for Calico's policies; the Kubernetes object for converted
    ones (what the user wrote, and would look up with kubectl)."""
    kind = KUBERNETES_KINDS.get(policy.kind)
    if kind:
        return f"{kind} {policy}"
    for prefix, name in OLD_ADMIN_PREFIXES.items():
        if policy.name.startswith(prefix):
            return f"{name} {policy.name.removeprefix(prefix)}"
    return f"{tier}/{policy}"


@attrs.frozen
class Flow:
    src_ip: str
    dst_ip: str
    protocol: str = "tcp"
    dst_port: int | None = None
    icmp_type: int | None = None


@attrs.frozen
class Verdict:
    allowed: bool
    reason: str


def _in_nets(ip: str, nets: Sequence[str]) -> bool:
    address = ipaddress.ip_address(ip)
    return any(
        address.version == ipaddress.ip_network(n).version
        and address in ipaddress.ip_network(n, strict=False)
        for n in nets
    )


@attrs.define(eq=False)
class Explainer:
    dataplane: NodeState

    def _members(self, set_id: str) -> set[str]:
        return self.dataplane.ipsets.get(set_id, ("", set()))[1]

    def _in_set(self, set_id: str, ip: str) -> bool:
        return _in_nets(ip, [m for m in self._members(set_id) if "," not in m])

    def _protocol_matches(self, wanted: int | str | None, flow: Flow) -> bool:
        if wanted is None:
            return True
        number = PROTOCOLS.get(flow.protocol, -1)
        return wanted in (flow.protocol, number)

    def _ports_match(
        self, ports: Sequence[Port], named: Sequence[str], ip: str, flow: Flow
    ) -> bool:
        port = flow.dst_port
        if port is None:
            return False
        numeric = any(p.min_port <= port <= p.max_port for p in ports if not p.is_named)
        by_name = any(f"{ip},{flow.protocol}:{port}" in self._members(n) for n in named)
        return numeric or by_name

    def rule_matches(self, parsed: m.ParsedRule, flow: Flow) -> bool:
        """Whether the rule matches the flow, by the IP sets the graph resolved for it."""
        rule, sets = parsed.rule, parsed.ipsets
        if not self._protocol_matches(rule.protocol, flow):
            return False
        if rule.not_protocol is not None and self._protocol_matches(rule.not_protocol, flow):
            return False
        version = ipaddress.ip_address(flow.src_ip).version
        if rule.ip_version not in (None, version):
            return False
        if rule.icmp_type is not None and (flow.icmp_type != rule.icmp_type):
            return False
        if rule.not_icmp_type is not None and flow.icmp_type == rule.not_icmp_type:
            return False
        # Source side: the flow's source port is ephemeral, so source ports never match.
        if rule.src_ports or (rule.src_nets and not _in_nets(flow.src_ip, rule.src_nets)):
            return False
        if _in_nets(flow.src_ip, rule.not_src_nets):
            return False
        if any(not self._in_set(s, flow.src_ip) for s in sets.src):
            return False
        if any(self._in_set(s, flow.src_ip) for s in sets.not_src):
            return False
        if sets.src_service and flow.src_ip not in self._members(sets.src_service):
            return False
        # Destination side.
        if rule.dst_nets and not _in_nets(flow.dst_ip, rule.dst_nets):
            return False
        if _in_nets(flow.dst_ip, rule.not_dst_nets):
            return False
        if any(not self._in_set(s, flow.dst_ip) for s in sets.dst):
            return False
        if rule.dst_ports and not self._ports_match(
            rule.dst_ports, sets.dst_named_ports, flow.dst_ip, flow
        ):
            return False
        if rule.not_dst_ports and self._ports_match(
            rule.not_dst_ports, sets.not_dst_named_ports, flow.dst_ip, flow
        ):
            return False
        if any(self._in_set(s, flow.dst_ip) for s in sets.not_dst):
            return False
        if sets.dst_service:
            member = f"{flow.dst_ip},{flow.protocol}:{flow.dst_port}"
            if member not in self._members(sets.dst_service):
                return False
        return True

    def _direction(self, endpoint: m.WorkloadEndpointUpdate, flow: Flow, inbound: bool) -> Verdict:
        side = "ingress" if inbound else "egress"
        for tier in endpoint.tiers:
            policies = tier.ingress_policies if inbound else tier.egress_policies
            if not policies:
                continue
            passed = False
            for policy_id in policies:
                active = self.dataplane.policies[policy_id]
                rules = active.inbound if inbound else active.outbound
                verdict = self._first_verdict(rules, flow)
                name = policy_label(tier.name, policy_id)
                if verdict == "allow":
                    return Verdict(True, f"{side} allowed by {name}")
                if verdict == "deny":
                    return Verdict(False, f"{side} denied by {name}")
                if verdict == "next-tier":
                    passed = True
                    break
            if not passed and tier.default_action != "Pass":
                reason = f"{side} dropped at the end of tier {tier.name}"
                if all(p.kind == KUBERNETES_POLICY for p in policies):
                    # Kubernetes' isolation: a pod some NetworkPolicy selects takes only what
                    # one of them allows.
                    names = ", ".join(str(p) for p in policies)
                    reason += f" (selected by Kubernetes NetworkPolicy {names}, none allows it)"
                return Verdict(False, reason)
        for profile_id in endpoint.endpoint.profile_ids:
            profile = self.dataplane.profiles.get(profile_id)
            if profile is None:
                continue
            rules = profile.inbound if inbound else profile.outbound
            verdict = self._first_verdict(rules, flow)
            if verdict == "allow":
                return Verdict(True, f"{side} allowed by profile {profile_id}")
            if verdict == "deny":
                return Verdict(False, f"{side} denied by profile {profile_id}")
        return Verdict(False, f"{side} dropped: no profile matched")

    def _first_verdict(self, rules: Sequence[m.ParsedRule], flow: Flow) -> str:
        for parsed in rules:
            if parsed.rule.action == "log" or not self.rule_matches(parsed, flow):
                continue
            return parsed.rule.action
        return ""

    def explain(self, flow: Flow) -> Verdict:
        """The decision for a flow between two local workloads (egress, then ingress)."""
        source = self._endpoint(flow.src_ip)
        destination = self._endpoint(flow.dst_ip)
        reasons = []
        if source is not None:
            egress = self._direction(source, flow, inbound=False)
            if not egress.allowed:
                return egress
            reasons.append(egress.reason)
        if destination is not None:
            ingress = self._direction(destination, flow, inbound=True)
            if not ingress.allowed:
                return ingress
            reasons.append(ingress.reason)
        return Verdict(True, "; ".join(reasons) or "no policy applies")

    def _endpoint(self, ip: str) -> m.WorkloadEndpointUpdate | None:
        for update in self.dataplane.workloads.values():
            if _in_nets(ip, update.endpoint.ipv4_nets + update.endpoint.ipv6_nets):
                return update
        return None
