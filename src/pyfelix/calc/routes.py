"""The L3 route resolver: the routes this node needs to know about, with their types.

Sources: IP pools (CIDR_INFO, carrying NAT-outgoing and the tunnel type), IPAM blocks affine to a
node (REMOTE_WORKLOAD, or LOCAL_WORKLOAD for our own) and, as Felix, a /32 (/128) of its own for
each address a block allocated to another node than its affinity's (borrowed: traffic to it
must go to the node that has it, not to the block's), nodes' host IPs (REMOTE_HOST/LOCAL_HOST),
their VXLAN (IPv4 and IPv6), IPIP and WireGuard interface addresses
(REMOTE_TUNNEL/LOCAL_TUNNEL) and our
local workloads' addresses (LOCAL_WORKLOAD with the interface). A route to a node carries that
node's address of the route's family. Routes are recomputed as a whole when a source
changes and only the differences are sent.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable, Mapping
from typing import TypeVar

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_config_of, host_ip_of, value_of
from pyfelix.calc.outputs import RouteOutput
from pyfelix.config import RouteSource
from pyfelix.ipnet import IPNetwork
from pyfelix.syncer.api import Update

#: Felix's ref types (RefTypeWEP, RefTypeWireguard, RefTypeIPIP, RefTypeVXLAN): a workload's
#: claim sorts first on a node, then WireGuard's interface address, IPIP's, then VXLAN's.
_WORKLOAD_CLAIM, _WIREGUARD_CLAIM, _IPIP_CLAIM, _TUNNEL_CLAIM = 0, 1, 2, 3
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _pool_tunnel(pool: model.IPPool | None) -> str:
    """The pool's encapsulation (Felix's IpPoolType): VXLAN's when both are set, as Felix."""
    if pool is None:
        return "none"
    if pool.vxlan_mode:
        return "vxlan"
    return "ipip" if pool.ipip_mode else "none"


def _within(network: IPNetwork, pool: IPNetwork) -> bool:
    if isinstance(network, ipaddress.IPv4Network) and isinstance(pool, ipaddress.IPv4Network):
        return network.subnet_of(pool)
    if isinstance(network, ipaddress.IPv6Network) and isinstance(pool, ipaddress.IPv6Network):
        return network.subnet_of(pool)
    return False


def _non_affine_allocations(block: model.AllocationBlock) -> list[tuple[str, str]]:
    """(address as /32 or /128, node) of each allocation attributed to another node than the
    block's affinity (every one, for a block without affinity): libcalico's
    NonAffineAllocations, the node being the attribute's ``secondary.node``."""
    found = []
    network = ipaddress.ip_network(block.cidr, strict=False)
    length = network.max_prefixlen
    for ordinal, index in enumerate(block.allocations):
        if index is None or index >= len(block.attributes):
            continue
        owner = block.attributes[index].get("secondary")
        node = owner.get("node", "") if isinstance(owner, Mapping) else ""
        if block.host and node == block.host:
            continue
        if not isinstance(node, str) or not node or ordinal >= network.num_addresses:
            continue  # Felix warns: the node it belongs to was not recorded in IPAM
        found.append((f"{network.network_address + ordinal}/{length}", node))
    return found


