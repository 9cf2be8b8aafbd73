"""State tables for the calculators, in the style of Felix's states_for_test.go: each case is a
set of inputs and the output the calculator must hold after them, and every case is replayed
in several orders (the output may not depend on the order the datastore delivered things in).

Each calculator writes to a recorder implementing its output interface (calc/outputs.py), so
the tables state the content, not only that two runs agree."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.active_rules import DENY_ALL, ActiveRulesCalculator
from pyfelix.calc.config_batcher import startup_config
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.encapsulation import EncapsulationResolver
from pyfelix.calc.passthru import DataplanePassthru
from pyfelix.calc.policy_resolver import PolicyResolver, policy_id
from pyfelix.calc.profile_decoder import ProfileDecoder
from pyfelix.calc.routes import L3RouteResolver
from pyfelix.calc.vxlan import VXLANResolver, derived_vtep_mac
from pyfelix.resources import FelixConfiguration
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.values import FrozenMap


@attrs.define
class Recorder:
    """Every output interface, kept as the current state the dataplane would hold."""

    routes: dict[str, m.RouteUpdate] = attrs.Factory(dict)
    endpoints: dict[Any, Any] = attrs.Factory(dict)
    passthru: dict[tuple[str, Any], Any] = attrs.Factory(dict)
    namespaces: dict[Any, Any] = attrs.Factory(dict)
    encapsulation: m.Encapsulation | None = None

    def on_route_update(self, update: m.RouteUpdate) -> None:
        self.routes[update.dst] = update

    def on_route_remove(self, dst: str) -> None:
        del self.routes[dst]

    def on_endpoint_update(self, update: Any) -> None:
        self.endpoints[update.id] = update

    def on_endpoint_remove(self, key: Any) -> None:
        del self.endpoints[key]

    def on_encapsulation(self, encapsulation: m.Encapsulation) -> None:
        self.encapsulation = encapsulation

    def on_host_metadata_update(self, update: m.HostMetadataUpdate) -> None:
        address = update.ipv4_addr
        self.passthru[("host", update.hostname)] = (
            f"{address} {update.ipv6_addr}" if update.ipv6_addr else address
        )

    def on_host_metadata_remove(self, hostname: str) -> None:
        self.passthru.pop(("host", hostname))

    def on_pool_update(self, update: m.IPAMPoolUpdate) -> None:
        self.passthru[("pool", update.id)] = update.pool.masquerade

    def on_pool_remove(self, cidr: str) -> None:
        self.passthru.pop(("pool", cidr))

    def on_wireguard_update(self, update: m.WireguardEndpointUpdate) -> None:
        self.passthru[("wireguard", update.hostname)] = update.public_key

    def on_wireguard_remove(self, hostname: str) -> None:
        self.passthru.pop(("wireguard", hostname), None)

    def on_service_update(self, update: m.ServiceUpdate) -> None:
        self.passthru[("service", f"{update.namespace}/{update.name}")] = update.cluster_ips

    def on_service_remove(self, namespace: str, name: str) -> None:
        self.passthru.pop(("service", f"{namespace}/{name}"))

    def on_global_bgp_config(self, update: m.GlobalBGPConfigUpdate) -> None:
        self.passthru[("bgp", "default")] = update

    def on_namespace_update(self, update: m.NamespaceUpdate) -> None:
        self.namespaces[update.id] = dict(update.labels)

    def on_namespace_remove(self, namespace: str) -> None:
        del self.namespaces[namespace]

    def on_service_account_update(self, update: m.ServiceAccountUpdate) -> None:
        self.namespaces[update.id] = dict(update.labels)

    def on_service_account_remove(self, account: m.ServiceAccountID) -> None:
        del self.namespaces[account]


def orders(updates: Sequence[Update]) -> list[list[Update]]:
    """The updates as given, reversed, and a few other permutations (at most six in all)."""
    found = [list(updates), list(reversed(updates))]
    for permutation in itertools.islice(itertools.permutations(updates), 1, 20, 5):
        found.append(list(permutation))
    return found[:6]


def wep(name: str, ip: str, labels: dict[str, str] | None = None) -> model.WorkloadEndpoint:
    return model.WorkloadEndpoint("active", name, "", ("open",), (ip,), (), FrozenMap(labels or {}))


def local(workload: str) -> model.WorkloadEndpointKey:
    return model.WorkloadEndpointKey("node-a", "k8s", f"ns/{workload}", "eth0")


def pool(cidr: str, vxlan: str = "", nat: bool = False) -> model.IPPool:
    return model.IPPool(cidr, "", vxlan, nat, False)


def config(value: str) -> model.ConfigValue:
    return model.ConfigValue(value)


# --------------------------------------------------------------------------------- routes

VXLAN_POOL = Update(model.IPPoolKey("10.65.0.0/16"), pool("10.65.0.0/16", "Always", nat=True))
REMOTE_BLOCK = Update(
    model.BlockKey("10.65.1.0/26"), model.AllocationBlock("10.65.1.0/26", "host:node-b")
)
LOCAL_BLOCK = Update(
    model.BlockKey("10.65.0.0/26"), model.AllocationBlock("10.65.0.0/26", "host:node-a")
)
NODE_B_IP = Update(model.HostIPKey("node-b"), config("192.0.2.2"))
NODE_B_TUNNEL = Update(model.HostConfigKey("node-b", "IPv4VXLANTunnelAddr"), config("10.65.1.0"))
LOCAL_WORKLOAD = Update(local("pod"), wep("calipod", "10.65.0.5/32"))

# dst -> (types, destination node, tunnel, nat outgoing, local interface)
Route = tuple[frozenset[str], str, str, bool, str]
ROUTE_STATES: list[tuple[str, list[Update], dict[str, Route]]] = [
    ("nothing", [], {}),
    (
        "a pool alone is its CIDR_INFO route",
        [VXLAN_POOL],
        {"10.65.0.0/16": (frozenset({"CIDR_INFO"}), "", "vxlan", True, "")},
    ),
    (
        # As Felix's resolver: the route does not wait for the VTEP (the dataplane does).
        "a remote block is routed before its node's VTEP is known",
        [VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP],
        {
            "10.65.0.0/16": (frozenset({"CIDR_INFO"}), "", "vxlan", True, ""),
            "10.65.1.0/26": (frozenset({"REMOTE_WORKLOAD"}), "node-b", "vxlan", True, ""),
            "192.0.2.2/32": (frozenset({"REMOTE_HOST"}), "node-b", "none", False, ""),
        },
    ),
    (
        "with the VTEP, the block goes through the tunnel",
        [VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL],
        {
            "10.65.0.0/16": (frozenset({"CIDR_INFO"}), "", "vxlan", True, ""),
            "10.65.1.0/26": (frozenset({"REMOTE_WORKLOAD"}), "node-b", "vxlan", True, ""),
            "10.65.1.0/32": (frozenset({"REMOTE_TUNNEL"}), "node-b", "vxlan", True, ""),
            "192.0.2.2/32": (frozenset({"REMOTE_HOST"}), "node-b", "none", False, ""),
        },
    ),
    (
        "local block and a local workload in it",
        [VXLAN_POOL, LOCAL_BLOCK, LOCAL_WORKLOAD],
        {
            "10.65.0.0/16": (frozenset({"CIDR_INFO"}), "", "vxlan", True, ""),
            # As Felix: a local route inside a pool carries the pool's type too.
            "10.65.0.0/26": (frozenset({"LOCAL_WORKLOAD"}), "node-a", "vxlan", True, ""),
            "10.65.0.5/32": (frozenset({"LOCAL_WORKLOAD"}), "node-a", "vxlan", True, "calipod"),
        },
    ),
]


def resolve_routes(order: Sequence[Update], route_source: str = "CalicoIPAM") -> Recorder:
    """The routes node-a's resolver sent for ``order``, flushed after each update."""
    out = Recorder()
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver = L3RouteResolver("node-a", out, route_source=route_source)
    resolver.register_with(updates, local_updates)
    # With WorkloadIPs the resolver takes every workload from the main dispatcher.
    every = route_source == "WorkloadIPs"
    for update in order:
        workload = isinstance(update.key, model.WorkloadEndpointKey)
        target = local_updates if workload and not every else updates
        target.on_update(update)
        resolver.flush()
    return out


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in ROUTE_STATES], ids=[c[0] for c in ROUTE_STATES]
)
def test_route_resolver_states(inputs: list[Update], expected: dict[str, Route]) -> None:
    for order in orders(inputs):
        out = resolve_routes(order)
        got = {
            dst: (r.types, r.dst_node, r.tunnel, r.nat_outgoing, r.local_workload_interface)
            for dst, r in out.routes.items()
        }
        assert got == expected, [str(u.key) for u in order]


