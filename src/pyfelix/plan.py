"""What a change would do before it is applied: every flow whose verdict flips, and each node's
dataplane delta (chains and rules, IP sets and members, routes).

Both come from computing the input as it is and as it would be, the way the dry-run does,
and comparing: the dataplane delta compares the rendered rules, sets and routes of every node
holding workloads; the flows are traced through both renderings (pyfelix.explain), for the
workloads the change touches: those whose rules (their endpoint chains and every chain they
reach) or whose IP sets' members differ, each against every workload of the input, in both
directions, on every port the rules involved name and the destination declares.

A change is manifests applied over the input (same kind, namespace and name replace; new ones
are added), or deleted from it; ``enforce_staged`` promotes every staged policy to its real
twin (a stagedAction of Delete deletes the twin), as enforcing them would.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from pyfelix.dryrun import compute_state, computed_pipeline, own_addresses
from pyfelix.explain import Endpoint, Explainer, Flow, Place
from pyfelix.resources import Resource
from pyfelix.resources.loader import Direct
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import endpoint_chain_name
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import Rendered, render
from pyfelix_dataplane.state import NodeState

#: Staged kinds and the kind each promotes to.
STAGED_TWINS = {
    "StagedNetworkPolicy": "NetworkPolicy",
    "StagedGlobalNetworkPolicy": "GlobalNetworkPolicy",
    "StagedKubernetesNetworkPolicy": "KubernetesNetworkPolicy",
}


def _key(resource: Resource) -> tuple[str, str, str]:
    return (resource.KIND, resource.namespace, resource.name)


def _twin(staged: Resource, classes: Mapping[str, type[Resource]]) -> Resource:
    kind = classes[STAGED_TWINS[staged.KIND]]
    spec_class = kind.SPEC
    assert spec_class is not None
    spec = spec_class(
        **{f.name: getattr(staged.spec, f.name) for f in attrs.fields(spec_class)}  # type: ignore[attr-defined]
    )
    return kind(metadata=staged.metadata, spec=spec)  # type: ignore[call-arg]


#: A resource (by kind, namespace and name) and what it becomes: None deletes it.
Step = tuple[tuple[str, str, str], Resource | None]


def change_steps(
    resources: Sequence[Resource],
    change: Sequence[Resource],
    *,
    delete: bool = False,
    enforce_staged: bool = False,
    classes: Mapping[str, type[Resource]] | None = None,
) -> list[Step]:
    """What applying ``change`` (or deleting it), and promoting the staged policies, does
    to the input, one resource at a time."""
    steps: list[Step] = [(_key(r), None if delete else r) for r in change]
    if not (enforce_staged and classes is not None):
        return steps
    for resource in changed(resources, steps):
        if resource.KIND not in STAGED_TWINS:
            continue
        twin = _twin(resource, classes)
        steps.append((_key(resource), None))
        deleting = getattr(getattr(resource, "spec", None), "staged_action", "") == "Delete"
        steps.append((_key(twin), None if deleting else twin))
    return steps


def changed(resources: Sequence[Resource], steps: Sequence[Step]) -> list[Resource]:
    """The input with the steps taken."""
    by_key = {_key(r): r for r in resources}
    for key, resource in steps:
        if resource is None:
            by_key.pop(key, None)
        else:
            by_key[key] = resource
    return list(by_key.values())


@attrs.frozen
class ChainDelta:
    name: str
    added: tuple[str, ...]
    removed: tuple[str, ...]


@attrs.frozen
class NodeDelta:
    """One node's dataplane difference (chains by ``table/name``, sets by kernel name)."""

    node: str
    chains_added: tuple[str, ...] = ()
    chains_removed: tuple[str, ...] = ()
    chains_changed: tuple[ChainDelta, ...] = ()
    sets_added: tuple[str, ...] = ()
    sets_removed: tuple[str, ...] = ()
    #: name -> (members added, members removed)
    members: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = attrs.field(factory=dict)
    routes_added: tuple[str, ...] = ()
    routes_removed: tuple[str, ...] = ()
    routes_changed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not any(
            (
                self.chains_added,
                self.chains_removed,
                self.chains_changed,
                self.sets_added,
                self.sets_removed,
                self.members,
                self.routes_added,
                self.routes_removed,
                self.routes_changed,
            )
        )


