"""One-shot computation of a node's dataplane from a set of resources (``pyfelix dry-run``).

The same stages as the agent, run synchronously: update processors, validation filter,
calculation graph, sequencer, into the dry-run dataplane; then the snapshot is printed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, BinaryIO, TypeVar, cast

import attrs

from pyfelix.calc.config_batcher import startup_config
from pyfelix.calc.graph import GraphSettings
from pyfelix.calc.pipeline import Pipeline, build_pipeline
from pyfelix.config import NFTablesMode, parse_config
from pyfelix.jsontext import TextPieces, WrittenAhead, write_indented
from pyfelix.resources import Resource
from pyfelix.resources.config_sources import STARTUP_KINDS
from pyfelix.resources.loader import Direct, Identity, LoadResult, Located
from pyfelix.resources.policy import BUILTIN_TIERS
from pyfelix.resources.skipped import skipped_line
from pyfelix.syncer.processors import KV
from pyfelix.validation import context_from
from pyfelix.validation.surprises import missing_tiers, policy_tier, widened_named_ports
from pyfelix_dataplane.dryrun import snapshot
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.rules.nft import render_nftables
from pyfelix_dataplane.rules.render import TABLES, render, script_pieces
from pyfelix_dataplane.state import NodeState

_Item = TypeVar("_Item", Located, Direct)

#: The kinds that name a node, and how: the dry-run reports a --hostname none of them names.
_NODE_OF: dict[str, Callable[[Any], str]] = {
    "Node": lambda r: str(r.name),
    "KubernetesNode": lambda r: str(r.name),
    "WorkloadEndpoint": lambda r: str(r.spec.node),
    "HostEndpoint": lambda r: str(r.spec.node),
    "Pod": lambda r: str(r.spec.node_name),
}


@attrs.define(eq=False)
class InputTally:
    """What the user is told about the input beside the computed view: the documents skipped
    as kinds Felix never reads, and the nodes it names (for a --hostname that is none of
    them). ``watch`` passes files' loads on, noting as they go by."""

    skipped: list[str] = attrs.field(factory=list)
    nodes: set[str] = attrs.field(factory=set)
    configurations: list[Resource] = attrs.field(factory=list)
    #: The resources read (an input with none is refused: a path or a List left empty by
    #: mistake is not an empty cluster).
    count: int = 0
    #: The Tier resources' names, and the tier of each policy in a tier Calico does not
    #: create itself (validation.surprises: only those may be missing; an ident kept for
    #: every policy was 13 MB for 100,000).
    tiers: set[str] = attrs.field(factory=set)
    policy_tiers: list[tuple[str, str]] = attrs.field(factory=list)
    #: The surprises one resource shows by itself (validation.surprises).
    resource_surprises: list[str] = attrs.field(factory=list)

    def watch(self, results: Iterable[LoadResult | None]) -> Iterator[LoadResult | None]:
        """The results, each noted as it passes (a None, for nothing ready yet, passes too)."""
        for result in results:
            if result is not None:
                self.note(result)
            yield result

    def note(self, result: LoadResult) -> None:
        self.skipped.extend(result.skipped)
        self.count += len(result.resources) + len(result.direct)
        for item in result.resources:
            if item.resource.KIND == "FelixConfiguration":
                self.configurations.append(item.resource)
            elif item.resource.KIND == "Tier":
                self.tiers.add(item.resource.name)
            tier = policy_tier(item.resource)
            if tier is not None and tier not in BUILTIN_TIERS:
                self.policy_tiers.append((item.resource.ident, tier))
            self.resource_surprises.extend(widened_named_ports(item.resource))
            node_of = _NODE_OF.get(item.resource.KIND)
            if node_of is not None:
                self.nodes.add(node_of(item.resource))
        for entry in result.direct:
            for key, _ in cast(tuple[KV, ...], entry.value):
                hostname = getattr(key, "hostname", None)
                if isinstance(hostname, str):
                    self.nodes.add(hostname)

    def surprises(self) -> list[str]:
        """What is valid but would surprise an operator (validation.surprises)."""
        return missing_tiers(self.tiers, self.policy_tiers) + self.resource_surprises

    def messages(self, hostname: str) -> list[str]:
        """The lines for stderr: the skipped count, and an unknown node."""
        lines = []
        counted = skipped_line(self.skipped)
        if counted is not None:
            lines.append(counted)
        if hostname not in self.nodes:
            held = ", ".join(sorted(self.nodes - {""})) or "none"
            lines.append(
                f"--hostname {hostname} names no node and no endpoint of the input"
                f" (the nodes it holds: {held})"
            )
        return lines