def allocated(cidr: str, affinity: str, owners: list[str | None]) -> Update:
    """A block whose first addresses are allocated to ``owners`` (None: no node recorded)."""
    attributes = tuple(
        {"handle_id": f"h{i}", "secondary": {"node": n} if n else {}} for i, n in enumerate(owners)
    )
    allocations = tuple(range(len(owners)))
    return Update(
        model.BlockKey(cidr), model.AllocationBlock(cidr, affinity, allocations, attributes)
    )


NODE_C_IP = Update(model.HostIPKey("node-c"), config("192.0.2.3"))
NODE_C_TUNNEL = Update(model.HostConfigKey("node-c", "IPv4VXLANTunnelAddr"), config("10.65.2.0"))
BORROWING_STATES: list[tuple[str, list[Update], dict[str, tuple[frozenset[str], str, bool]]]] = [
    (
        "an address of node-b's block on node-c: its own route to node-c, borrowed",
        [VXLAN_POOL, allocated("10.65.1.0/26", "host:node-b", ["node-b", "node-c"]), NODE_B_IP,
         NODE_B_TUNNEL, NODE_C_IP, NODE_C_TUNNEL],
        {
            "10.65.1.0/26": (frozenset({"REMOTE_WORKLOAD"}), "node-b", False),
            "10.65.1.1/32": (frozenset({"REMOTE_WORKLOAD"}), "node-c", True),
        },
    ),
    (
        "our workload in node-b's block: a local, borrowed /32",
        [VXLAN_POOL, allocated("10.65.1.0/26", "host:node-b", [None, "node-a"]), NODE_B_IP,
         NODE_B_TUNNEL, Update(local("pod"), wep("calipod", "10.65.1.1/32"))],
        {
            "10.65.1.0/26": (frozenset({"REMOTE_WORKLOAD"}), "node-b", False),
            "10.65.1.1/32": (frozenset({"LOCAL_WORKLOAD", "REMOTE_WORKLOAD"}), "node-a", True),
        },
    ),
    (
        "our workload in node-b's block, IPAM silent: both local and remote, borrowed",
        [VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL,
         Update(local("pod"), wep("calipod", "10.65.1.9/32"))],
        {
            "10.65.1.0/26": (frozenset({"REMOTE_WORKLOAD"}), "node-b", False),
            "10.65.1.9/32": (frozenset({"LOCAL_WORKLOAD", "REMOTE_WORKLOAD"}), "node-a", True),
        },
    ),
    (
        "node-c's address in our own block: remote and local, borrowed, to node-c",
        [VXLAN_POOL, allocated("10.65.0.0/26", "host:node-a", ["node-c"]), NODE_C_IP,
         NODE_C_TUNNEL],
        {
            "10.65.0.0/26": (frozenset({"LOCAL_WORKLOAD"}), "node-a", False),
            "10.65.0.0/32": (frozenset({"LOCAL_WORKLOAD", "REMOTE_WORKLOAD"}), "node-c", True),
        },
    ),
    (
        "a block without affinity: each allocation routed to its node, not borrowed",
        [VXLAN_POOL, allocated("10.65.3.0/26", "", ["node-c"]), NODE_C_IP, NODE_C_TUNNEL],
        {"10.65.3.0/32": (frozenset({"REMOTE_WORKLOAD"}), "node-c", False)},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in BORROWING_STATES], ids=[c[0] for c in BORROWING_STATES]
)
def test_borrowed_addresses_get_their_own_routes(
    inputs: list[Update], expected: dict[str, tuple[frozenset[str], str, bool]]
) -> None:
    """As Felix's L3 resolver (libcalico's NonAffineAllocations): in every order of arrival."""
    for order in orders(inputs):
        out = resolve_routes(order)
        got = {
            dst: (r.types, r.dst_node, r.borrowed)
            for dst, r in out.routes.items()
            if dst in expected
        }
        assert got == expected, [str(u.key) for u in order]
        remote = [r for dst, r in out.routes.items() if dst in expected and r.dst_node != "node-a"]
        assert all(r.tunnel == "vxlan" for r in remote)


