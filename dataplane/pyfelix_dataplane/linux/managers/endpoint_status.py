"""Endpoint status: each local workload's and host endpoint's "up", "down" or "error" sent
back (for the datastore with EndpointReportingEnabled, for the status files with
EndpointStatusPathPrefix), as Felix's endpoint manager reports it once an apply has routed
the workloads and placed the host endpoints; only what changed since the last report.
"""

from __future__ import annotations

from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix.messages import EndpointStatus
from pyfelix_dataplane.driver import ToCalc
from pyfelix_dataplane.linux.kernel import InterfaceReading
from pyfelix_dataplane.linux.managers.endpoints import EndpointManager
from pyfelix_dataplane.linux.managers.routes import RoutesManager
from pyfelix_dataplane.linux.routes import IFF_RUNNING, IFF_UP
from pyfelix_dataplane.state import NodeState

UP, DOWN, ERROR = EndpointStatus.UP, EndpointStatus.DOWN, EndpointStatus.ERROR


def _status_update(state: NodeState, key: Any, status: EndpointStatus) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusUpdate(key, status)
    return m.WorkloadEndpointStatusUpdate(key, status, state.workloads[key].endpoint)


def _status_remove(key: Any) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusRemove(key)
    return m.WorkloadEndpointStatusRemove(key)


@attrs.define(eq=False)
class EndpointStatusManager:
    state: NodeState
    interfaces: InterfaceReading
    to_calc: ToCalc
    #: Where the host endpoints were placed, and how the workloads' routes went.
    endpoints: EndpointManager
    routes: RoutesManager
    area: str = "routes"
    #: Per endpoint, the status last sent and (for a workload) the endpoint it was sent for.
    _statuses: dict[Any, tuple[EndpointStatus, model.WorkloadEndpoint | None]] = attrs.Factory(dict)

    def invalidate(self) -> None:
        """Statuses are worked out on every apply; nothing is remembered of the kernel."""

    def on_update(self, msg: m.ToDataplane) -> None:
        """Nothing to note: statuses follow the interfaces and routes, not messages alone."""

    def workload_statuses(self, route_results: dict[str, str]) -> dict[Any, EndpointStatus]:
        """ "up" when every address of a workload is routed, "down" while its interface is
        missing or down (what Felix reports when EndpointReportingEnabled)."""
        statuses = {}
        for key, update in self.state.workloads.items():
            nets = update.endpoint.ipv4_nets + update.endpoint.ipv6_nets
            waiting = any(route_results.get(net) == "waiting" for net in nets)
            statuses[key] = DOWN if waiting or not nets else UP
        return statuses

    def host_endpoint_statuses(self) -> dict[Any, EndpointStatus]:
        """As Felix: "up" when every interface the host endpoint governs is up and running,
        "down" otherwise, "error" when it governs none (no such interface, no interface with
        its expected addresses, or another endpoint won it). An all-interfaces ("*")
        endpoint is always resolved: "up"."""
        statuses = {}
        for key, update in self.state.hosts.items():
            if update.endpoint.name == "*":
                statuses[key] = UP
                continue
            placed = self.endpoints.host_interfaces.items()
            interfaces = [name for name, owner in placed if owner == key]
            flags = [self.interfaces.flags(name) for name in interfaces]
            if not flags:
                statuses[key] = ERROR
                continue
            running = IFF_UP | IFF_RUNNING
            up = all(found is not None and found[1] & running == running for found in flags)
            statuses[key] = UP if up else DOWN
        return statuses

    async def complete_deferred_work(self) -> None:
        """Send the statuses that changed since the last report: for the datastore
        (EndpointReportingEnabled) or for the status files (EndpointStatusPathPrefix)."""
        config = self.state.config
        if not (config.endpoint_reporting_enabled or config.endpoint_status_path_prefix):
            return
        statuses = self.workload_statuses(self.routes.results) | self.host_endpoint_statuses()
        # A workload's status goes again when the endpoint changes (its status file holds
        # its interface and addresses).
        reported = {
            key: (
                status,
                self.state.workloads[key].endpoint if key in self.state.workloads else None,
            )
            for key, status in statuses.items()
        }
        for key, status in statuses.items():
            if self._statuses.get(key) != reported[key]:
                await self.to_calc.send(_status_update(self.state, key, status))
        for key in self._statuses.keys() - statuses.keys():
            await self.to_calc.send(_status_remove(key))
        self._statuses = reported
