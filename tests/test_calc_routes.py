"""State tables for the route and VTEP calculators (calc/routes.py, calc/vxlan.py), in the
style of Felix's states_for_test.go; every case is replayed in several orders."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pytest

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.config_batcher import startup_config
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.routes import L3RouteResolver
from pyfelix.calc.vxlan import VXLANResolver, derived_vtep_mac
from pyfelix.config import RouteSource
from pyfelix.resources import FelixConfiguration
from pyfelix.syncer.api import Update
from tests.calc_harness import NODE_B_IP, VXLAN_POOL, Recorder, config, local, orders, pool, wep

REMOTE_BLOCK = Update(
    model.BlockKey("10.65.1.0/26"), model.AllocationBlock("10.65.1.0/26", "host:node-b")
)


LOCAL_BLOCK = Update(
    model.BlockKey("10.65.0.0/26"), model.AllocationBlock("10.65.0.0/26", "host:node-a")
)


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


def resolve_routes(
    order: Sequence[Update], route_source: RouteSource = RouteSource.CALICO_IPAM
) -> Recorder:
    """The routes node-a's resolver sent for ``order``, flushed after each update."""
    out = Recorder()
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver = L3RouteResolver("node-a", out, route_source=route_source)
    resolver.register_with(updates, local_updates)
    # With WorkloadIPs the resolver takes every workload from the main dispatcher.
    every = route_source is RouteSource.WORKLOAD_IPS
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
        out = resolve_routes([*order, *removals], route_source=RouteSource.WORKLOAD_IPS)
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
    resolver = L3RouteResolver("node-a", out, route_source=RouteSource.WORKLOAD_IPS)
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
