"""The endpoint manager with the fake kernel's interfaces: host endpoints placed on the
interfaces they govern at each apply, and the state the chains are rendered from naming
those interfaces (the resolution itself: test_host_endpoint_resolution.py)."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.endpoints import EndpointManager
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeInterfaces


def host_endpoint(name: str, interface: str, *addresses: str) -> m.HostEndpointUpdate:
    key = model.HostEndpointKey("node", name)
    endpoint = model.HostEndpoint(interface, addresses, (), FrozenMap(), ())
    return m.HostEndpointUpdate(key, endpoint, ())


async def test_an_endpoint_by_address_governs_the_interface_that_has_it() -> None:
    state, interfaces = NodeState(), FakeInterfaces()
    manager = EndpointManager(state, interfaces)
    state.apply(host_endpoint("by-address", "", "192.0.2.1"))
    await manager.complete_deferred_work()
    assert manager.placement == frozenset()
    assert list(manager.rendering_state().hosts) == [], "no interface has the address yet"
    interfaces.addresses_by_name["eth0"] = frozenset({"192.0.2.1"})
    await manager.complete_deferred_work()
    key = model.HostEndpointKey("node", "by-address")
    assert manager.placement == frozenset({("eth0", key)})
    (placed,) = manager.rendering_state().hosts.values()
    assert placed.endpoint.name == "eth0"


async def test_an_endpoint_by_name_is_rendered_under_its_name_until_it_appears() -> None:
    state, interfaces = NodeState(), FakeInterfaces()
    manager = EndpointManager(state, interfaces)
    state.apply(host_endpoint("named", "eth1"))
    await manager.complete_deferred_work()
    (update,) = manager.rendering_state().hosts.values()
    assert update.endpoint.name == "eth1"
    assert manager.placement == frozenset()
    interfaces.addresses_by_name["eth1"] = frozenset()
    await manager.complete_deferred_work()
    assert manager.placement == frozenset({("eth1", model.HostEndpointKey("node", "named"))})


async def test_without_host_endpoints_the_state_is_rendered_as_it_is() -> None:
    state = NodeState()
    manager = EndpointManager(state, FakeInterfaces())
    await manager.complete_deferred_work()
    assert manager.rendering_state() is state