def test_every_route_to_a_node_carries_its_ip() -> None:
    """As Felix: host, tunnel and workload routes name the destination node's IP."""
    out = Recorder()
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver = L3RouteResolver("node-a", out)
    resolver.register_with(updates, local_updates)
    node_a_ip = Update(model.HostIPKey("node-a"), config("192.0.2.1"))
    for update in (VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL, node_a_ip):
        updates.on_update(update)
    resolver.flush()
    assert {dst: r.dst_node_ip for dst, r in out.routes.items()} == {
        "10.65.0.0/16": "",
        "10.65.1.0/26": "192.0.2.2",
        "10.65.1.0/32": "192.0.2.2",
        "192.0.2.2/32": "192.0.2.2",
        "192.0.2.1/32": "192.0.2.1",
    }


def test_cross_subnet_routes_to_nodes_in_our_subnet_go_direct() -> None:
    """As Felix: in a CrossSubnet pool, a route to a node in this node's subnet is flagged
    same-subnet (routed straight to its IP, no VTEP needed); to a node elsewhere it goes
    through the tunnel; an Always pool never says same-subnet."""
    cross = Update(model.IPPoolKey("10.65.0.0/16"), pool("10.65.0.0/16", "cross-subnet"))
    ours = Update(model.HostNetworkKey("node-a"), config("192.0.2.0/24"))
    far_block = Update(
        model.BlockKey("10.65.3.0/26"), model.AllocationBlock("10.65.3.0/26", "host:node-c")
    )
    far_ip = Update(model.HostIPKey("node-c"), config("198.51.100.3"))
    inputs = [cross, ours, REMOTE_BLOCK, NODE_B_IP, far_block, far_ip]
    for order in orders(inputs):
        routes = resolve_routes(order).routes
        near = routes["10.65.1.0/26"]
        assert (near.same_subnet, near.dst_node_ip, near.tunnel) == (True, "192.0.2.2", "vxlan")
        far = routes["10.65.3.0/26"]
        assert (far.same_subnet, far.tunnel) == (False, "vxlan")
    always = Update(model.IPPoolKey("10.65.0.0/16"), pool("10.65.0.0/16", "always"))
    routes = resolve_routes([always, ours, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL]).routes
    assert routes["10.65.1.0/26"].same_subnet is False


