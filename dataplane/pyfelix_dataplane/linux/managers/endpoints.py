"""Endpoints: host endpoints placed on the interfaces they govern, as Felix's endpoint manager
resolves them before the chains are rendered.

The endpoint chains themselves are rendered with the tables; interface settings go with each
workload's route (routes manager); the endpoints' status is the status manager's.
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
from pyfelix_dataplane.rules.settings import interface_prefixes
from pyfelix_dataplane.state import NodeState


@attrs.define(eq=False)
class EndpointManager:
    state: NodeState
    interfaces: InterfaceReading
    area: str = "routes"
    # The node's interfaces (with addresses) and which host endpoint governs each, as of the
    # last resolution (only looked up while there are host endpoints).
    _host_interfaces: dict[str, model.HostEndpointKey] = attrs.Factory(dict)
    _statuses: dict[Any, str] = attrs.Factory(dict)

    def invalidate(self) -> None:
        """Interfaces are re-read on every apply; nothing is remembered."""

    def on_update(self, msg: m.ToDataplane) -> None:
        """Nothing to note: the interfaces change without messages, and are read each time."""

    @property
    def host_interfaces(self) -> dict[str, model.HostEndpointKey]:
        """Which host endpoint governs each interface, as of the last resolution."""
        return self._host_interfaces

    async def complete_deferred_work(self) -> None:
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