def compute(
    resources: Iterable[Resource],
    hostname: str,
    *,
    validated: bool = False,
    direct: Iterable[Direct] = (),
    kube_ipvs: bool = False,
    pieces: bool = False,
) -> tuple[dict[str, Any], NodeState]:
    """The snapshot of ``hostname``'s dataplane for this datastore content, with the rendered
    iptables-restore scripts (per IP version and table) and ipset restore script.
    ``validated``: every resource has been validated already (invalid ones left out);
    ``direct``: documents the loader turned into model values itself (``plain_entry``);
    ``kube_ipvs``: render as on a node where kube-proxy runs in IPVS mode; ``pieces``: the
    iptables and ipset scripts as ``TextPieces``, made as ``write_json`` writes them (the
    returned state must not change until then)."""
    pipeline, dataplane = computed_pipeline(resources, hostname, validated=validated, direct=direct)
    return _view(pipeline, dataplane, hostname, kube_ipvs, pieces), dataplane


def compute_state(
    resources: Iterable[Resource],
    hostname: str,
    *,
    validated: bool = False,
    direct: Iterable[Direct] = (),
) -> tuple[NodeState, dict[str, str]]:
    """``compute``'s state without its view (nothing is rendered), and what each IP set
    stands for, by kernel name (``selector app == "web"``), for the commands that read the
    state itself (explain, plan)."""
    pipeline, dataplane = computed_pipeline(resources, hostname, validated=validated, direct=direct)
    dataplane.host_ips = own_addresses(dataplane, hostname)
    sources = {}
    for set_id in dataplane.ipsets:
        described = _described(pipeline, set_id)
        sources[ipset_name(set_id)] = ", ".join(f"{k} {v}" for k, v in sorted(described.items()))
    return dataplane, sources


def _described(pipeline: Pipeline, set_id: str) -> dict[str, str]:
    """What an IP set stands for (its selector, named port or service), where known."""
    data = pipeline.graph.ipsets.get(set_id)
    return data.describe() if data is not None else {}


def computed_pipeline(
    resources: Iterable[Resource],
    hostname: str,
    *,
    validated: bool = False,
    direct: Iterable[Direct] = (),
) -> tuple[Pipeline, NodeState]:
    """The pipeline that computed ``hostname``'s state, and the state, which later updates
    to the pipeline go on changing (plan applies a change so)."""
    resources = list(resources)
    dataplane = NodeState()
    context = context_from(resources, hostname)
    settings = GraphSettings.of(startup_config(resources, hostname))
    pipeline = build_pipeline(
        hostname, dataplane.apply, context, validated=validated, settings=settings
    )
    pipeline.load(resources, ((d.key, cast(tuple[KV, ...], d.value)) for d in direct))
    return pipeline, dataplane


def compute_files(
    files: Iterable[LoadResult | None],
    hostname: str,
    *,
    reload: Callable[[], LoadResult],
    kube_ipvs: bool = False,
    pieces: bool = False,
) -> tuple[dict[str, Any], NodeState]:
    """``compute`` of validated files' loads, each computed as it comes (the first of each
    resource kept, as ``merge`` keeps it), so that the computing overlaps the loading; a
    None among them says the next is not ready, and the graph works ahead meanwhile. The
    graph is built with the settings of the environment (RouteSource, NFTablesMode); should
    the files' own FelixConfigurations say otherwise (which the start-up configuration takes
    from them), the whole is computed again with theirs, from ``reload`` (the same input
    loaded again: the loads are not kept for it, as they would hold every resource until
    the end)."""
    dataplane = NodeState()
    settings = GraphSettings.of(startup_config((), hostname))
    pipeline = build_pipeline(hostname, dataplane.apply, validated=True, settings=settings)
    configurations: list[Resource] = []
    for result in files:
        if result is None:
            pipeline.work_ahead()
            continue
        # The converter remembers every source it was given; a load holds each once.
        known = pipeline.converter.has_source
        mine = [item.resource for item in _first(result.resources, known)]
        theirs = _first(result.direct, known)
        configurations += [r for r in mine if isinstance(r, STARTUP_KINDS)]
        pipeline.add(mine, ((d.key, cast(tuple[KV, ...], d.value)) for d in theirs))
    if GraphSettings.of(startup_config(configurations, hostname)) != settings:
        del pipeline, dataplane  # built otherwise: their memory is the next one's
        loaded = reload()
        resources = (item.resource for item in loaded.resources)
        return compute(
            resources,
            hostname,
            validated=True,
            direct=loaded.direct,
            kube_ipvs=kube_ipvs,
            pieces=pieces,
        )
    pipeline.finish()
    return _view(pipeline, dataplane, hostname, kube_ipvs, pieces), dataplane


