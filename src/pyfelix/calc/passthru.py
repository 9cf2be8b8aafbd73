"""Pass-through components: facts that reach the dataplane with little or no calculation.

Host IPs (IPv4 and IPv6, one message per node) become host metadata, IP pools become IPAM
pool updates, nodes' WireGuard keys become WireGuard endpoints, Kubernetes Services become
service updates, and the default BGPConfiguration's service CIDRs the global BGP
configuration update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_ip_of, passthrough_of, value_of
from pyfelix.calc.outputs import PassthruOutput
from pyfelix.syncer.api import Update

if TYPE_CHECKING:
    from pyfelix.resources import BGPConfiguration, Service


class DataplanePassthru:
    """What the dataplane needs as the datastore has it: host addresses, pools, WireGuard
    keys, Services and the default BGPConfiguration's service CIDRs, passed through to the
    sequencer with nothing computed."""

    def __init__(self, output: PassthruOutput) -> None:
        self._out = output
        #: node -> (IPv4 address, IPv6 address), either possibly "".
        self._host_ips: dict[str, tuple[str, str]] = {}

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.HostIPKey, self._on_host_ip_update)
        updates.register(model.HostIPv6Key, self._on_host_ip_update)
        updates.register(model.IPPoolKey, self._on_pool_update)
        updates.register(model.WireguardKey, self._on_wireguard_update)
        updates.register(model.ResourceKey, self._on_resource_update)

    def _on_host_ip_update(self, update: Update) -> None:
        self.on_host_ip(*host_ip_of(update))

    def _on_pool_update(self, update: Update) -> None:
        assert isinstance(update.key, model.IPPoolKey)
        self.on_ip_pool(update.key.cidr, value_of(update, model.IPPool))

    def _on_wireguard_update(self, update: Update) -> None:
        assert isinstance(update.key, model.WireguardKey)
        self.on_wireguard(update.key.hostname, value_of(update, model.Wireguard))

    def _on_resource_update(self, update: Update) -> None:
        service = passthrough_of(update, "Service")
        if service is not None:
            self.on_service(*service)
        bgp = passthrough_of(update, "BGPConfiguration")
        if bgp is not None and bgp[1] == "default":
            self.on_bgp_configuration(bgp[2])

    def on_bgp_configuration(self, config: BGPConfiguration | None) -> None:
        """Felix sends the default BGPConfiguration's service CIDRs (none without one)."""
        if config is None:
            self._out.on_global_bgp_config(m.GlobalBGPConfigUpdate())
            return
        spec = config.spec
        self._out.on_global_bgp_config(
            m.GlobalBGPConfigUpdate(
                tuple(b.cidr for b in spec.service_cluster_ips),
                tuple(b.cidr for b in spec.service_external_ips),
                tuple(b.cidr for b in spec.service_load_balancer_ips),
            )
        )

    def on_host_ip(self, hostname: str, value: model.ConfigValue | None, version: int = 4) -> None:
        v4, v6 = self._host_ips.get(hostname, ("", ""))
        address = value.value if value is not None else ""
        v4, v6 = (v4, address) if version == 6 else (address, v6)
        if not v4 and not v6:
            self._host_ips.pop(hostname, None)
            self._out.on_host_metadata_remove(hostname)
        else:
            self._host_ips[hostname] = (v4, v6)
            self._out.on_host_metadata_update(m.HostMetadataUpdate(hostname, v4, v6))

    def on_ip_pool(self, cidr: str, pool: model.IPPool | None) -> None:
        if pool is None:
            self._out.on_pool_remove(cidr)
        else:
            self._out.on_pool_update(m.IPAMPoolUpdate(cidr, pool))

    def on_wireguard(self, hostname: str, value: model.Wireguard | None) -> None:
        if value is None or not (value.public_key or value.public_key_v6):
            self._out.on_wireguard_remove(hostname)
        else:
            message = m.WireguardEndpointUpdate(
                hostname,
                value.public_key,
                value.interface_ipv4_addr if value.public_key else "",
                value.public_key_v6,
                value.interface_ipv6_addr if value.public_key_v6 else "",
            )
            self._out.on_wireguard_update(message)

    def on_service(self, namespace: str, name: str, service: Service | None) -> None:
        if service is None:
            self._out.on_service_remove(namespace, name)
            return
        spec = service.spec
        ips = spec.cluster_ips or ((spec.cluster_ip,) if spec.cluster_ip else ())
        ports = tuple((p.name, p.protocol or "TCP", p.port) for p in spec.ports)
        message = m.ServiceUpdate(name, namespace, spec.type or "ClusterIP", ips, ports)
        self._out.on_service_update(message)
