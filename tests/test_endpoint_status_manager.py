"""The endpoint status manager with a fake kernel, as Felix's endpoint manager tests drive
its status reporting: a status goes out when it changes, and only then."""

from __future__ import annotations

import attrs
import trio

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.endpoint_status import EndpointStatusManager
from pyfelix_dataplane.linux.managers.endpoints import EndpointManager
from pyfelix_dataplane.linux.managers.routes import RoutesManager
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeInterfaces, FakeNode, FakeRoutes

KEY = model.WorkloadEndpointKey("node", "k8s", "ns/pod", "eth0")
ENDPOINT = model.WorkloadEndpoint("active", "cali1", "", (), ("10.0.0.1/32",), (), FrozenMap())
HOST_KEY = model.HostEndpointKey("node", "eth9")


@attrs.define
class Reported:
    """The status manager and what it sent."""

    state: NodeState
    interfaces: FakeInterfaces
    routes: RoutesManager
    endpoints: EndpointManager
    manager: EndpointStatusManager
    received: trio.MemoryReceiveChannel[m.FromDataplane]

    def taken(self) -> list[m.FromDataplane]:
        out = []
        while True:
            try:
                out.append(self.received.receive_nowait())
            except trio.WouldBlock:
                return out


def reported(reporting: bool = True, prefix: str = "/var/run/calico") -> Reported:
    state = NodeState()
    config = {
        "EndpointReportingEnabled": str(reporting).lower(),
        "EndpointStatusPathPrefix": prefix,
    }
    state.apply(m.ConfigUpdate(FrozenMap(config)))
    send, receive = trio.open_memory_channel[m.FromDataplane](100)
    interfaces = FakeInterfaces()
    routes = RoutesManager(state, FakeRoutes(FakeNode()), "node")
    endpoints = EndpointManager(state, interfaces)
    manager = EndpointStatusManager(state, interfaces, send, endpoints, routes)
    return Reported(state, interfaces, routes, endpoints, manager, receive)


def test_a_workload_is_up_once_routed_and_down_while_waiting() -> None:
    r = reported()
    r.state.apply(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    assert r.manager.workload_statuses({"10.0.0.1/32": "added"}) == {KEY: "up"}
    assert r.manager.workload_statuses({"10.0.0.1/32": "waiting"}) == {KEY: "down"}


async def test_statuses_are_sent_when_they_change_and_removed_when_endpoints_go() -> None:
    r = reported()
    r.state.apply(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    r.routes.results = {"10.0.0.1/32": "waiting"}
    await r.manager.complete_deferred_work()
    assert r.taken() == [m.WorkloadEndpointStatusUpdate(KEY, m.EndpointStatus.DOWN)]
    await r.manager.complete_deferred_work()
    assert r.taken() == []
    r.routes.results = {"10.0.0.1/32": "added"}
    await r.manager.complete_deferred_work()
    assert r.taken() == [m.WorkloadEndpointStatusUpdate(KEY, m.EndpointStatus.UP)]
    r.state.apply(m.WorkloadEndpointRemove(KEY))
    await r.manager.complete_deferred_work()
    assert r.taken() == [m.WorkloadEndpointStatusRemove(KEY)]


async def test_a_host_endpoint_without_its_interface_is_in_error_until_it_appears() -> None:
    r = reported()
    host = model.HostEndpoint("eth9", (), (), FrozenMap(), ())
    r.state.apply(m.HostEndpointUpdate(HOST_KEY, host, ()))
    await r.endpoints.complete_deferred_work()
    await r.manager.complete_deferred_work()
    assert r.taken() == [m.HostEndpointStatusUpdate(HOST_KEY, m.EndpointStatus.ERROR)]
    r.interfaces.addresses_by_name["eth9"] = frozenset({"192.0.2.9"})
    await r.endpoints.complete_deferred_work()
    await r.manager.complete_deferred_work()
    assert r.taken() == [m.HostEndpointStatusUpdate(HOST_KEY, m.EndpointStatus.UP)]


async def test_statuses_go_for_the_datastore_or_the_status_files_else_nothing() -> None:
    """EndpointReportingEnabled wants them for the datastore, EndpointStatusPathPrefix (set
    by default) for the files Calico's CNI plugin reads; with neither, nothing is sent."""
    for reporting, prefix, sent in ((False, "", False), (False, "/run/x", True), (True, "", True)):
        r = reported(reporting, prefix)
        r.state.apply(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
        r.routes.results = {"10.0.0.1/32": "added"}
        await r.manager.complete_deferred_work()
        assert bool(r.taken()) is sent, (reporting, prefix)


async def test_a_changed_endpoint_is_sent_again_with_its_data() -> None:
    r = reported()
    r.state.apply(m.WorkloadEndpointUpdate(KEY, ENDPOINT, ()))
    r.routes.results = {"10.0.0.1/32": "added"}
    await r.manager.complete_deferred_work()
    (first,) = r.taken()
    assert isinstance(first, m.WorkloadEndpointStatusUpdate)
    assert first.endpoint == ENDPOINT
    moved = attrs.evolve(ENDPOINT, mac="ee:ee:ee:ee:ee:ee")
    r.state.apply(m.WorkloadEndpointUpdate(KEY, moved, ()))
    await r.manager.complete_deferred_work()
    (again,) = r.taken()
    assert isinstance(again, m.WorkloadEndpointStatusUpdate)
    assert again.endpoint == moved