def _first(items: Iterable[_Item], known: Callable[[Identity], bool]) -> list[_Item]:
    """The items whose identity is not ``known`` (given by an earlier load)."""
    return [item for item in items if not known(item.key)]


def own_addresses(dataplane: NodeState, hostname: str) -> frozenset[str]:
    """What a dry-run takes for the node's own addresses (the agent reads its interfaces):
    those its Node resource gives."""
    metadata = dataplane.host_metadata.get(hostname)
    if metadata is None:
        return frozenset()
    found = (metadata.ipv4_addr, metadata.ipv6_addr)
    return frozenset(address.split("/")[0] for address in found if address)


def _view(
    pipeline: Pipeline,
    dataplane: NodeState,
    hostname: str,
    kube_ipvs: bool = False,
    pieces: bool = False,
) -> dict[str, Any]:
    """The snapshot of the computed ``dataplane``, with its rendered tables (``pieces``:
    made as they are written)."""
    dataplane.kube_ipvs = kube_ipvs
    dataplane.host_ips = own_addresses(dataplane, hostname)

    view = snapshot(dataplane, hostname, partial(_described, pipeline))
    if dataplane.config.nftables_mode is NFTablesMode.ENABLED:
        # Auto would look for kube-proxy's nftables table on the node: the dry-run has none.
        view["nftables"] = {
            f"ipv{version}": table.script()
            for version, table in sorted(render_nftables(dataplane).items())
        }
        return view
    if pieces:
        members = {ipset["id"]: ipset["members"] for ipset in view["ipsets"]}
        tables, ipsets = script_pieces(dataplane, members)
        view["iptables"] = {
            f"ipv{version}": {table: TextPieces(made) for table, made in by_table.items()}
            for version, by_table in sorted(tables.items())
        }
        view["ipset_restore"] = TextPieces(ipsets)
        return view
    rendered = render(dataplane)
    view["iptables"] = {
        f"ipv{version}": dict(tables) for version, tables in sorted(rendered.iptables.items())
    }
    view["ipset_restore"] = rendered.ipset_restore
    return view


#: From how many active policies the last IP version's tables are written by a worker.
AHEAD_MIN_POLICIES = 1000


def write_json(view: dict[str, Any], out: BinaryIO) -> None:
    """The snapshot as indented JSON with sorted keys, ASCII, written in pieces (as bytes: at
    130 MB a decode and encode cost more than the writing, and the whole text held at once
    was the dry-run's peak). With many policies, the last IP version's tables are written
    ahead by a forked worker (``WrittenAhead``) while this process writes the rest."""
    tables = view.get("iptables")
    if (
        isinstance(tables, dict)
        and len(tables) > 1
        and len(view["policies"]) >= AHEAD_MIN_POLICIES
        and any(isinstance(t, TextPieces) for t in tables[max(tables)].values())
    ):
        last = max(tables)
        view = {**view, "iptables": {**tables, last: WrittenAhead(tables[last], depth=2)}}
    write_indented(view, out.write)


