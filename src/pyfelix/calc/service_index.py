"""The service index: members of the IP sets that service rules refer to.

A rule naming a service matches that service's endpoints, taken from its EndpointSlices
(labelled ``kubernetes.io/service-name``): as ``ip,proto:port`` for a destination (the service's
ports) or as plain IPs for a source. Every address that parses as an IP is used, ready or not,
as Felix does.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, passthrough_of
from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.syncer.api import Update

if TYPE_CHECKING:
    from pyfelix.resources import EndpointSlice


def _slice_members(eps: EndpointSlice, include_ports: bool) -> set[str]:
    addresses = []
    for endpoint in eps.spec.endpoints:
        for address in endpoint.addresses:
            try:
                addresses.append(str(ipaddress.ip_address(address)))
            except ValueError:
                continue
    if not include_ports:
        return set(addresses)
    members: set[str] = set()
    for port in eps.spec.ports:
        if port.port is None:
            continue
        protocol = (port.protocol or "TCP").lower()
        members.update(f"{address},{protocol}:{port.port}" for address in addresses)
    return members


class ServiceIndex:
    """The members of Service IP sets (svc:, svcnoport:): each Service's endpoint addresses
    (and ports) from its EndpointSlices, counted as the member index counts."""

    def __init__(
        self,
        on_member_added: Callable[[str, str], None],
        on_member_removed: Callable[[str, str], None],
    ) -> None:
        self._added = on_member_added
        self._removed = on_member_removed
        self._slices: dict[str, dict[tuple[str, str], EndpointSlice]] = {}
        self._active: dict[str, IPSetData] = {}
        self._sent: dict[str, set[str]] = {}

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.ResourceKey, self._on_resource_update)

    def _on_resource_update(self, update: Update) -> None:
        endpoint_slice = passthrough_of(update, "EndpointSlice")
        if endpoint_slice is not None:
            self.on_endpoint_slice(*endpoint_slice)

    def on_ipset_active(self, data: IPSetData) -> None:
        if not data.service:
            return
        self._active[data.id] = data
        self._sent[data.id] = set()
        self._refresh(data.service)

    def on_ipset_inactive(self, data: IPSetData) -> None:
        if data.service:
            self._active.pop(data.id, None)
            self._sent.pop(data.id, None)

    def on_endpoint_slice(self, namespace: str, name: str, eps: EndpointSlice | None) -> None:
        """An EndpointSlice changed (None: deleted)."""
        for service, slices in list(self._slices.items()):
            if (namespace, name) in slices and (
                eps is None or f"{namespace}/{eps.service_name}" != service
            ):
                del slices[(namespace, name)]
                self._refresh(service)
        if eps is not None and eps.service_name:
            service = f"{namespace}/{eps.service_name}"
            self._slices.setdefault(service, {})[(namespace, name)] = eps
            self._refresh(service)

    def _refresh(self, service: str) -> None:
        slices = self._slices.get(service, {})
        for set_id, data in self._active.items():
            if data.service != service:
                continue
            wanted: set[str] = set()
            for eps in slices.values():
                wanted |= _slice_members(eps, data.include_ports)
            sent = self._sent[set_id]
            for member in sorted(wanted - sent):
                self._added(set_id, member)
            for member in sorted(sent - wanted):
                self._removed(set_id, member)
            self._sent[set_id] = wanted