@attrs.define(eq=False)
class NodePlan:
    """One node computed before and after the change, each rendered once (the delta, the
    walk over the chains and the traces all read the same rendering)."""

    node: str
    before: NodeState
    after: NodeState

    @functools.cached_property
    def rendered(self) -> tuple[Rendered, Rendered]:
        return render(self.before, with_text=False), render(self.after, with_text=False)

    @functools.cached_property
    def filters(self) -> tuple[dict[str, Chain], dict[str, Chain]]:
        """IPv4's filter chains by name, before and after."""
        before, after = (
            {chain.name: chain for chain in rendered.chains[4]["filter"]}
            for rendered in self.rendered
        )
        return before, after

    @functools.cached_property
    def host_addresses(self) -> tuple[frozenset[str], frozenset[str]]:
        """The node's own addresses, and its host endpoints' interfaces, before or after."""
        states = (self.before, self.after)
        interfaces = {u.endpoint.name for s in states for u in s.hosts.values() if u.endpoint.name}
        return frozenset(self.before.host_ips | self.after.host_ips), frozenset(interfaces)

    @functools.cached_property
    def explainers(self) -> tuple[Explainer, Explainer]:
        return (
            Explainer(self.before, rendered=self.rendered[0]),
            Explainer(self.after, rendered=self.rendered[1]),
        )


def _chains(rendered: Rendered) -> dict[str, Chain]:
    return {
        f"ipv{version}/{table}/{chain.name}": chain
        for version, tables in rendered.chains.items()
        for table, chains in tables.items()
        for chain in chains
    }


def node_delta(plan: NodePlan) -> NodeDelta:
    before, after = plan.before, plan.after
    old, new = _chains(plan.rendered[0]), _chains(plan.rendered[1])
    changed_chains = []
    for name in sorted(old.keys() & new.keys()):
        was = [r.body for r in old[name].rules]
        now = [r.body for r in new[name].rules]
        if was != now:
            was_set, now_set = set(was), set(now)
            added = tuple(b for b in now if b not in was_set)
            removed = tuple(b for b in was if b not in now_set)
            changed_chains.append(ChainDelta(name, added, removed))
    old_sets, new_sets = plan.rendered[0].ipsets, plan.rendered[1].ipsets
    members = {
        name: (
            tuple(sorted(new_sets[name][1] - old_sets[name][1])),
            tuple(sorted(old_sets[name][1] - new_sets[name][1])),
        )
        for name in sorted(old_sets.keys() & new_sets.keys())
        if old_sets[name] != new_sets[name]
    }
    old_routes, new_routes = before.routes, after.routes
    return NodeDelta(
        plan.node,
        tuple(sorted(new.keys() - old.keys())),
        tuple(sorted(old.keys() - new.keys())),
        tuple(changed_chains),
        tuple(sorted(new_sets.keys() - old_sets.keys())),
        tuple(sorted(old_sets.keys() - new_sets.keys())),
        members,
        tuple(sorted(new_routes.keys() - old_routes.keys())),
        tuple(sorted(old_routes.keys() - new_routes.keys())),
        tuple(
            sorted(
                cidr
                for cidr in old_routes.keys() & new_routes.keys()
                if old_routes[cidr] != new_routes[cidr]
            )
        ),
    )


@attrs.frozen
class Flip:
    source: Place
    destination: Place
    protocol: str
    port: int | None
    allowed: bool
    #: What decided before, and what decides now.
    before: str
    after: str


@attrs.define
class _Walk:
    """One rendering's filter chains against the other's, memoised per chain over the jump
    graph (every endpoint reaches the same policy chains): whether a chain, or any it
    reaches, differs or names an IP set whose members differ; and the ports they name."""

    chains: Mapping[str, Chain]
    other: Mapping[str, Chain]
    differing_sets: set[str]
    _differs: dict[str, bool] = attrs.Factory(dict)
    _ports: dict[str, frozenset[tuple[str, int]]] = attrs.Factory(dict)

    def _children(self, chain: Chain) -> list[str]:
        return [
            rule.action.target
            for rule in chain.rules
            if isinstance(rule.action, mt.Jump | mt.Goto) and rule.action.target in self.chains
        ]

    def differs(self, name: str) -> bool:
        known = self._differs.get(name)
        if known is not None:
            return known
        self._differs[name] = False  # a loop, were there one, adds nothing
        chain = self.chains.get(name)
        if chain is None:
            found = name in self.other
        else:
            twin = self.other.get(name)
            found = (
                twin is None
                or twin.rules != chain.rules
                or any(
                    isinstance(c, mt.InSet) and c.name in self.differing_sets
                    for rule in chain.rules
                    for c in rule.match
                )
                or any(self.differs(child) for child in self._children(chain))
            )
        self._differs[name] = found
        return found

    def ports(self, name: str) -> frozenset[tuple[str, int]]:
        known = self._ports.get(name)
        if known is not None:
            return known
        self._ports[name] = frozenset()
        chain = self.chains.get(name)
        found: frozenset[tuple[str, int]] = frozenset()
        if chain is not None:
            found = frozenset(_ports_named(chain.rules)).union(
                *(self.ports(child) for child in self._children(chain))
            )
        self._ports[name] = found
        return found


