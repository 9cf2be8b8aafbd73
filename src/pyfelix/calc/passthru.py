"""Pass-through components: facts that reach the dataplane with little or no calculation.

Host IPs become host metadata, IP pools become IPAM pool updates, nodes' WireGuard keys become
WireGuard endpoints, and Kubernetes Services become service updates.
"""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.resources import Service


class DataplanePassthru:
    def __init__(self, sequencer: EventSequencer) -> None:
        self._seq = sequencer

    def on_host_ip(self, hostname: str, value: model.ConfigValue | None) -> None:
        if value is None:
            self._seq.host_metadata.remove(hostname)
        else:
            self._seq.host_metadata.update(hostname, m.HostMetadataUpdate(hostname, value.value))

    def on_ip_pool(self, cidr: str, pool: model.IPPool | None) -> None:
        if pool is None:
            self._seq.pools.remove(cidr)
        else:
            self._seq.pools.update(cidr, m.IPAMPoolUpdate(cidr, pool))

    def on_wireguard(self, hostname: str, value: model.Wireguard | None) -> None:
        if value is None or not value.public_key:
            self._seq.wireguard.remove(hostname)
        else:
            message = m.WireguardEndpointUpdate(
                hostname, value.public_key, value.interface_ipv4_addr
            )
            self._seq.wireguard.update(hostname, message)

    def on_service(self, namespace: str, name: str, service: Service | None) -> None:
        key = (namespace, name)
        if service is None:
            self._seq.services.remove(key)
            return
        spec = service.spec
        ips = spec.cluster_ips or ((spec.cluster_ip,) if spec.cluster_ip else ())
        ports = tuple((p.name, p.protocol or "TCP", p.port) for p in spec.ports)
        message = m.ServiceUpdate(name, namespace, spec.type or "ClusterIP", ips, ports)
        self._seq.services.update(key, message)
