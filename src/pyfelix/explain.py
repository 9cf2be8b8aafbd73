"""Explain a policy decision: which policy (or tier end, or profile) decides a flow, and how.

The verdict is the rendered rules': the flow's first packet is traced through the filter
table's chains exactly as they would be programmed (pyfelix_dataplane.rules.trace), from the
kernel's FORWARD chain, and the explanation is read off the rules it matched: the policy
rule that set the accept, pass or drop mark (with its position among the policy's rules),
the end of a tier, or a profile. So the explanation and the kernel cannot disagree; the
demo measures both on real traffic.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix.resources import HostEndpoint, Pod, Resource, WorkloadEndpoint
from pyfelix.resources.k8s_conversion import workload_endpoint
from pyfelix.resources.loader import Direct
from pyfelix.selector import SelectorError, parse_selector
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.model import Rule
from pyfelix_dataplane.rules.policy import (
    RuleContext,
    policy_chain_name,
    profile_chain_name,
    render_rule,
)
from pyfelix_dataplane.rules.render import Rendered, kernel_ipsets, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.rules.trace import Packet, Step, Tracer, in_network
from pyfelix_dataplane.state import NodeState

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
    #: The IP sets the deciding rules matched the flow by: (kernel name, the address that is
    #: a member, what the set stands for where known).
    sets: tuple[tuple[str, str, str], ...] = ()
    #: Every rule the first packet matched: (chain, position, rule text).
    path: tuple[tuple[str, int, str], ...] = ()


#: What a policy chain's rule does with the marks: Felix's verdict words.
_DECIDED = {"accept": "allowed", "pass": "passed to the next tier", "drop": "denied"}
#: An interface outside the node's workloads: where a flow to or from elsewhere comes in.
OUTSIDE = "eth0"
#: The chains of endpoints' policy, workloads' and host endpoints' (ingress ones first).
_INBOUND_CHAINS = ("cali-tw-", "cali-fh-", "cali-fhfw-")
_ENDPOINT_CHAINS = (*_INBOUND_CHAINS, "cali-fw-", "cali-th-", "cali-thfw-")


def _step_reason(step: Step) -> str:
    """A matched rule outside the policies, as its verdict, chain and comment."""
    verdict = "allowed" if step.rule.action == mt.Jump("ACCEPT") else "dropped"
    if step.chain.startswith("cali-failsafe"):
        return f"{verdict} by the failsafe rules ({step.chain}: {step.rule.body})"
    comment = f" ({'; '.join(step.rule.comment)})" if step.rule.comment else ""
    return f"{verdict} by {step.chain}, rule {step.index + 1}{comment}"


def _in_nets(ip: str, nets: Sequence[str]) -> bool:
    return any(in_network(ip, net) for net in nets)


@attrs.define
class _Reading:
    """What reading a trace's steps gathers: the tier each side is in, the reasons so far
    and the IP sets the deciding rules matched by."""

    packet: Packet
    marks: MarkBits
    version: int
    tier_of: dict[bool, str] = attrs.Factory(dict)
    reasons: list[str] = attrs.Factory(list)
    sets: list[tuple[str, str, str]] = attrs.Factory(list)


@attrs.define(eq=False)
class Explainer:
    """Explanations of one node's rules; ``why`` says what each IP set (by kernel name)
    stands for (its selector, named port or service), where the caller knows it."""

    dataplane: NodeState
    why: Mapping[str, str] = attrs.Factory(dict)
    #: The state's rendering, where the caller has it (else each version's filter chains
    #: are rendered when first traced).
    rendered: Rendered | None = None
    _tracers: dict[int, Tracer] = attrs.Factory(dict)
    _chains: dict[str, tuple[str, m.PolicyID | str, bool]] = attrs.Factory(dict)

    def _tracer(self, version: int) -> Tracer:
        tracer = self._tracers.get(version)
        if tracer is None:
            if self.rendered is not None and version in self.rendered.chains:
                chains = self.rendered.chains[version]["filter"]
                tracer = Tracer.of(chains, self.rendered.ipsets)
            else:
                chains = render_chains(self.dataplane, version)["filter"]
                tracer = Tracer.of(chains, kernel_ipsets(self.dataplane, (version,)))
            self._tracers[version] = tracer
        return tracer

    def _owner(self, chain: str) -> tuple[str, m.PolicyID | str, bool] | None:
        """("policy", id, inbound) or ("profile", name, inbound) for a policy's or profile's
        chain; None for the others."""
        if not self._chains:
            for pid in self.dataplane.policies:
                for inbound in (True, False):
                    self._chains[policy_chain_name(pid, inbound)] = ("policy", pid, inbound)
            for name in self.dataplane.profiles:
                for inbound in (True, False):
                    self._chains[profile_chain_name(name, inbound)] = ("profile", name, inbound)
        return self._chains.get(chain)

    def _rule_number(self, pid: m.PolicyID, inbound: bool, index: int, version: int) -> int:
        """The 1-based position among the policy's own rules of its chain's ``index``-th rule
        (one Calico rule renders as one or several)."""
        active = self.dataplane.policies[pid]
        rules = active.inbound if inbound else active.outbound
        marks = Settings.for_node(self.dataplane).marks
        ctx = RuleContext(version, marks)
        ends = list(accumulate(len(render_rule(parsed, ctx)) for parsed in rules))
        return next((n for n, end in enumerate(ends, start=1) if index < end), len(ends))

    def explain(self, flow: Flow) -> Verdict:
        """The decision for a flow's first packet, from and to the node's workloads, the
        node itself (its host endpoints' and its own addresses) or elsewhere: through
        FORWARD between workloads and elsewhere, INPUT to the host, OUTPUT from it, as the
        kernel hands the packet to the rules."""
        version = ipaddress.ip_address(flow.src_ip).version
        source, destination = self._endpoint(flow.src_ip), self._endpoint(flow.dst_ip)
        local = self._host_addresses()
        from_host, to_host = flow.src_ip in local, flow.dst_ip in local
        if not (source or destination or from_host or to_host):
            return Verdict(True, "no policy applies")
        in_interface = source.endpoint.name if source else self._host_interface(flow.dst_ip)
        out_interface = (
            destination.endpoint.name if destination else self._host_interface(flow.src_ip)
        )
        settings = Settings.for_node(self.dataplane)
        if from_host:
            kernel_chain, in_interface = "OUTPUT", ""
            entry = [Rule(action=mt.Jump("cali-OUTPUT"))]
        elif to_host:
            kernel_chain, out_interface = "INPUT", ""
            entry = [Rule(action=mt.Jump("cali-INPUT"))]
        else:
            kernel_chain = "FORWARD"
            entry = [Rule(action=mt.Jump("cali-FORWARD"))]
            entry += [r for c in kernel_appends(settings)["filter"] for r in c.rules]
        packet = Packet(
            flow.src_ip,
            flow.dst_ip,
            flow.protocol,
            flow.dst_port,
            in_interface=in_interface,
            out_interface=out_interface,
            icmp_type=flow.icmp_type,
            local=local,
        )
        tracer = self._tracer(version)
        trace = tracer.run(entry, packet, kernel_chain)
        reasons, sets = self._reasons(trace.steps, packet, tracer, settings, version)
        allowed = trace.verdict == "ACCEPT"
        final = trace.steps[-1] if trace.steps else None
        if not allowed:
            # A policy's, a profile's or an endpoint chain's drop explains itself; any other
            # chain's (DefaultEndpointToHostAction, a disabled interface) is named.
            if final is None:
                reason = "dropped"
            elif reasons and (
                final.chain.startswith(_ENDPOINT_CHAINS) or self._owner(final.chain) is not None
            ):
                reason = reasons[-1]
            else:
                reason = _step_reason(final)
        else:
            reason = "; ".join(r for r in reasons if "passed" not in r)
            if not reason and final is not None and final.chain.startswith("cali-failsafe"):
                reason = _step_reason(final)
            elif not reason and from_host and destination is not None:
                reason = "the host reaches its own workloads without policy (as in Felix)"
            reason = reason or "no policy applies"
        path = tuple((s.chain, s.index, s.rule.body) for s in trace.steps)
        return Verdict(allowed, reason, tuple(sets), path)

    def _host_addresses(self) -> frozenset[str]:
        """The node's own addresses: its host endpoints' expected IPs, and those it has."""
        found = set(self.dataplane.host_ips)
        for update in self.dataplane.hosts.values():
            found.update(update.endpoint.expected_ipv4_addrs)
            found.update(update.endpoint.expected_ipv6_addrs)
        return frozenset(found)

    def _host_interface(self, ip: str) -> str:
        """The interface of the host endpoint ``ip`` belongs to (where a packet to or from
        it crosses), else an interface outside the workloads."""
        for update in self.dataplane.hosts.values():
            endpoint = update.endpoint
            addresses = (*endpoint.expected_ipv4_addrs, *endpoint.expected_ipv6_addrs)
            if endpoint.name and ip in addresses:
                return endpoint.name
        return OUTSIDE

    def _reasons(
        self,
        steps: Sequence[Step],
        packet: Packet,
        tracer: Tracer,
        settings: Settings,
        version: int,
    ) -> tuple[list[str], list[tuple[str, str, str]]]:
        """The reasons the steps give, and the IP sets they matched by."""
        reading = _Reading(packet, settings.marks, version)
        for step in steps:
            self._step(step, reading)
        return reading.reasons, reading.sets

    def _step(self, step: Step, reading: _Reading) -> None:
        """What one matched rule says: a tier's start or end, a profile's end, a disabled
        endpoint, or a policy's or profile's decision (and the IP sets it matched by)."""
        chain, rule = step.chain, step.rule
        tier_of, reasons, packet = reading.tier_of, reading.reasons, reading.packet
        inbound = chain.startswith(_INBOUND_CHAINS)
        comment = rule.comment[0] if rule.comment else ""
        if chain.startswith(_ENDPOINT_CHAINS):
            side = "ingress" if inbound else "egress"
            if comment.startswith("Start of tier "):
                tier_of[inbound] = comment.removeprefix("Start of tier ")
            elif comment.startswith("End of tier "):
                reasons.append(self._tier_end(side, tier_of.get(inbound, ""), packet))
            elif comment.endswith("if no profiles matched"):
                reasons.append(f"{side} dropped: no profile matched")
            elif comment == "Endpoint admin disabled":
                reasons.append(f"{side} dropped: the endpoint is not active")
            return
        owner = self._owner(chain)
        if owner is None or not isinstance(rule.action, mt.SetMark):
            return
        kind, ident, owner_inbound = owner
        side = "ingress" if owner_inbound else "egress"
        bits = rule.action.value
        word = next(
            (
                w
                for key, w in _DECIDED.items()
                if bits & getattr(reading.marks, "pass_" if key == "pass" else key)
            ),
            "",
        )
        if not word:
            return  # a scratch mark of a rule's OR blocks
        if kind == "profile":
            reasons.append(f"{side} {word} by profile {ident}")
        else:
            assert isinstance(ident, m.PolicyID)
            number = self._rule_number(ident, owner_inbound, step.index, reading.version)
            label = policy_label(tier_of.get(owner_inbound, ident.tier), ident)
            reasons.append(f"{side} {word} by {label}, rule {number}")
        reading.sets += [
            (
                c.name,
                packet.src if c.flags.startswith("src") else packet.dst,
                self.why.get(c.name, ""),
            )
            for c in rule.match
            if isinstance(c, mt.InSet) and not c.negate
        ]

    def _tier_end(self, side: str, tier: str, packet: Packet) -> str:
        reason = f"{side} dropped at the end of tier {tier}"
        update = self._endpoint(packet.dst if side == "ingress" else packet.src)
        if update is None:
            return reason
        for info in update.tiers:
            if info.name != tier:
                continue
            policies = info.ingress_policies if side == "ingress" else info.egress_policies
            if policies and all(p.kind == KUBERNETES_POLICY for p in policies):
                # Kubernetes' isolation: a pod some NetworkPolicy selects takes only what
                # one of them allows.
                names = ", ".join(str(p) for p in policies)
                reason += f" (selected by Kubernetes NetworkPolicy {names}, none allows it)"
        return reason

    def _endpoint(self, ip: str) -> m.WorkloadEndpointUpdate | None:
        for update in self.dataplane.workloads.values():
            if _in_nets(ip, update.endpoint.ipv4_nets + update.endpoint.ipv6_nets):
                return update
        return None


class ExplainError(ValueError):
    """A flow's end that names nothing in the input, or a port that does not parse."""


@attrs.frozen
class Place:
    """One end of a flow: a workload or host endpoint on its node, or an address elsewhere."""

    label: str
    ip: str
    #: The workload's node; "" for an address outside.
    node: str = ""


def parse_port(text: str) -> tuple[str, int | None]:
    """``tcp/80``, ``udp/53``, ``80`` (TCP), ``icmp``: the protocol and port."""
    protocol, _, port = text.rpartition("/") if "/" in text else ("", "", text)
    if not protocol and not port.isdigit():
        return port.lower(), None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ExplainError(f"--port {text}: expected PROTOCOL/PORT, like tcp/80")
    return (protocol or "tcp").lower(), int(port)


@attrs.frozen
class Endpoint:
    """A workload of the input, as explain finds it: ``namespace/pod``, its endpoint's name,
    its node, addresses and labels (with the namespace and orchestrator labels Calico adds),
    the ports it declares; or a host endpoint, by its name."""

    label: str
    name: str
    node: str
    nets: tuple[str, ...]
    labels: Mapping[str, str] = attrs.field(factory=dict)
    #: The interface its node programs for it.
    interface: str = ""
    ports: tuple[tuple[str, int], ...] = ()


def endpoints_of(resources: Sequence[Resource], direct: Iterable[Direct] = ()) -> list[Endpoint]:
    """The endpoints of the input: WorkloadEndpoints, Pods as Calico converts them, and
    HostEndpoints (named as written, their addresses the expected IPs); and the endpoints a
    direct load decoded straight to the model."""
    found = [endpoint for entry in direct for endpoint in _direct_endpoints(entry)]
    for resource in resources:
        if isinstance(resource, HostEndpoint):
            host = resource.spec
            ports = tuple((str(p.protocol).lower() or "tcp", p.port) for p in host.ports if p.port)
            found.append(
                Endpoint(
                    resource.name,
                    resource.name,
                    host.node,
                    tuple(host.expected_ips),
                    resource.labels,
                    host.interface_name,
                    ports,
                )
            )
            continue
        endpoint = workload_endpoint(resource) if isinstance(resource, Pod) else resource
        if not isinstance(endpoint, WorkloadEndpoint):
            continue
        spec = endpoint.spec
        labels = {
            **endpoint.labels,
            "projectcalico.org/namespace": endpoint.namespace,
            "projectcalico.org/orchestrator": spec.orchestrator,
        }
        ports = tuple((str(p.protocol).lower() or "tcp", p.port) for p in spec.ports if p.port)
        found.append(
            Endpoint(
                f"{endpoint.namespace}/{spec.pod or endpoint.name}",
                endpoint.name,
                spec.node,
                spec.ip_networks,
                labels,
                spec.interface_name,
                ports,
            )
        )
    return found


def _direct_endpoints(entry: Direct) -> Iterator[Endpoint]:
    values = entry.value if isinstance(entry.value, tuple) else ()
    for key, value in values:
        if not isinstance(key, model.WorkloadEndpointKey):
            continue
        if not isinstance(value, model.WorkloadEndpoint):
            continue
        namespace = entry.key[1]
        workload = key.workload.partition("/")[2] or key.workload
        ports = tuple((str(p.protocol).lower(), p.port) for p in value.ports if p.port)
        yield Endpoint(
            f"{namespace}/{workload}",
            entry.key[2],
            key.hostname,
            (*value.ipv4_nets, *value.ipv6_nets),
            value.labels,
            value.name,
            ports,
        )


def find_place(spec: str, endpoints: Sequence[Endpoint]) -> Place:
    """``NS/POD``, a workload endpoint's name, or an IP address, among the workloads the
    input holds."""
    for endpoint in endpoints:
        if spec in (endpoint.label, endpoint.name):
            return _place(endpoint)
    try:
        address = str(ipaddress.ip_address(spec))
    except ValueError:
        raise ExplainError(f"{spec} is no workload of the input, nor an IP address") from None
    for endpoint in endpoints:
        if _in_nets(address, endpoint.nets):
            return Place(endpoint.label, address, endpoint.node)
    return Place(address, address)


def _place(endpoint: Endpoint) -> Place:
    if not endpoint.nets:
        raise ExplainError(f"{endpoint.label} has no address (not running?)")
    return Place(endpoint.label, endpoint.nets[0].split("/")[0], endpoint.node)


def selected(selector: str, endpoints: Sequence[Endpoint]) -> list[Place]:
    """The workloads (with an address) a Calico selector selects, in label order."""
    try:
        parsed = parse_selector(selector)
    except SelectorError as exc:
        raise ExplainError(f"--matrix {selector}: {exc}") from None
    chosen = [e for e in endpoints if e.nets and parsed.evaluate(e.labels)]
    return [_place(e) for e in sorted(chosen, key=lambda e: e.label)]


def ask(
    endpoints: Sequence[Endpoint],
    port_text: str,
    *,
    source: str | None,
    destination: str | None,
    matrix: str | None,
) -> tuple[list[Place], dict[tuple[int, int], Question]]:
    """The questions a command line asks: one flow (``source`` to ``destination``), or every
    pair of the workloads ``matrix`` selects (keyed by their rows), on one port."""
    protocol, port = parse_port(port_text)
    if matrix:
        places = selected(matrix, endpoints)
        return places, {
            (row, column): Question(src, dst, protocol, port)
            for row, src in enumerate(places)
            for column, dst in enumerate(places)
            if row != column
        }
    if not (source and destination):
        raise ExplainError("give --from and --to, or --matrix SELECTOR")
    pair = Question(find_place(source, endpoints), find_place(destination, endpoints))
    return [], {(0, 1): attrs.evolve(pair, protocol=protocol, port=port)}


def matrix_text(
    places: Sequence[Place], verdicts: Mapping[tuple[int, int], bool], what: str
) -> str:
    """Who reaches whom: a row per source, a column per destination (numbered as the rows),
    ``.`` allowed, ``X`` denied."""
    width = max((len(p.label) for p in places), default=0)
    lines = [f"{what}: rows are sources, columns destinations; . allowed, X denied"]
    lines.append(" " * (width + 6) + " ".join(f"{n:>2}" for n in range(1, len(places) + 1)))
    for row, place in enumerate(places):
        cells = [
            " -" if row == column else ("  ." if verdicts[row, column] else "  X")[1:]
            for column in range(len(places))
        ]
        lines.append(f"{row + 1:>3}. {place.label:<{width}} " + " ".join(cells))
    return "\n".join(lines) + "\n"


@attrs.frozen
class Question:
    """Would ``source`` reach ``destination`` on ``protocol``/``port``?"""

    source: Place
    destination: Place
    protocol: str = "tcp"
    port: int | None = None

    @property
    def flow(self) -> Flow:
        return Flow(self.source.ip, self.destination.ip, self.protocol, self.port)

    def __str__(self) -> str:
        what = f"{self.protocol}/{self.port}" if self.port is not None else self.protocol
        source, destination = self.source, self.destination
        return f"{source.label} ({source.ip}) -> {destination.label} ({destination.ip}) {what}"


@attrs.frozen
class Side:
    """What one node's rules say of the flow: the source's egress, the destination's
    ingress, or both where they share a node."""

    node: str
    verdict: Verdict


def explain_flow(
    question: Question, states: Mapping[str, NodeState], why: Mapping[str, str]
) -> tuple[Side, ...]:
    """The flow through the rules of the source's node, then of the destination's (one
    trace where they are the same node); ``why`` as Explainer's."""
    source, destination = question.source.node, question.destination.node
    nodes = [source, destination] if source != destination else [source]
    return tuple(
        Side(node, Explainer(states[node], why).explain(question.flow)) for node in nodes if node
    )


def report_text(question: Question, sides: Sequence[Side]) -> str:
    lines = [str(question)]
    for side in sides:
        verdict = side.verdict
        word = "allowed" if verdict.allowed else "denied"
        lines.append(f"  at {side.node}: {word}: {verdict.reason}")
        for name, member, why in verdict.sets:
            stands = f" ({why})" if why else ""
            lines.append(f"    matched IP set {name}{stands}: it holds {member}")
    allowed = all(side.verdict.allowed for side in sides)
    lines.append(f"verdict: {'allowed' if allowed else 'denied'}")
    return "\n".join(lines) + "\n"


def report_json(question: Question, sides: Sequence[Side]) -> dict[str, object]:
    return {
        "from": attrs.asdict(question.source),
        "to": attrs.asdict(question.destination),
        "protocol": question.protocol,
        "port": question.port,
        "allowed": all(side.verdict.allowed for side in sides),
        "sides": [
            {
                "node": side.node,
                "allowed": side.verdict.allowed,
                "reason": side.verdict.reason,
                "ip_sets": [
                    {"name": name, "member": member, "source": why}
                    for name, member, why in side.verdict.sets
                ],
                "rules": [
                    {"chain": chain, "index": index, "rule": text}
                    for chain, index, text in side.verdict.path
                ],
            }
            for side in sides
        ],
    }