V6_POOL = Update(model.IPPoolKey("fd65::/48"), pool("fd65::/48", "Always"))
V6_REMOTE_BLOCK = Update(
    model.BlockKey("fd65:0:0:1::/122"), model.AllocationBlock("fd65:0:0:1::/122", "host:node-b")
)
NODE_B_IP6 = Update(model.HostIPv6Key("node-b"), config("fd99::2"))
NODE_B_TUNNEL6 = Update(
    model.HostConfigKey("node-b", "IPv6VXLANTunnelAddr"), config("fd65:0:0:1::")
)


def test_ipv6_vxlan_routes_wait_for_the_nodes_ipv6_vtep() -> None:
    """As Felix: an IPv6 block is routed through the tunnel whatever its node's VTEPs (the
    dataplane waits for its IPv6 one); its routes carry the node's IPv6 address, and the
    node's IPv6 address and tunnel address get /128 routes."""
    dual = [VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL, V6_POOL, V6_REMOTE_BLOCK]
    for order in orders([*dual, NODE_B_IP6]):
        routes = resolve_routes(order).routes
        assert routes["fd65:0:0:1::/122"].dst_node_ip == "fd99::2"
        assert routes["fd99::2/128"].types == frozenset({"REMOTE_HOST"})
        assert routes["10.65.1.0/26"].dst_node_ip == "192.0.2.2"
    for order in orders([V6_POOL, V6_REMOTE_BLOCK, NODE_B_IP6, NODE_B_TUNNEL6, NODE_B_IP]):
        routes = resolve_routes(order).routes
        block = routes["fd65:0:0:1::/122"]
        assert (block.types, block.tunnel, block.dst_node_ip) == (
            frozenset({"REMOTE_WORKLOAD"}),
            "vxlan",
            "fd99::2",
        )
        tunnel = routes["fd65:0:0:1::/128"]
        assert (tunnel.types, tunnel.dst_node_ip) == (frozenset({"REMOTE_TUNNEL"}), "fd99::2")


def test_ipv6_cross_subnet_uses_the_nodes_ipv6_subnet() -> None:
    """CrossSubnet in IPv6 compares the nodes' IPv6 addresses with our IPv6 subnet, not the
    IPv4 ones."""
    cross6 = Update(model.IPPoolKey("fd65::/48"), pool("fd65::/48", "cross-subnet"))
    ours4 = Update(model.HostNetworkKey("node-a"), config("192.0.2.0/24"))
    ours6 = Update(model.HostNetworkV6Key("node-a"), config("fd99::/64"))
    base = [cross6, V6_REMOTE_BLOCK, NODE_B_IP, NODE_B_IP6, ours4]
    assert resolve_routes(base).routes["fd65:0:0:1::/122"].same_subnet is False
    for order in orders([*base, ours6]):
        block = resolve_routes(order).routes["fd65:0:0:1::/122"]
        assert (block.same_subnet, block.dst_node_ip) == (True, "fd99::2")


@attrs.define
class VtepRecorder:
    vteps: dict[str, m.VXLANTunnelEndpointUpdate] = attrs.Factory(dict)

    def on_vtep_update(self, update: m.VXLANTunnelEndpointUpdate) -> None:
        self.vteps[update.node] = update

    def on_vtep_remove(self, node: str) -> None:
        self.vteps.pop(node, None)


def test_vteps_have_an_ipv4_half_an_ipv6_half_or_both() -> None:
    """As Felix's VXLAN resolver: a half needs the node's address and tunnel address of its
    version; either alone is a VTEP; the IPv6 MAC is derived from the name with "-v6"."""
    mac_v6 = Update(
        model.HostConfigKey("node-b", "VXLANTunnelMACAddrV6"), config("66:AA:00:00:00:06")
    )
    for order in orders([NODE_B_IP6, NODE_B_TUNNEL6, NODE_B_IP]):
        out = VtepRecorder()
        updates = Dispatcher()
        VXLANResolver(out).register_with(updates)
        for update in order:
            updates.on_update(update)
        assert out.vteps == {
            "node-b": m.VXLANTunnelEndpointUpdate(
                "node-b", "", "", "", derived_vtep_mac("node-b", 6), "fd65:0:0:1::", "fd99::2"
            )
        }
        for update in (NODE_B_TUNNEL, mac_v6):
            updates.on_update(update)
        vtep = out.vteps["node-b"]
        assert (vtep.mac, vtep.ipv4_addr, vtep.parent_device_ip) == (
            derived_vtep_mac("node-b"),
            "10.65.1.0",
            "192.0.2.2",
        )
        assert vtep.mac_v6 == "66:aa:00:00:00:06"
        for update in (NODE_B_TUNNEL6, NODE_B_TUNNEL):
            updates.on_update(Update(update.key, None))
        assert out.vteps == {}
    assert derived_vtep_mac("node-b", 6) != derived_vtep_mac("node-b")