def touched(plan: NodePlan) -> tuple[set[str], set[tuple[str, int]]]:
    """The interfaces of the workloads whose rules or rules' IP sets differ, and the ports
    (protocol, number) those rules name."""
    before, after = plan.before, plan.after
    old, new = plan.filters
    old_sets, new_sets = plan.rendered[0].ipsets, plan.rendered[1].ipsets
    differing_sets = {
        n for n in old_sets.keys() | new_sets.keys() if old_sets.get(n) != new_sets.get(n)
    }
    walks = (_Walk(old, new, differing_sets), _Walk(new, old, differing_sets))
    interfaces: set[str] = set()
    ports: set[tuple[str, int]] = set()
    for update in (*before.workloads.values(), *after.workloads.values()):
        name = update.endpoint.name
        for prefix in ("cali-tw-", "cali-fw-"):
            chain_name = endpoint_chain_name(prefix, name)
            if any(walk.differs(chain_name) for walk in walks):
                interfaces.add(name)
                for walk in walks:
                    ports |= walk.ports(chain_name)
    return interfaces, ports


def _ports_named(rules: Iterable[Any]) -> set[tuple[str, int]]:
    found: set[tuple[str, int]] = set()
    for rule in rules:
        protocol = next((c.name for c in rule.match if isinstance(c, mt.Protocol)), "tcp")
        name = {"6": "tcp", "17": "udp", "132": "sctp"}.get(protocol, protocol)
        for c in rule.match:
            if isinstance(c, mt.Ports) and not c.negate:
                for item in c.ports.split(","):
                    found.add((name, int(item.partition(":")[0])))
            elif isinstance(c, mt.Port):
                found.add((name, c.port))
    return found


@attrs.define
class _Membership:
    """What the rules of one rendering can tell of an address: the IP sets holding it (for
    ip,port sets, with the port) and the nets of the rules' matches containing it."""

    exact: dict[str, set[str]]
    networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]]

    @classmethod
    def of(cls, rendered: Rendered, chains: Iterable[Chain]) -> _Membership:
        exact: dict[str, set[str]] = {}
        networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        for name, (set_type, members) in rendered.ipsets.items():
            for member in members:
                if set_type == "hash:ip,port":
                    address, _, port = member.partition(",")
                    exact.setdefault(address, set()).add(f"{name} {port}")
                    continue
                address, _, length = member.partition("/")
                if not length or length in ("32", "128"):
                    exact.setdefault(address, set()).add(name)
                else:
                    networks.append((ipaddress.ip_network(member, strict=False), name))
        nets = {
            c.cidr
            for chain in chains
            for rule in chain.rules
            for c in rule.match
            if isinstance(c, mt.Net)
        }
        networks += [(ipaddress.ip_network(cidr, strict=False), cidr) for cidr in nets]
        return cls(exact, networks)

    def of_address(self, ip: str) -> frozenset[str]:
        address = ipaddress.ip_address(ip)
        inside = {
            name
            for network, name in self.networks
            if network.version == address.version and address in network
        }
        return frozenset(self.exact.get(ip, set()) | inside)


def _peer_key(
    endpoint: Endpoint, plans: Mapping[str, NodePlan], memberships: Sequence[_Membership]
) -> tuple[Any, ...]:
    """What the planned nodes' rules can tell of an endpoint: its node's rules for it (where
    its node is planned), the ports it declares, and what the rules match its address by.
    Endpoints with the same key are interchangeable ends of a flow."""
    ip = endpoint.nets[0].split("/")[0]
    own: tuple[Any, ...] = ()
    plan = plans.get(endpoint.node)
    if plan is not None:
        own = tuple(
            tuple(version[name].rules if name in version else ())
            for version in plan.filters
            for name in (
                endpoint_chain_name("cali-tw-", endpoint.interface),
                endpoint_chain_name("cali-fw-", endpoint.interface),
            )
        )
        addresses, interfaces = plan.host_addresses
        if ip in addresses or endpoint.interface in interfaces:
            own += (("host endpoint", endpoint.name),)
    return (
        endpoint.node if endpoint.node in plans else "",
        own,
        endpoint.ports,
        tuple(membership.of_address(ip) for membership in memberships),
    )


