"""The L3 route resolver: the routes this node needs to know about, with their types.

Sources: IP pools (CIDR_INFO, carrying NAT-outgoing and the tunnel type), IPAM blocks affine to a
node (REMOTE_WORKLOAD, or LOCAL_WORKLOAD for our own), nodes' host IPs (REMOTE_HOST/LOCAL_HOST),
their VXLAN tunnel addresses (REMOTE_TUNNEL/LOCAL_TUNNEL) and our local workloads' addresses
(LOCAL_WORKLOAD with the interface). Routes are recomputed as a whole when a source changes and
only the differences are sent.
"""

from __future__ import annotations

import ipaddress

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.sequencer import EventSequencer


class L3RouteResolver:
    def __init__(self, hostname: str, sequencer: EventSequencer) -> None:
        self._hostname = hostname
        self._seq = sequencer
        self._pools: dict[str, model.IPPool] = {}
        self._blocks: dict[str, model.AllocationBlock] = {}
        self._host_ips: dict[str, str] = {}
        self._tunnels: dict[str, str] = {}
        self._workloads: dict[model.WorkloadEndpointKey, model.WorkloadEndpoint] = {}
        self._sent: dict[str, m.RouteUpdate] = {}
        self._dirty = False

    def on_pool(self, cidr: str, pool: model.IPPool | None) -> None:
        self._store(self._pools, cidr, pool)

    def on_block(self, cidr: str, block: model.AllocationBlock | None) -> None:
        self._store(self._blocks, cidr, block)

    def on_host_ip(self, node: str, value: model.ConfigValue | None) -> None:
        self._store(self._host_ips, node, value.value if value else None)

    def on_host_config(self, node: str, name: str, value: model.ConfigValue | None) -> None:
        if name == "IPv4VXLANTunnelAddr":
            self._store(self._tunnels, node, value.value if value else None)

    def on_local_workload(
        self, key: model.WorkloadEndpointKey, endpoint: model.WorkloadEndpoint | None
    ) -> None:
        self._store(self._workloads, key, endpoint)

    def _store(self, target: dict, key: object, value: object) -> None:  # type: ignore[type-arg]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
        self._dirty = True

    def _pool_for(self, cidr: str) -> model.IPPool | None:
        network = ipaddress.ip_network(cidr, strict=False)
        for pool in self._pools.values():
            pool_net = ipaddress.ip_network(pool.cidr)
            if network.version == pool_net.version and network.subnet_of(pool_net):  # type: ignore[arg-type]
                return pool
        return None

    def _has_vtep(self, node: str) -> bool:
        return bool(self._host_ips.get(node) and self._tunnels.get(node))

    def routes(self) -> dict[str, m.RouteUpdate]:
        wanted: dict[str, dict[str, object]] = {}

        def add(dst: str, route_type: str, **fields: object) -> None:
            entry = wanted.setdefault(dst, {"types": set()})
            types = entry["types"]
            assert isinstance(types, set)
            types.add(route_type)
            for name, value in fields.items():
                if value and not entry.get(name):
                    entry[name] = value

        for cidr in self._pools:
            add(cidr, "CIDR_INFO")
        for cidr, block in self._blocks.items():
            if block.host:
                local = block.host == self._hostname
                add(
                    cidr,
                    "LOCAL_WORKLOAD" if local else "REMOTE_WORKLOAD",
                    dst_node=block.host,
                    dst_node_ip=self._host_ips.get(block.host, ""),
                )
        for node, ip in self._host_ips.items():
            add(
                f"{ip}/32", "LOCAL_HOST" if node == self._hostname else "REMOTE_HOST", dst_node=node
            )
        for node, ip in self._tunnels.items():
            local = node == self._hostname
            add(
                f"{ip}/32",
                "LOCAL_TUNNEL" if local else "REMOTE_TUNNEL",
                dst_node=node,
                dst_node_ip=self._host_ips.get(node, ""),
            )
        for endpoint in self._workloads.values():
            for net in endpoint.ipv4_nets + endpoint.ipv6_nets:
                add(
                    net,
                    "LOCAL_WORKLOAD",
                    dst_node=self._hostname,
                    local_workload_interface=endpoint.name,
                )
        out = {}
        for dst, entry in wanted.items():
            pool = self._pool_for(dst)
            types = entry["types"]
            assert isinstance(types, set)
            tunnel = "vxlan" if pool is not None and pool.vxlan_mode else "none"
            remote = types & {"REMOTE_WORKLOAD", "REMOTE_TUNNEL"}
            if not remote and "CIDR_INFO" not in types:
                tunnel = "none"
            node = str(entry.get("dst_node", ""))
            if remote and tunnel == "vxlan" and not self._has_vtep(node):
                # Felix cannot route over VXLAN to a node whose VTEP it does not know yet.
                continue
            out[dst] = m.RouteUpdate(
                dst=dst,
                types=frozenset(types),
                dst_node=node,
                dst_node_ip=str(entry.get("dst_node_ip", "")),
                tunnel=tunnel,
                nat_outgoing=bool(pool is not None and pool.masquerade),
                local_workload_interface=str(entry.get("local_workload_interface", "")),
            )
        return out

    def flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        wanted = self.routes()
        for dst in set(self._sent) - set(wanted):
            self._seq.routes.remove(dst)
        for dst, route in wanted.items():
            if self._sent.get(dst) != route:
                self._seq.routes.update(dst, route)
        self._sent = wanted