IPIP_POOL = Update(
    model.IPPoolKey("10.65.0.0/16"), model.IPPool("10.65.0.0/16", "always", "", True, False)
)
NODE_B_IPIP = Update(model.HostConfigKey("node-b", "IpInIpTunnelAddr"), config("10.65.1.1"))


def test_ipip_pools_route_remote_blocks_through_ipip_without_a_vtep() -> None:
    """An IPIP pool's remote block is tunnelled IPIP to the node's IP (no VTEP to wait for);
    the node's IPIP address is its tunnel route, in every order."""
    for order in orders([IPIP_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_IPIP]):
        routes = resolve_routes(order).routes
        block = routes["10.65.1.0/26"]
        assert (block.types, block.tunnel, block.dst_node_ip) == (
            frozenset({"REMOTE_WORKLOAD"}),
            "ipip",
            "192.0.2.2",
        )
        assert routes["10.65.1.1/32"].types == frozenset({"REMOTE_TUNNEL"})
        assert routes["10.65.0.0/16"].tunnel == "ipip"


def test_route_resolver_removes_what_goes() -> None:
    out = Recorder()
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver = L3RouteResolver("node-a", out)
    resolver.register_with(updates, local_updates)
    for update in (VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL):
        updates.on_update(update)
    resolver.flush()
    updates.on_update(Update(NODE_B_TUNNEL.key, None))
    updates.on_update(Update(REMOTE_BLOCK.key, None))
    resolver.flush()
    assert set(out.routes) == {"10.65.0.0/16", "192.0.2.2/32"}


# ------------------------------------------------------------------ active rules + resolver


def policy(selector: str, order: float | None = None, tier: str = "default") -> model.Policy:
    allow = (model.Rule(action="allow"),)
    return model.Policy("", tier, order, allow, allow, selector, ("ingress", "egress"))


def gnp(name: str, tier: str = "default") -> model.PolicyKey:
    return model.PolicyKey(name, "", "GlobalNetworkPolicy", tier)


@attrs.define
class Rules:
    """What the active rules calculator says is active."""

    policies: dict[model.PolicyKey, model.Policy] = attrs.Factory(dict)
    profiles: dict[str, model.ProfileRules] = attrs.Factory(dict)


def active_rules_graph() -> tuple[Dispatcher, Dispatcher, Rules, PolicyResolver, Recorder]:
    rules, out = Rules(), Recorder()
    resolver = PolicyResolver(out)
    arc = ActiveRulesCalculator(
        on_policy_active=rules.policies.__setitem__,
        on_policy_inactive=rules.policies.__delitem__,
        on_profile_active=rules.profiles.__setitem__,
        on_profile_inactive=rules.profiles.__delitem__,
        on_match_started=resolver.on_match_started,
        on_match_stopped=resolver.on_match_stopped,
    )
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver.register_with(updates, local_updates)
    arc.register_with(updates, local_updates)
    return updates, local_updates, rules, resolver, out


TIERED = [
    Update(model.TierKey("security"), model.Tier(100.0, "Deny")),
    Update(gnp("security.gate", "security"), policy('app == "web"', 1, "security")),
    Update(gnp("b-late"), policy('app == "web"', 20)),
    Update(gnp("a-early"), policy('app == "web"', 10)),
    Update(gnp("unordered"), policy("all()")),
    Update(gnp("other-app"), policy('app == "db"', 1)),
    Update(gnp("zz.last", "zz"), policy("all()", 1, "zz")),
    Update(
        model.PolicyKey("staged:x", "", "StagedGlobalNetworkPolicy", "default"), policy("all()")
    ),
]


def test_active_rules_and_tiers_state() -> None:
    """Tiers by order (a tier without a resource last), policies by order then name (unset
    last); a policy no local endpoint matches is not active; staged ones never are; a profile
    that does not exist is a deny-all stand-in."""
    web = Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"}))
    for order in orders([*TIERED, web]):
        updates, local_updates, rules, resolver, out = active_rules_graph()
        for update in order:
            target = local_updates if isinstance(update.key, model.WorkloadEndpointKey) else updates
            target.on_update(update)
        updates.on_status(SyncStatus.IN_SYNC)
        resolver.flush()
        assert {k.name for k in rules.policies} == {
            "security.gate",
            "b-late",
            "a-early",
            "unordered",
            "zz.last",
        }
        assert rules.profiles == {"open": DENY_ALL}
        (endpoint,) = out.endpoints.values()
        tiers = [(t.name, [p.name for p in t.ingress_policies]) for t in endpoint.tiers]
        assert tiers == [
            ("security", ["security.gate"]),
            ("default", ["a-early", "b-late", "unordered"]),
            ("zz", ["zz.last"]),
        ]