class L3RouteResolver:
    """``route_source``: Felix's RouteSource. CalicoIPAM (the default) routes IPAM blocks and
    this node's workloads; WorkloadIPs routes every workload's addresses to its node instead,
    blocks ignored (for clusters whose IPAM is not Calico's)."""

    def __init__(
        self,
        hostname: str,
        output: RouteOutput,
        route_source: RouteSource = RouteSource.CALICO_IPAM,
    ) -> None:
        self._hostname = hostname
        self._out = output
        self._workload_ips = route_source is RouteSource.WORKLOAD_IPS
        self._pools: dict[str, model.IPPool] = {}
        self._blocks: dict[str, model.AllocationBlock] = {}
        self._host_ips: dict[str, str] = {}
        self._host_ips6: dict[str, str] = {}
        self._networks: dict[str, str] = {}
        self._networks6: dict[str, str] = {}
        self._tunnels: dict[str, str] = {}
        self._tunnels6: dict[str, str] = {}
        self._ipip_tunnels: dict[str, str] = {}
        #: node -> its WireGuard interface addresses (IPv4, IPv6; either may be "").
        self._wireguard: dict[str, tuple[str, str]] = {}
        self._workloads: dict[model.WorkloadEndpointKey, model.WorkloadEndpoint] = {}
        self._sent: dict[str, m.RouteUpdate] = {}
        self._dirty = False

    def register_with(self, updates: Dispatcher, local_updates: Dispatcher) -> None:
        updates.register(model.IPPoolKey, self._on_pool_update)
        if self._workload_ips:
            updates.register(model.WorkloadEndpointKey, self._on_local_workload_update)
        else:
            updates.register(model.BlockKey, self._on_block_update)
            local_updates.register(model.WorkloadEndpointKey, self._on_local_workload_update)
        updates.register(model.HostIPKey, self._on_host_ip_update)
        updates.register(model.HostIPv6Key, self._on_host_ip_update)
        updates.register(model.HostNetworkKey, self._on_host_network_update)
        updates.register(model.HostNetworkV6Key, self._on_host_network_update)
        updates.register(model.HostConfigKey, self._on_host_config_update)
        updates.register(model.WireguardKey, self._on_wireguard_update)

    def _on_pool_update(self, update: Update) -> None:
        assert isinstance(update.key, model.IPPoolKey)
        self.on_pool(update.key.cidr, value_of(update, model.IPPool))

    def _on_block_update(self, update: Update) -> None:
        assert isinstance(update.key, model.BlockKey)
        self.on_block(update.key.cidr, value_of(update, model.AllocationBlock))

    def _on_host_ip_update(self, update: Update) -> None:
        self.on_host_ip(*host_ip_of(update))

    def _on_host_network_update(self, update: Update) -> None:
        key = update.key
        assert isinstance(key, model.HostNetworkKey | model.HostNetworkV6Key)
        value = value_of(update, model.ConfigValue)
        target = self._networks6 if isinstance(key, model.HostNetworkV6Key) else self._networks
        self._store(target, key.hostname, value.value if value else None)

    def _on_host_config_update(self, update: Update) -> None:
        self.on_host_config(*host_config_of(update))

    def _on_wireguard_update(self, update: Update) -> None:
        assert isinstance(update.key, model.WireguardKey)
        value = value_of(update, model.Wireguard)
        addresses = (value.interface_ipv4_addr, value.interface_ipv6_addr) if value else None
        self._store(
            self._wireguard, update.key.hostname, addresses if any(addresses or ()) else None
        )

    def _on_local_workload_update(self, update: Update) -> None:
        assert isinstance(update.key, model.WorkloadEndpointKey)
        self.on_local_workload(update.key, value_of(update, model.WorkloadEndpoint))

    def on_pool(self, cidr: str, pool: model.IPPool | None) -> None:
        self._store(self._pools, cidr, pool)

    def on_block(self, cidr: str, block: model.AllocationBlock | None) -> None:
        self._store(self._blocks, cidr, block)

    def on_host_ip(self, node: str, value: model.ConfigValue | None, version: int = 4) -> None:
        target = self._host_ips6 if version == 6 else self._host_ips
        self._store(target, node, value.value if value else None)

    def on_host_config(self, node: str, name: str, value: model.ConfigValue | None) -> None:
        if name == "IPv4VXLANTunnelAddr":
            self._store(self._tunnels, node, value.value if value else None)
        elif name == "IPv6VXLANTunnelAddr":
            self._store(self._tunnels6, node, value.value if value else None)
        elif name == "IpInIpTunnelAddr":
            self._store(self._ipip_tunnels, node, value.value if value else None)

    def on_local_workload(
        self, key: model.WorkloadEndpointKey, endpoint: model.WorkloadEndpoint | None
    ) -> None:
        self._store(self._workloads, key, endpoint)

    def _store(self, target: dict[K, V], key: K, value: V | None) -> None:
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
        self._dirty = True

    def _pool_for(self, cidr: str) -> model.IPPool | None:
        network = ipaddress.ip_network(cidr, strict=False)
        for pool in self._pools.values():
            pool_net = ipaddress.ip_network(pool.cidr)
            if _within(network, pool_net):
                return pool
        return None

    def _node_ip(self, node: str, dst: str) -> str:
        """``node``'s address of ``dst``'s family ("" if unknown)."""
        return (self._host_ips6 if ":" in dst else self._host_ips).get(node, "")

    def _in_our_subnet(self, node: str, dst: str) -> bool:
        """Whether ``node``'s IP of ``dst``'s family is in this node's subnet of that family
        (both known; Felix's nodeInOurSubnet)."""
        networks = self._networks6 if ":" in dst else self._networks
        ours, theirs = networks.get(self._hostname), self._node_ip(node, dst)
        if not ours or not theirs:
            return False
        try:
            return ipaddress.ip_address(theirs) in ipaddress.ip_network(ours)
        except ValueError:
            return False

    def routes(self) -> dict[str, m.RouteUpdate]:
        wanted: dict[str, dict[str, object]] = {}

        def add(dst: str, route_type: str, **fields: object) -> None:
            entry: dict[str, object] = wanted.setdefault(dst, {"types": set()})
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
                    dst_node_ip=self._node_ip(block.host, cidr),
                )
            for address, node in _non_affine_allocations(block):
                add(
                    address,
                    "LOCAL_WORKLOAD" if node == self._hostname else "REMOTE_WORKLOAD",
                    dst_node=node,
                    dst_node_ip=self._node_ip(node, address),
                )
        for hosts, length in ((self._host_ips, 32), (self._host_ips6, 128)):
            for node, ip in hosts.items():
                host_type = "LOCAL_HOST" if node == self._hostname else "REMOTE_HOST"
                add(f"{ip}/{length}", host_type, dst_node=node)
        for dst, (node, kind, interface) in self._first_claims().items():
            local = node == self._hostname
            if kind == _WORKLOAD_CLAIM:
                add(dst, "LOCAL_WORKLOAD" if local else "REMOTE_WORKLOAD")
            else:
                add(dst, "LOCAL_TUNNEL" if local else "REMOTE_TUNNEL")
            # The claim, not a block at the same CIDR, says where the address is.
            wanted[dst].update(dst_node=node, dst_node_ip=self._node_ip(node, dst))
            if interface:
                wanted[dst]["local_workload_interface"] = interface
        self._inherit_block_types(wanted)
        out = {}
        for dst, entry in wanted.items():
            pool = self._pool_for(dst)
            types = entry["types"]
            assert isinstance(types, set)
            # As Felix: every route inside a pool carries the pool's type, local ones too.
            tunnel = _pool_tunnel(pool)
            node = str(entry.get("dst_node", ""))
            cross_subnet = pool is not None and "cross-subnet" in (pool.vxlan_mode, pool.ipip_mode)
            same_subnet = bool(node) and cross_subnet and self._in_our_subnet(node, dst)
            # A remote route over VXLAN is sent whether or not its node's VTEP is known (as
            # Felix's resolver): the routes manager programs it once the VTEP has its address.
            out[dst] = m.RouteUpdate(
                dst=dst,
                types=frozenset(types),
                dst_node=node,
                # As Felix: every route to a node carries that node's IP (host routes too).
                dst_node_ip=str(entry.get("dst_node_ip", "")) or self._node_ip(node, dst),
                tunnel=tunnel,
                nat_outgoing=bool(pool is not None and pool.masquerade),
                local_workload_interface=str(entry.get("local_workload_interface", "")),
                borrowed=bool(entry.get("borrowed")),
                same_subnet=same_subnet,
            )
        return out

    def _first_claims(self) -> dict[str, tuple[str, int, str]]:
        """For each address a workload or a tunnel claims, the claim that decides its route:
        as Felix's route trie, the first by node name, then workload before tunnel, so that
        two workloads on one address (bad data, or a pod replaced on another node before the
        old one is gone) resolve the same whatever order their updates came in. (Two local
        workloads on one address: the first interface by name.)"""
        claims: dict[str, list[tuple[str, int, str]]] = {}
        for node, ip in self._tunnels.items():
            claims.setdefault(f"{ip}/32", []).append((node, _TUNNEL_CLAIM, ""))
        for node, ip in self._tunnels6.items():
            claims.setdefault(f"{ip}/128", []).append((node, _TUNNEL_CLAIM, ""))
        for node, ip in self._ipip_tunnels.items():
            claims.setdefault(f"{ip}/32", []).append((node, _IPIP_CLAIM, ""))
        for node, (ipv4, ipv6) in self._wireguard.items():
            for ip, length in ((ipv4, 32), (ipv6, 128)):
                if ip:
                    claims.setdefault(f"{ip}/{length}", []).append((node, _WIREGUARD_CLAIM, ""))
        for key, endpoint in self._workloads.items():
            interface = endpoint.name if key.hostname == self._hostname else ""
            for net in endpoint.ipv4_nets + endpoint.ipv6_nets:
                claims.setdefault(net, []).append((key.hostname, _WORKLOAD_CLAIM, interface))
        return {dst: min(found) for dst, found in claims.items()}

    def _inherit_block_types(self, wanted: dict[str, dict[str, object]]) -> None:
        """As Felix's walk of its route trie: a route inside blocks with an affinity takes
        their workload types (a local workload inside another node's block is both local and
        remote), except a host route, and a tunnel address inside a larger block; a workload
        route to another node than the outermost block's is borrowed."""
        by_length: dict[int, dict[IPNetwork, model.AllocationBlock]] = {}
        for block in self._blocks.values():
            if block.host:
                network = ipaddress.ip_network(block.cidr, strict=False)
                by_length.setdefault(network.prefixlen, {})[network] = block
        lengths = sorted(by_length)
        for dst, entry in wanted.items():
            types = entry["types"]
            assert isinstance(types, set)
            if types & {"LOCAL_HOST", "REMOTE_HOST"} or "CIDR_INFO" in types:
                continue
            network = ipaddress.ip_network(dst, strict=False)
            tunnel = bool(types & {"LOCAL_TUNNEL", "REMOTE_TUNNEL"})
            outermost = ""
            for length in lengths:
                if length > network.prefixlen or (tunnel and length != network.prefixlen):
                    continue
                containing = by_length[length].get(network.supernet(new_prefix=length))
                if containing is None:
                    continue
                outermost = outermost or containing.host
                local = containing.host == self._hostname
                types.add("LOCAL_WORKLOAD" if local else "REMOTE_WORKLOAD")
            workload = types & {"LOCAL_WORKLOAD", "REMOTE_WORKLOAD"}
            if outermost and workload and entry.get("dst_node") not in ("", outermost):
                entry["borrowed"] = True

    def flush(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        wanted = self.routes()
        for dst in set(self._sent) - set(wanted):
            self._out.on_route_remove(dst)
        for dst, route in wanted.items():
            if self._sent.get(dst) != route:
                self._out.on_route_update(route)
        self._sent = wanted
