"""The VXLAN manager with the fake kernel's devices: this node's VTEP device per IP version
and its remote VTEPs, written when a message changes them, retried while waiting."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix_dataplane.linux.managers.vxlan import VxlanManager
from pyfelix_dataplane.linux.vxlan import RemoteVtep
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeDevices, FakeNode

LOCAL = m.VXLANTunnelEndpointUpdate(
    "node-a",
    "66:00:00:00:00:01",
    "10.65.0.0",
    "192.0.2.1",
    "66:00:00:00:01:01",
    "fd65::",
    "fd00::1",
)
REMOTE = m.VXLANTunnelEndpointUpdate("node-b", "66:00:00:00:00:02", "10.65.1.0", "192.0.2.2")


def managed() -> tuple[NodeState, FakeNode, VxlanManager]:
    state, node = NodeState(), FakeNode()
    return state, node, VxlanManager(state, FakeDevices(node), "node-a")


def send(state: NodeState, manager: VxlanManager, *messages: m.ToDataplane) -> None:
    for msg in messages:
        state.apply(msg)
        manager.on_update(msg)


async def test_each_version_has_its_device_while_vxlan_is_on_for_it() -> None:
    state, node, manager = managed()
    send(state, manager, LOCAL, REMOTE, m.Encapsulation(False, True, vxlan_enabled_v6=False))
    await manager.complete_deferred_work()
    device, remotes = node.vxlan
    assert device is not None
    assert device.tunnel_ip == "10.65.0.0"
    assert remotes == (RemoteVtep("10.65.1.0", "66:00:00:00:00:02", "192.0.2.2"),)
    assert node.vxlan_v6 == (None, ())
    assert manager.on == frozenset({4})
    send(state, manager, m.Encapsulation(False, True, vxlan_enabled_v6=True))
    await manager.complete_deferred_work()
    assert node.vxlan_v6[0] is not None
    assert node.vxlan_v6[0].tunnel_ip == "fd65::"
    assert manager.on == frozenset({4, 6})


async def test_a_remote_vtep_leaving_takes_its_neighbour_with_it() -> None:
    state, node, manager = managed()
    send(state, manager, LOCAL, REMOTE, m.Encapsulation(False, True))
    await manager.complete_deferred_work()
    send(state, manager, m.VXLANTunnelEndpointRemove("node-b"))
    await manager.complete_deferred_work()
    assert node.vxlan[1] == ()


async def test_vxlan_turned_off_removes_the_device() -> None:
    state, node, manager = managed()
    send(state, manager, LOCAL, m.Encapsulation(False, True))
    await manager.complete_deferred_work()
    send(state, manager, m.Encapsulation(False, False))
    await manager.complete_deferred_work()
    assert node.vxlan == (None, ())
    assert manager.on == frozenset()