def test_nothing_resolved_before_in_sync_and_a_relabel_moves_policies() -> None:
    updates, local_updates, rules, resolver, out = active_rules_graph()
    for update in TIERED:
        updates.on_update(update)
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"})))
    resolver.flush()
    assert out.endpoints == {}
    updates.on_status(SyncStatus.IN_SYNC)
    resolver.flush()
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "db"})))
    resolver.flush()
    assert policy_id(gnp("other-app")) in out.endpoints[local("web")].tiers[0].ingress_policies
    assert gnp("a-early") not in rules.policies


def test_a_policy_changed_or_deleted_after_in_sync_resolves_its_endpoints_again() -> None:
    """The resolver keeps no policy-to-endpoint index: a known policy's change finds its
    endpoints among the node's; a new one's come with its matches."""
    updates, local_updates, _, resolver, out = active_rules_graph()
    for update in TIERED:
        updates.on_update(update)
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"})))
    updates.on_status(SyncStatus.IN_SYNC)
    resolver.flush()

    def default_tier() -> list[str]:
        tiers = out.endpoints[local("web")].tiers
        return [p.name for t in tiers if t.name == "default" for p in t.ingress_policies]

    assert default_tier() == ["a-early", "b-late", "unordered"]
    updates.on_update(Update(gnp("b-late"), policy('app == "web"', 5)))
    resolver.flush()
    assert default_tier() == ["b-late", "a-early", "unordered"]
    updates.on_update(Update(gnp("a-early"), None))
    resolver.flush()
    assert default_tier() == ["b-late", "unordered"]
    updates.on_update(Update(gnp("new"), policy('app == "web"', 1)))
    resolver.flush()
    assert default_tier() == ["new", "b-late", "unordered"]


# ------------------------------------------------------------------ passthru, decoder, encap


PASSTHRU_STATES: list[tuple[str, list[Update], dict[tuple[str, Any], Any]]] = [
    ("host IP", [NODE_B_IP], {("host", "node-b"): "192.0.2.2"}),
    (
        "host IPv4 and IPv6 addresses, one message",
        [NODE_B_IP, Update(model.HostIPv6Key("node-b"), config("fd99::2"))],
        {("host", "node-b"): "192.0.2.2 fd99::2"},
    ),
    (
        "host IPv6 address alone",
        [Update(model.HostIPv6Key("node-b"), config("fd99::2"))],
        {("host", "node-b"): " fd99::2"},
    ),
    ("pool", [VXLAN_POOL], {("pool", "10.65.0.0/16"): True}),
    (
        "WireGuard key",
        [Update(model.WireguardKey("node-b"), model.Wireguard("a2V5"))],
        {("wireguard", "node-b"): "a2V5"},
    ),
    ("WireGuard without a key", [Update(model.WireguardKey("node-b"), model.Wireguard(""))], {}),
]


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in PASSTHRU_STATES], ids=[c[0] for c in PASSTHRU_STATES]
)
def test_passthru_states(inputs: list[Update], expected: dict[tuple[str, Any], Any]) -> None:
    out, updates = Recorder(), Dispatcher()
    DataplanePassthru(out).register_with(updates)
    for update in inputs:
        updates.on_update(update)
    assert out.passthru == expected
    for update in inputs:
        updates.on_update(Update(update.key, None))
    assert out.passthru == {}


def test_profile_decoder_states() -> None:
    out, updates = Recorder(), Dispatcher()
    ProfileDecoder(out).register_with(updates)
    labels = {"pcns.team": "blue", "pcns.projectcalico.org/name": "shop", "other": "x"}
    updates.on_update(
        Update(model.ProfileLabelsKey("kns.shop"), model.ProfileLabels(FrozenMap(labels)))
    )
    account = {"pcsa.role": "frontend"}
    updates.on_update(
        Update(model.ProfileLabelsKey("ksa.shop.web"), model.ProfileLabels(FrozenMap(account)))
    )
    updates.on_update(
        Update(model.ProfileLabelsKey("open"), model.ProfileLabels(FrozenMap({"a": "b"})))
    )
    assert out.namespaces == {
        "shop": {"team": "blue", "projectcalico.org/name": "shop"},
        m.ServiceAccountID("shop", "web"): {"role": "frontend"},
    }
    updates.on_update(Update(model.ProfileLabelsKey("kns.shop"), None))
    assert list(out.namespaces) == [m.ServiceAccountID("shop", "web")]


