"""The routes manager with the fake kernel's route writer, as Felix's route manager tests
drive it: messages in through ``on_update``, routes out through ``complete_deferred_work``."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.ipip import IpipManager
from pyfelix_dataplane.linux.managers.routes import RoutesManager
from pyfelix_dataplane.linux.managers.vxlan import VxlanManager
from pyfelix_dataplane.linux.routes import RouteTarget
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeDevices, FakeNode, FakeRoutes

KEY = model.WorkloadEndpointKey("node-a", "k8s", "ns/pod", "eth0")
ENDPOINT = model.WorkloadEndpoint("active", "cali1", "", (), ("10.65.0.5/32",), (), FrozenMap())
REMOTE_BLOCK = m.RouteUpdate(
    "10.65.1.0/26",
    frozenset({"REMOTE_WORKLOAD"}),
    dst_node="node-b",
    dst_node_ip="192.0.2.2",
    tunnel="vxlan",
)
VTEPS = (
    m.VXLANTunnelEndpointUpdate("node-a", "66:00:00:00:00:01", "10.65.0.0", "192.0.2.1"),
    m.VXLANTunnelEndpointUpdate("node-b", "66:00:00:00:00:02", "10.65.1.0", "192.0.2.2"),
)


class Managers:
    """The routes manager with the VXLAN and IPIP managers it reads, over one state."""

    def __init__(self) -> None:
        self.node = FakeNode()
        self.state = NodeState()
        devices = FakeDevices(self.node)
        self.vxlan = VxlanManager(self.state, devices, "node-a")
        self.ipip = IpipManager(self.state, devices)
        self.writer = FakeRoutes(self.node)
        self.routes = RoutesManager(
            self.state, self.writer, "node-a", vxlan=self.vxlan, ipip=self.ipip
        )

    def send(self, *messages: m.ToDataplane) -> None:
        for msg in messages:
            self.state.apply(msg)
            for manager in (self.vxlan, self.ipip, self.routes):
                manager.on_update(msg)

    async def complete(self) -> None:
        for manager in (self.vxlan, self.ipip, self.routes):
            await manager.complete_deferred_work()

    def writes(self) -> int:
        return self.node.log.count("routes")


async def test_a_local_workload_is_routed_through_its_interface() -> None:
    r = Managers()
    r.send(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    await r.complete()
    assert r.node.routes == {"10.65.0.5/32": RouteTarget("cali1", priority=1024)}
    r.send(m.WorkloadEndpointRemove(KEY))
    await r.complete()
    assert r.node.routes == {}


async def test_remote_blocks_go_through_the_vxlan_device_once_it_is_up() -> None:
    """The routes follow the VXLAN manager's device, which the routes manager reads."""
    r = Managers()
    r.send(REMOTE_BLOCK, *VTEPS)
    await r.complete()
    assert "10.65.1.0/26" not in r.node.routes, "no VXLAN yet: no cluster routes"
    r.send(m.Encapsulation(ipip_enabled=False, vxlan_enabled=True))
    await r.complete()
    assert r.node.routes["10.65.1.0/26"] == RouteTarget("vxlan.calico", gateway="10.65.1.0")


async def test_nothing_is_written_again_until_a_message_touches_the_routes() -> None:
    """IP set members and policies do not move routes: the writer is not called for them;
    a refresh (``invalidate``) makes the next apply write again."""
    r = Managers()
    r.send(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    await r.complete()
    writes = r.writes()
    r.send(m.IPSetUpdate("s:x", "hash:net", frozenset({"10.0.0.1/32"})))
    await r.complete()
    assert r.writes() == writes
    r.routes.invalidate()
    await r.complete()
    assert r.writes() == writes + 1


async def test_a_route_waiting_for_its_interface_is_tried_on_every_apply() -> None:
    r = Managers()
    r.writer.missing.add("cali1")
    r.send(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    await r.complete()
    assert r.routes.results == {"10.65.0.5/32": "waiting"}
    r.writer.missing.clear()
    await r.complete()
    assert r.routes.results == {"10.65.0.5/32": "added"}


NO_ENCAP_BLOCK = m.RouteUpdate(
    "10.70.1.0/26",
    frozenset({"REMOTE_WORKLOAD"}),
    dst_node="node-b",
    dst_node_ip="192.0.2.2",
    tunnel="none",
)
NO_ENCAP_POOL = m.IPAMPoolUpdate(
    "pool", model.IPPool("10.70.0.0/16", "Never", "Never", False, False)
)


async def test_unencapsulated_pools_are_routed_as_program_cluster_routes_says() -> None:
    """Felix's default (EnabledIPIPOnly) leaves an unencapsulated pool's routes to BIRD;
    Enabled and EnabledNoEncapOnly route each remote block straight to its node."""
    r = Managers()
    r.send(NO_ENCAP_POOL, NO_ENCAP_BLOCK)
    await r.complete()
    assert "10.70.1.0/26" not in r.node.routes
    for setting in ("Enabled", "EnabledNoEncapOnly"):
        r.send(m.ConfigUpdate(FrozenMap({"ProgramClusterRoutes": setting})))
        await r.complete()
        assert r.node.routes["10.70.1.0/26"] == RouteTarget("", gateway="192.0.2.2"), setting
    r.send(m.IPAMPoolRemove("pool"))
    await r.complete()
    assert "10.70.1.0/26" not in r.node.routes, "no unencapsulated pool left"
