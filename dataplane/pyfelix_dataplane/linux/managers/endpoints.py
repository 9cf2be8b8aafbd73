"""Endpoints: host endpoints placed on the interfaces they govern, and the status of every local
endpoint reported back (EndpointReportingEnabled), as Felix's endpoint manager does.

The endpoint chains themselves are rendered with the tables; interface settings go with each
workload's route (routes manager).
"""

from __future__ import annotations

from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix_dataplane.linux.host_endpoints import (
    interface_excludes,
    resolve,
    without_excluded,
)
from pyfelix_dataplane.linux.kernel import InterfaceReading
from pyfelix_dataplane.linux.routes import IFF_RUNNING, IFF_UP
from pyfelix_dataplane.rules.settings import interface_prefixes
from pyfelix_dataplane.state import NodeState


def _status_update(key: Any, status: str) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusUpdate(key, status)
    return m.WorkloadEndpointStatusUpdate(key, status)


def _status_remove(key: Any) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusRemove(key)
    return m.WorkloadEndpointStatusRemove(key)


@attrs.define(eq=False)
class EndpointManager:
    state: NodeState
    interfaces: InterfaceReading
    to_calc: Any
    area: str = "routes"
    # The node's interfaces (with addresses) and which host endpoint governs each, as of the
    # last resolution (only looked up while there are host endpoints).
    _host_interfaces: dict[str, model.HostEndpointKey] = attrs.Factory(dict)
    _statuses: dict[Any, str] = attrs.Factory(dict)

    def invalidate(self) -> None:
        """Interfaces are re-read on every apply; nothing is remembered."""

    async def resolve(self) -> None:
        """Which interfaces each host endpoint governs, by name or by expected address."""
        if not self.state.hosts:
            self._host_interfaces = {}
            return
        named = tuple({u.endpoint.name for u in self.state.hosts.values()} - {"", "*"})
        found = await self.interfaces.addresses(named, interface_prefixes(self.state.config))
        excludes = interface_excludes(self.state.config.interface_exclude)
        self._host_interfaces = resolve(self.state.hosts, without_excluded(found, excludes))

    @property
    def placement(self) -> frozenset[tuple[str, model.HostEndpointKey]]:
        """Which interface each host endpoint governs: what the rendering adds to the state."""
        return frozenset(self._host_interfaces.items())

    def rendering_state(self) -> NodeState:
        """The state with each host endpoint placed on the interfaces it governs (several, for
        an endpoint matched by address; none, for one that lost its interface); named
        endpoints whose interface does not exist yet stay as named, "*" ones as they are."""
        if not self.state.hosts:
            return self.state
        governed = set(self._host_interfaces.values())
        hosts: dict[Any, m.HostEndpointUpdate] = {
            key: update
            for key, update in self.state.hosts.items()
            if update.endpoint.name == "*"
            or (
                update.endpoint.name
                and key not in governed
                and update.endpoint.name not in self._host_interfaces
            )
        }
        for interface, key in self._host_interfaces.items():
            update = self.state.hosts[key]
            endpoint = attrs.evolve(update.endpoint, name=interface)
            hosts[(key, interface)] = attrs.evolve(update, endpoint=endpoint)
        return attrs.evolve(self.state, hosts=hosts)

    def workload_statuses(self, route_results: dict[str, str]) -> dict[Any, str]:
        """ "up" when every address of a workload is routed, "down" while its interface is
        missing or down (what Felix reports when EndpointReportingEnabled)."""
        statuses = {}
        for key, update in self.state.workloads.items():
            nets = update.endpoint.ipv4_nets + update.endpoint.ipv6_nets
            waiting = any(route_results.get(net) == "waiting" for net in nets)
            statuses[key] = "down" if waiting or not nets else "up"
        return statuses

    def host_endpoint_statuses(self) -> dict[Any, str]:
        """As Felix: "up" when every interface the host endpoint governs is up and running,
        "down" otherwise, "error" when it governs none (no such interface, no interface with
        its expected addresses, or another endpoint won it). An all-interfaces ("*")
        endpoint is always resolved: "up"."""
        statuses = {}
        for key, update in self.state.hosts.items():
            if update.endpoint.name == "*":
                statuses[key] = "up"
                continue
            interfaces = [name for name, owner in self._host_interfaces.items() if owner == key]
            flags = [self.interfaces.flags(name) for name in interfaces]
            if not flags:
                statuses[key] = "error"
                continue
            running = IFF_UP | IFF_RUNNING
            up = all(found is not None and found[1] & running == running for found in flags)
            statuses[key] = "up" if up else "down"
        return statuses

    async def report(self, route_results: dict[str, str]) -> None:
        """Send the statuses that changed since the last report."""
        if not self.state.config.endpoint_reporting_enabled:
            return
        statuses = self.workload_statuses(route_results) | self.host_endpoint_statuses()
        for key, status in statuses.items():
            if self._statuses.get(key) != status:
                await self.to_calc.send(_status_update(key, status))
        for key in self._statuses.keys() - statuses.keys():
            await self.to_calc.send(_status_remove(key))
        self._statuses = statuses
