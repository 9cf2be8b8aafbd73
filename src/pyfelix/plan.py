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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from pyfelix.dryrun import compute
from pyfelix.explain import Endpoint, Explainer, Flow, Place
from pyfelix.resources import Resource
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import endpoint_chain_name
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import kernel_ipsets, render
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


def changed(
    resources: Sequence[Resource],
    change: Sequence[Resource],
    *,
    delete: bool = False,
    enforce_staged: bool = False,
    classes: Mapping[str, type[Resource]] | None = None,
) -> list[Resource]:
    """The input with ``change`` applied (or deleted), and staged policies promoted."""
    by_key = {_key(r): r for r in resources}
    for resource in change:
        if delete:
            by_key.pop(_key(resource), None)
        else:
            by_key[_key(resource)] = resource
    if enforce_staged and classes is not None:
        for key, resource in list(by_key.items()):
            if resource.KIND not in STAGED_TWINS:
                continue
            del by_key[key]
            twin = _twin(resource, classes)
            if getattr(getattr(resource, "spec", None), "staged_action", "") == "Delete":
                by_key.pop(_key(twin), None)
            else:
                by_key[_key(twin)] = twin
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


def _chains(state: NodeState) -> dict[str, Chain]:
    rendered = render(state, with_text=False)
    return {
        f"ipv{version}/{table}/{chain.name}": chain
        for version, tables in rendered.chains.items()
        for table, chains in tables.items()
        for chain in chains
    }


def node_delta(node: str, before: NodeState, after: NodeState) -> NodeDelta:
    old, new = _chains(before), _chains(after)
    changed_chains = []
    for name in sorted(old.keys() & new.keys()):
        was = [r.body for r in old[name].rules]
        now = [r.body for r in new[name].rules]
        if was != now:
            added = tuple(b for b in now if b not in was)
            removed = tuple(b for b in was if b not in now)
            changed_chains.append(ChainDelta(name, added, removed))
    versions = tuple(render(before, with_text=False).chains) or (4,)
    old_sets = kernel_ipsets(before, versions)
    new_sets = kernel_ipsets(after, versions)
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
        node,
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


def _reach(chains: Mapping[str, Chain], start: str) -> list[Chain]:
    """``start`` and every chain it reaches by jumps and gotos."""
    seen: dict[str, Chain] = {}
    todo = [start]
    while todo:
        name = todo.pop()
        chain = chains.get(name)
        if chain is None or name in seen:
            continue
        seen[name] = chain
        for rule in chain.rules:
            if isinstance(rule.action, mt.Jump | mt.Goto):
                todo.append(rule.action.target)
    return [seen[name] for name in sorted(seen)]


def _filter_chains(state: NodeState) -> dict[str, Chain]:
    rendered = render(state, versions=(4,), with_text=False)
    return {chain.name: chain for chain in rendered.chains[4]["filter"]}


def touched(before: NodeState, after: NodeState) -> tuple[set[str], set[tuple[str, int]]]:
    """The interfaces of the workloads whose rules or rules' IP sets differ, and the ports
    (protocol, number) those rules name."""
    old, new = _filter_chains(before), _filter_chains(after)
    old_sets, new_sets = kernel_ipsets(before, (4,)), kernel_ipsets(after, (4,))
    differing_sets = {
        n for n in old_sets.keys() | new_sets.keys() if old_sets.get(n) != new_sets.get(n)
    }
    interfaces: set[str] = set()
    ports: set[tuple[str, int]] = set()
    for update in (*before.workloads.values(), *after.workloads.values()):
        name = update.endpoint.name
        for prefix in ("cali-tw-", "cali-fw-"):
            chain_name = endpoint_chain_name(prefix, name)
            was, now = _reach(old, chain_name), _reach(new, chain_name)
            rules = [r for chain in (*was, *now) for r in chain.rules]
            names = {c.name for r in rules for c in r.match if isinstance(c, mt.InSet)}
            if [c.rules for c in was] != [c.rules for c in now] or names & differing_sets:
                interfaces.add(name)
                ports |= _ports_named(rules)
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


def flips(
    endpoints_before: Sequence[Endpoint],
    endpoints_after: Sequence[Endpoint],
    states: Mapping[str, tuple[NodeState, NodeState]],
) -> list[Flip]:
    """Every flow whose verdict differs after the change, between a touched workload and
    any other, in both directions."""
    touched_names: set[str] = set()
    ports: set[tuple[str, int]] = set()
    for before, after in states.values():
        names, named = touched(before, after)
        touched_names |= names
        ports |= named
    places = {e.name: e for e in (*endpoints_before, *endpoints_after) if e.nets}
    everyone = sorted(places.values(), key=lambda e: e.label)
    chosen = [e for e in everyone if e.interface in touched_names]
    explainers = {
        node: (Explainer(before), Explainer(after)) for node, (before, after) in states.items()
    }
    result: list[Flip] = []
    pairs = {(a.label, b.label): (a, b) for a in chosen for b in everyone if a is not b}
    pairs |= {(b.label, a.label): (b, a) for a in chosen for b in everyone if a is not b}
    for (_, _), (src, dst) in sorted(pairs.items()):
        for protocol, port in sorted(ports | set(dst.ports) or {("tcp", 80)}):
            flow = Flow(_as_place(src).ip, _as_place(dst).ip, protocol, port)
            nodes = [n for n in dict.fromkeys((src.node, dst.node)) if n in explainers]
            old = _verdict(flow, [explainers[n][0] for n in nodes], nodes)
            new = _verdict(flow, [explainers[n][1] for n in nodes], nodes)
            if old[0] != new[0]:
                result.append(
                    Flip(_as_place(src), _as_place(dst), protocol, port, new[0], old[1], new[1])
                )
    return result


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


def compute_states(
    before: Sequence[Resource], after: Sequence[Resource], nodes: Iterable[str]
) -> dict[str, tuple[NodeState, NodeState]]:
    return {node: (compute(before, node)[1], compute(after, node)[1]) for node in nodes}


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