def flips(
    endpoints_before: Sequence[Endpoint],
    endpoints_after: Sequence[Endpoint],
    plans: Mapping[str, NodePlan],
) -> list[Flip]:
    """Every flow whose verdict differs after the change, between a touched workload and
    any other, in both directions. Endpoints the rules cannot tell apart (``_peer_key``)
    are traced once, by one of them, and the verdict holds for every one."""
    touched_names: set[str] = set()
    ports: set[tuple[str, int]] = set()
    for plan in plans.values():
        names, named = touched(plan)
        touched_names |= names
        ports |= named
    places = {e.name: e for e in (*endpoints_before, *endpoints_after) if e.nets}
    everyone = sorted(places.values(), key=lambda e: e.label)
    memberships = [
        _Membership.of(plan.rendered[which], plan.filters[which].values())
        for plan in plans.values()
        for which in (0, 1)
    ]
    classes: dict[tuple[Any, ...], list[Endpoint]] = {}
    for endpoint in everyone:
        classes.setdefault(_peer_key(endpoint, plans, memberships), []).append(endpoint)
    groups = list(classes.values())
    chosen = [g for g in groups if any(e.interface in touched_names for e in g)]
    explainers = {node: plan.explainers for node, plan in plans.items()}
    result: list[Flip] = []
    pairs: dict[tuple[int, int], tuple[list[Endpoint], list[Endpoint]]] = {}
    for group in chosen:
        for other in groups:
            pairs[id(group), id(other)] = (group, other)
            pairs[id(other), id(group)] = (other, group)
    for sources, destinations in pairs.values():
        src = sources[0]
        dst = next((e for e in destinations if e is not src), None)
        if dst is None:
            continue  # a class of one endpoint, to itself
        for protocol, port in sorted(ports | set(dst.ports) or {("tcp", 80)}):
            flow = Flow(_as_place(src).ip, _as_place(dst).ip, protocol, port)
            nodes = [n for n in dict.fromkeys((src.node, dst.node)) if n in explainers]
            old = _verdict(flow, [explainers[n][0] for n in nodes], nodes)
            new = _verdict(flow, [explainers[n][1] for n in nodes], nodes)
            if old[0] == new[0]:
                continue
            result += [
                Flip(_as_place(a), _as_place(b), protocol, port, new[0], old[1], new[1])
                for a in sources
                for b in destinations
                if a is not b
            ]
    return sorted(
        result, key=lambda f: (f.source.label, f.destination.label, f.protocol, f.port or 0)
    )


def _as_place(endpoint: Endpoint) -> Place:
    return Place(endpoint.label, endpoint.nets[0].split("/")[0], endpoint.node)


def _verdict(flow: Flow, explainers: Sequence[Explainer], nodes: Sequence[str]) -> tuple[bool, str]:
    """Allowed on every node the flow crosses, and what each said (up to a denial)."""
    reasons = []
    for node, explainer in zip(nodes, explainers, strict=True):
        verdict = explainer.explain(flow)
        reasons.append(f"at {node}: {verdict.reason}")
        if not verdict.allowed:
            return False, "; ".join(reasons)
    return True, "; ".join(reasons)


def nodes_of(endpoints: Iterable[Endpoint]) -> list[str]:
    return sorted({e.node for e in endpoints if e.node})


#: Kinds whose change the calculation graph takes at start-up only (the agent restarts on
#: one): a plan with one of them computes the after state afresh.
RESTARTING_KINDS = frozenset({"FelixConfiguration", "ClusterInformation"})


