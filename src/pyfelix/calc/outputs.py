"""What the calculators emit: one narrow interface per kind of output, implemented by the event
sequencer (calc/sequencer.py), as Felix's calculators write to small callback interfaces.

A calculator depends on the interface it writes to, not on the sequencer, so its tests can
record its output with a plain object and the graph can be rewired without touching it.
"""

from __future__ import annotations

from typing import Protocol

from pyfelix import messages as m
from pyfelix import model


class ConfigOutput(Protocol):
    """Where the config batcher sends its configuration (the event sequencer)."""

    def on_config_update(self, config: dict[str, str]) -> None: ...

    def on_datastore_not_ready(self) -> None: ...


class EncapsulationOutput(Protocol):
    """Where the encapsulation resolver sends its verdict."""

    def on_encapsulation(self, encapsulation: m.Encapsulation) -> None: ...


class IPSetOutput(Protocol):
    """Where IP sets and their members go (the event sequencer)."""

    def on_ipset_added(self, set_id: str, set_type: str) -> None: ...

    def on_ipset_member_added(self, set_id: str, member: str) -> None: ...

    def on_ipset_member_removed(self, set_id: str, member: str) -> None: ...

    def on_ipset_removed(self, set_id: str) -> None: ...


class RulesOutput(Protocol):
    """Active policies and profiles, with their rules' IP sets resolved."""

    def on_policy_update(self, update: m.ActivePolicyUpdate) -> None: ...

    def on_policy_remove(self, policy: m.PolicyID) -> None: ...

    def on_profile_update(self, update: m.ActiveProfileUpdate) -> None: ...

    def on_profile_remove(self, profile: str) -> None: ...


class EndpointOutput(Protocol):
    """Local endpoints with their resolved tiers."""

    def on_endpoint_update(
        self, update: m.WorkloadEndpointUpdate | m.HostEndpointUpdate
    ) -> None: ...

    def on_endpoint_remove(self, key: model.EndpointKey) -> None: ...


class RouteOutput(Protocol):
    """Where the route resolver sends routes and their removals."""

    def on_route_update(self, update: m.RouteUpdate) -> None: ...

    def on_route_remove(self, dst: str) -> None: ...


class VtepOutput(Protocol):
    """Where the VXLAN resolver sends VTEPs and their removals."""

    def on_vtep_update(self, update: m.VXLANTunnelEndpointUpdate) -> None: ...

    def on_vtep_remove(self, node: str) -> None: ...


class PassthruOutput(Protocol):
    """Facts that reach the dataplane nearly as they are."""

    def on_host_metadata_update(self, update: m.HostMetadataUpdate) -> None: ...

    def on_host_metadata_remove(self, hostname: str) -> None: ...

    def on_pool_update(self, update: m.IPAMPoolUpdate) -> None: ...

    def on_pool_remove(self, cidr: str) -> None: ...

    def on_wireguard_update(self, update: m.WireguardEndpointUpdate) -> None: ...

    def on_wireguard_remove(self, hostname: str) -> None: ...

    def on_service_update(self, update: m.ServiceUpdate) -> None: ...

    def on_service_remove(self, namespace: str, name: str) -> None: ...

    def on_global_bgp_config(self, update: m.GlobalBGPConfigUpdate) -> None: ...


class NamespaceOutput(Protocol):
    """Namespaces and service accounts, decoded from their profiles."""

    def on_namespace_update(self, update: m.NamespaceUpdate) -> None: ...

    def on_namespace_remove(self, namespace: str) -> None: ...

    def on_service_account_update(self, update: m.ServiceAccountUpdate) -> None: ...

    def on_service_account_remove(self, account: m.ServiceAccountID) -> None: ...