def render_text(view: dict[str, Any]) -> str:
    """A readable summary of the snapshot, section by section."""
    lines = [f"Dataplane of {view['hostname']}", ""]
    lines.append(f"Workload endpoints ({len(view['workload_endpoints'])}):")
    for endpoint in view["workload_endpoints"]:
        nets = ", ".join(endpoint["ipv4_nets"] + endpoint["ipv6_nets"])
        lines.append(f"  {endpoint['id']}  {endpoint['interface']}  {nets}")
        lines.extend(_tier_lines(endpoint["tiers"]))
        lines.append(f"    profiles: {', '.join(endpoint['profiles']) or '-'}")
    lines.append(f"Host endpoints ({len(view['host_endpoints'])}):")
    for endpoint in view["host_endpoints"]:
        lines.append(f"  {endpoint['id']}  {endpoint['interface'] or '*'}")
        lines.extend(_tier_lines(endpoint["tiers"]))
        for label in ("untracked_tiers", "pre_dnat_tiers", "forward_tiers"):
            if endpoint[label]:
                lines.append(f"    {label.replace('_', ' ')}:")
                lines.extend(_tier_lines(endpoint[label], indent="      "))
    lines.append(f"Active policies ({len(view['policies'])}):")
    for policy in view["policies"]:
        where = f"{policy['namespace']}/" if policy["namespace"] else ""
        lines.append(f"  [{policy['tier']}] {policy['kind']} {where}{policy['name']}")
    lines.append(f"Active profiles ({len(view['profiles'])}): {', '.join(view['profiles'])}")
    lines.append(f"IP sets ({len(view['ipsets'])}):")
    for ipset in view["ipsets"]:
        source = ", ".join(f"{k}={v}" for k, v in sorted(ipset["source"].items()))
        lines.append(
            f"  {ipset['name']} {ipset['type']} ({source}): {len(ipset['members'])} members"
        )
        lines.extend(f"    {member}" for member in ipset["members"])
    lines.append(f"Routes ({len(view['routes'])}):")
    for route in view["routes"]:
        via = f" via {route['dst_node']}" if route["dst_node"] else ""
        via += f" ({route['dst_node_ip']})" if route["dst_node_ip"] else ""
        tunnel = f" tunnel {route['tunnel']}" if route["tunnel"] != "none" else ""
        nat = " nat-outgoing" if route["nat_outgoing"] else ""
        lines.append(f"  {route['dst']} {'+'.join(route['types'])}{via}{tunnel}{nat}")
    lines.append(f"VXLAN tunnel endpoints ({len(view['vteps'])}):")
    # Each VTEP's halves: (device, encapsulation flag, address, MAC, underlay address).
    halves = (
        ("vxlan.calico", "vxlan", "ipv4_addr", "mac", "parent_device_ip"),
        ("vxlan-v6.calico", "vxlan_v6", "ipv6_addr", "mac_v6", "parent_device_ipv6"),
    )
    for vtep in view["vteps"]:
        for _, _, address, mac, parent in halves:
            if vtep.get(address):
                lines.append(f"  {vtep['node']} {vtep[address]} mac {vtep[mac]} on {vtep[parent]}")
    encapsulation = view.get("encapsulation") or {}
    local = [v for v in view["vteps"] if v["node"] == view["hostname"]]
    config = parse_config(view.get("config", {}))
    for device, on, address, mac, parent in halves:
        if encapsulation.get(on) and local and local[0].get(address):
            vtep = local[0]
            lines.append(
                f"VXLAN device {device}: VNI {config.vxlan_vni}, port {config.vxlan_port}, "
                f"address {vtep[address]}, MAC {vtep[mac]}, parent {vtep[parent]}"
            )
    lines.append(f"WireGuard peers ({len(view['wireguard_peers'])}):")
    for peer in view["wireguard_peers"]:
        if peer["public_key"]:
            lines.append(
                f"  {peer['hostname']} key {peer['public_key']}"
                f" {peer['interface_ipv4_addr']}".rstrip()
            )
        if peer.get("public_key_v6"):
            lines.append(
                f"  {peer['hostname']} key {peer['public_key_v6']}"
                f" {peer['interface_ipv6_addr']}".rstrip()
            )
    for family, script in view.get("nftables", {}).items():
        lines += ["", f"# nft -f ({family})", script.rstrip("\n")]
    if "iptables" in view:
        lines += ["", "# ipset restore", view["ipset_restore"].rstrip("\n")]
    for family, tables in view.get("iptables", {}).items():
        for table in TABLES:
            lines += ["", f"# iptables-restore ({family}, {table})", tables[table].rstrip("\n")]
    return "\n".join(lines) + "\n"


def _tier_lines(tiers: list[dict[str, Any]], indent: str = "    ") -> list[str]:
    out = []
    for tier in tiers:
        out.append(
            f"{indent}tier {tier['name']} (default {tier['default_action']}): "
            f"ingress [{', '.join(tier['ingress_policies'])}] "
            f"egress [{', '.join(tier['egress_policies'])}]"
        )
    return out