def compute_plans(
    before: Sequence[Resource],
    steps: Sequence[Step],
    nodes: Iterable[str],
    direct: tuple[Sequence[Direct], Sequence[Direct]] = ((), ()),
) -> dict[str, NodePlan]:
    """Each node before and after: computed from valid resources and what a direct load
    decoded (``direct``: before's, after's), then the change's steps fed to the same
    calculation graph as the updates the agent would get (so the after state costs what the
    change touches), unless the change restarts the graph."""
    restart = any(key[0] in RESTARTING_KINDS for key, _ in steps)
    plans = {}
    for node in nodes:
        pipeline, state = computed_pipeline(before, node, validated=True, direct=direct[0])
        state.host_ips = own_addresses(state, node)
        frozen = state.snapshot()
        frozen.ipsets = {k: (kind, set(members)) for k, (kind, members) in state.ipsets.items()}
        if restart:
            after = compute_state(changed(before, steps), node, validated=True, direct=direct[1])
            plans[node] = NodePlan(node, frozen, after[0])
            continue
        for key, resource in steps:
            pipeline.on_updates(pipeline.converter.update(key, resource))
        pipeline.flush()
        state.host_ips = own_addresses(state, node)
        plans[node] = NodePlan(node, frozen, state)
    return plans


def direct_after(direct: Sequence[Direct], steps: Sequence[Step]) -> list[Direct]:
    """The directly decoded documents a change leaves: those no step replaces or deletes
    (a replacement comes in with the steps' resources)."""
    keys = {key for key, _ in steps}
    return [entry for entry in direct if entry.key not in keys]


def _decider(flip: Flip) -> str:
    """What the change made decide the flow: the last side's words after it."""
    return flip.after.rsplit("; ", 1)[-1].split(": ", 1)[-1]


def report_text(flipped: Sequence[Flip], deltas: Sequence[NodeDelta]) -> str:
    lines = [f"{len(flipped)} flow{'s' if len(flipped) != 1 else ''} flip"]
    by_decider: dict[str, list[Flip]] = {}
    for flip in flipped:
        by_decider.setdefault(_decider(flip), []).append(flip)
    for decider, group in sorted(by_decider.items()):
        lines.append(f"  {decider}:")
        for flip in group:
            word = "now allowed" if flip.allowed else "now denied"
            what = f"{flip.protocol}/{flip.port}"
            lines.append(f"    {flip.source.label} -> {flip.destination.label} {what}: {word}")
    namespaces: dict[str, int] = {}
    for flip in flipped:
        namespace = flip.destination.label.partition("/")[0]
        namespaces[namespace] = namespaces.get(namespace, 0) + 1
    if namespaces:
        counts = ", ".join(f"{ns} {n}" for ns, n in sorted(namespaces.items()))
        lines.append(f"  by destination namespace: {counts}")
    for delta in deltas:
        if delta.empty:
            lines.append(f"{delta.node}: no dataplane change")
            continue
        members_added = sum(len(added) for added, _ in delta.members.values())
        members_removed = sum(len(removed) for _, removed in delta.members.values())
        lines.append(
            f"{delta.node}: chains +{len(delta.chains_added)} -{len(delta.chains_removed)}"
            f" ~{len(delta.chains_changed)}; IP sets +{len(delta.sets_added)}"
            f" -{len(delta.sets_removed)} (members +{members_added} -{members_removed});"
            f" routes +{len(delta.routes_added)} -{len(delta.routes_removed)}"
            f" ~{len(delta.routes_changed)}"
        )
        lines += [f"  + chain {name}" for name in delta.chains_added]
        lines += [f"  - chain {name}" for name in delta.chains_removed]
        for chain in delta.chains_changed:
            lines.append(f"  ~ chain {chain.name}")
            lines += [f"      + {body}" for body in chain.added]
            lines += [f"      - {body}" for body in chain.removed]
        lines += [f"  + set {name}" for name in delta.sets_added]
        lines += [f"  - set {name}" for name in delta.sets_removed]
        for name, (added, removed) in delta.members.items():
            changes = [f"+{m}" for m in added] + [f"-{m}" for m in removed]
            lines.append(f"  ~ set {name}: {' '.join(changes)}")
        lines += [f"  + route {cidr}" for cidr in delta.routes_added]
        lines += [f"  - route {cidr}" for cidr in delta.routes_removed]
        lines += [f"  ~ route {cidr}" for cidr in delta.routes_changed]
    return "\n".join(lines) + "\n"


def report_json(flipped: Sequence[Flip], deltas: Sequence[NodeDelta]) -> dict[str, Any]:
    return {
        "flips": [attrs.asdict(flip) for flip in flipped],
        "nodes": [
            attrs.asdict(delta, value_serializer=lambda _i, _a, v: _plain(v)) for delta in deltas
        ],
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
    return value