ENCAP_STATES: list[tuple[str, list[Update], m.Encapsulation]] = [
    ("no pools", [], m.Encapsulation(False, False)),
    ("a VXLAN pool", [VXLAN_POOL], m.Encapsulation(False, True)),
    (
        "an IPv6 VXLAN pool",
        [Update(model.IPPoolKey("fd00::/64"), pool("fd00::/64", "Always"))],
        m.Encapsulation(False, False, True),
    ),
    (
        "an IPIP pool",
        [
            Update(
                model.IPPoolKey("10.66.0.0/16"),
                model.IPPool("10.66.0.0/16", "Always", "", False, False),
            )
        ],
        m.Encapsulation(True, False),
    ),
    (
        "VXLANEnabled false overrides the pools",
        [VXLAN_POOL, Update(model.GlobalConfigKey("VXLANEnabled"), config("false"))],
        m.Encapsulation(False, False),
    ),
    (
        "a disabled pool still counts (its pods keep their tunnel, as in a pool migration)",
        [
            Update(
                model.IPPoolKey("10.67.0.0/16"),
                model.IPPool("10.67.0.0/16", "", "Always", False, True),
            )
        ],
        m.Encapsulation(False, True),
    ),
]


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in ENCAP_STATES], ids=[c[0] for c in ENCAP_STATES]
)
def test_encapsulation_states(inputs: list[Update], expected: m.Encapsulation) -> None:
    for order in orders(inputs):
        out, updates = Recorder(), Dispatcher()
        EncapsulationResolver(out).register_with(updates)
        for update in order:
            updates.on_update(update)
        assert out.encapsulation is None, "nothing before the datastore is in sync"
        updates.on_status(SyncStatus.IN_SYNC)
        assert out.encapsulation == expected


# -------------------------------------------------------------------------------- dispatcher


def test_dispatcher_fans_out_in_order_and_a_filter_stops_the_rest() -> None:
    seen: list[str] = []
    dispatcher = Dispatcher()

    def receiver(name: str, stop: bool = False) -> Callable[[Update], bool]:
        def receive(update: Update) -> bool:
            seen.append(name)
            return stop

        return receive

    dispatcher.register(model.HostIPKey, receiver("first"))
    dispatcher.register(model.HostIPKey, receiver("filter", stop=True))
    dispatcher.register(model.HostIPKey, receiver("never"))
    dispatcher.register(model.TierKey, receiver("tier"))
    dispatcher.register_status(lambda status: seen.append(status.name))
    assert dispatcher.on_update(NODE_B_IP) is True
    dispatcher.on_updates([Update(model.TierKey("t"), None)])
    dispatcher.on_status(SyncStatus.IN_SYNC)
    assert seen == ["first", "filter", "tier", "IN_SYNC"]


def workload_on(node: str, name: str, ip: str) -> Update:
    return Update(model.WorkloadEndpointKey(node, "k8s", f"ns/{name}", "eth0"), wep(name, ip))


def gone(update: Update) -> Update:
    return Update(update.key, None)


