"""The IPIP manager with the fake kernel's devices: tunl0 with this node's IPIP address while
a pool has IPIP on, gone when none has; rewritten after a refresh."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.managers.ipip import IpipManager
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeDevices, FakeNode


def send(state: NodeState, manager: IpipManager, *messages: m.ToDataplane) -> None:
    for msg in messages:
        state.apply(msg)
        manager.on_update(msg)


async def test_tunl0_follows_the_encapsulation_and_the_node_address() -> None:
    state, node = NodeState(), FakeNode()
    manager = IpipManager(state, FakeDevices(node))
    send(state, manager, m.Encapsulation(ipip_enabled=True, vxlan_enabled=False))
    await manager.complete_deferred_work()
    assert node.ipip is None, "no IPIP address yet"
    assert not manager.on
    send(state, manager, m.ConfigUpdate(FrozenMap({"IpInIpTunnelAddr": "10.65.0.1"})))
    await manager.complete_deferred_work()
    assert node.ipip == IpipDevice(address="10.65.0.1", mtu=0)
    assert manager.on
    send(state, manager, m.Encapsulation(ipip_enabled=False, vxlan_enabled=False))
    await manager.complete_deferred_work()
    assert node.ipip is None
    assert not manager.on


async def test_a_refresh_writes_the_device_again() -> None:
    state, node = NodeState(), FakeNode()
    manager = IpipManager(state, FakeDevices(node))
    send(
        state,
        manager,
        m.Encapsulation(ipip_enabled=True, vxlan_enabled=False),
        m.ConfigUpdate(FrozenMap({"IpInIpTunnelAddr": "10.65.0.1"})),
    )
    await manager.complete_deferred_work()
    node.ipip = None  # another program deleted it
    await manager.complete_deferred_work()
    assert node.ipip is None, "nothing changed as far as the manager knows"
    manager.invalidate()
    await manager.complete_deferred_work()
    assert node.ipip == IpipDevice(address="10.65.0.1", mtu=0)