# (types, destination node, local interface) of one address's route.
Claimed = tuple[frozenset[str], str, str]
CLAIM_STATES: list[tuple[str, list[Update], dict[str, Claimed]]] = [
    (
        "two local workloads on one address: the first interface by name",
        [workload_on("node-a", "calib", "10.70.0.5/32"),
         workload_on("node-a", "calia", "10.70.0.5/32")],
        {"10.70.0.5/32": (frozenset({"LOCAL_WORKLOAD"}), "node-a", "calia")},
    ),
    (
        "ours and node-b's on one address: the first node by name (ours), local only",
        [workload_on("node-b", "calib", "10.70.0.5/32"),
         workload_on("node-a", "calia", "10.70.0.5/32"), NODE_B_IP],
        {"10.70.0.5/32": (frozenset({"LOCAL_WORKLOAD"}), "node-a", "calia")},
    ),
    (
        "ours and node-0's on one address: node-0's, remote only",
        [workload_on("node-0", "cali0", "10.70.0.5/32"),
         workload_on("node-a", "calia", "10.70.0.5/32")],
        {"10.70.0.5/32": (frozenset({"REMOTE_WORKLOAD"}), "node-0", "")},
    ),
    (
        "a workload on node-b's tunnel address: on one node the workload comes first",
        [workload_on("node-b", "calib", "10.65.1.0/32"), NODE_B_TUNNEL, NODE_B_IP],
        {"10.65.1.0/32": (frozenset({"REMOTE_WORKLOAD"}), "node-b", "")},
    ),
    (
        "the other workload goes: the remaining claim decides",
        [workload_on("node-0", "cali0", "10.70.0.5/32"),
         workload_on("node-a", "calia", "10.70.0.5/32"),
         gone(workload_on("node-0", "cali0", "10.70.0.5/32"))],
        {"10.70.0.5/32": (frozenset({"LOCAL_WORKLOAD"}), "node-a", "calia")},
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("inputs", "expected"), [c[1:] for c in CLAIM_STATES], ids=[c[0] for c in CLAIM_STATES]
)
def test_an_address_claimed_twice_resolves_as_felix_in_every_order(
    inputs: list[Update], expected: dict[str, Claimed]
) -> None:
    """Felix's route trie keeps every claim (ref) and routes by the first: node name, then a
    workload before a tunnel. Orders keep a removal after what it removes."""
    removals = [u for u in inputs if u.value is None]
    for order in orders([u for u in inputs if u.value is not None]):
        out = resolve_routes([*order, *removals], route_source="WorkloadIPs")
        got = {
            dst: (r.types, r.dst_node, r.local_workload_interface)
            for dst, r in out.routes.items()
            if dst in expected
        }
        assert got == expected, [str(u.key) for u in order]


def test_a_node_that_loses_its_tunnel_address_keeps_its_block_route() -> None:
    """Its tunnel route goes; its block's route stays, as in Felix's "VXLAN tunnel IP
    removed" state (the VXLAN resolver drops its VTEP, and the dataplane stops routing
    through it until the address comes back)."""
    base = [VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL]
    out = resolve_routes([*base, gone(NODE_B_TUNNEL)])
    assert "10.65.1.0/32" not in out.routes
    assert out.routes["10.65.1.0/26"].tunnel == "vxlan"
    assert out.routes["192.0.2.2/32"].types == frozenset({"REMOTE_HOST"})


def test_route_source_workload_ips_routes_every_workload_not_blocks() -> None:
    """RouteSource WorkloadIPs, as Felix: each workload's addresses route to its node (remote
    ones through the tunnel once the VTEP is known), IPAM blocks are ignored."""
    out = Recorder()
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver = L3RouteResolver("node-a", out, route_source="WorkloadIPs")
    resolver.register_with(updates, local_updates)
    remote = Update(
        model.WorkloadEndpointKey("node-b", "k8s", "ns/web", "eth0"), wep("caliweb", "10.70.0.9/32")
    )
    for update in (VXLAN_POOL, REMOTE_BLOCK, NODE_B_IP, NODE_B_TUNNEL, remote):
        updates.on_update(update)
    resolver.flush()
    local_updates.on_update(LOCAL_WORKLOAD)  # the local dispatcher is not listened to
    resolver.flush()
    assert "10.65.1.0/26" not in out.routes, "blocks are not a route source"
    web = out.routes["10.70.0.9/32"]
    assert web.types == frozenset({"REMOTE_WORKLOAD"})
    assert (web.dst_node, web.dst_node_ip) == ("node-b", "192.0.2.2")
    assert "10.65.0.5/32" not in out.routes
    updates.on_update(LOCAL_WORKLOAD)
    resolver.flush()
    local = out.routes["10.65.0.5/32"]
    assert (local.types, local.local_workload_interface) == (
        frozenset({"LOCAL_WORKLOAD"}),
        "calipod",
    )


def test_the_graph_starts_with_the_route_source_of_the_startup_configuration() -> None:
    """The global FelixConfiguration, this node's, then FELIX_ROUTESOURCE, as the batcher
    merges them."""

    def felix(name: str, **spec: object) -> FelixConfiguration:
        doc = {"apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration"}
        return FelixConfiguration.from_manifest({**doc, "metadata": {"name": name}, "spec": spec})

    default = felix("default", routeSource="WorkloadIPs")
    node = felix("node.node-a", routeSource="CalicoIPAM")
    assert startup_config([], "node-a", {}).route_source == "CalicoIPAM"
    assert startup_config([default], "node-a", {}).route_source == "WorkloadIPs"
    assert startup_config([default, node], "node-a", {}).route_source == "CalicoIPAM"
    assert startup_config([default, node], "node-b", {}).route_source == "WorkloadIPs"
    environ = {"FELIX_ROUTESOURCE": "WorkloadIPs"}
    assert startup_config([node], "node-a", environ).route_source == "WorkloadIPs"


def test_wireguard_interface_addresses_are_tunnel_routes() -> None:
    """As Felix (RefTypeWireguard): a node's WireGuard interface addresses, IPv4 and IPv6,
    are REMOTE_TUNNEL routes to it, carrying its address of their family."""
    wireguard = Update(
        model.WireguardKey("node-b"),
        model.Wireguard("a2V5", "10.66.1.1", "a2V5Ng==", "fd66::1"),
    )
    for order in orders([wireguard, NODE_B_IP, NODE_B_IP6]):
        routes = resolve_routes(order).routes
        assert (routes["10.66.1.1/32"].types, routes["10.66.1.1/32"].dst_node_ip) == (
            frozenset({"REMOTE_TUNNEL"}),
            "192.0.2.2",
        )
        assert routes["fd66::1/128"].dst_node_ip == "fd99::2"
    assert "10.66.1.1/32" not in resolve_routes([wireguard, Update(wireguard.key, None)]).routes
