"""Network sets, IP pools, IPAM blocks and nodes: addresses, and the routes and tunnels built from
them."""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyfelix import model
from pyfelix.ipnet import canonical_networks, parse_network
from pyfelix.model import (
    NAMESPACE_LABEL,
    NAMESPACE_PROFILE_PREFIX,
)
from pyfelix.values import FrozenMap

if TYPE_CHECKING:
    from pyfelix.resources import (
        GlobalNetworkSet,
        IPAMBlock,
        IPPool,
        NetworkSet,
        Node,
    )
    from pyfelix.resources.k8s_node import KubernetesNode
from pyfelix.syncer.processors.common import (
    KV,
)


def _network_set(netset: GlobalNetworkSet | NetworkSet) -> list[KV]:
    if netset.KIND == "NetworkSet":
        labels = {**netset.labels, NAMESPACE_LABEL: netset.namespace}
        value = model.NetworkSet(
            canonical_networks(netset.spec.nets),
            FrozenMap(labels),
            (f"{NAMESPACE_PROFILE_PREFIX}{netset.namespace}",),
            origin=netset,
        )
        return [(model.NetworkSetKey(f"{netset.namespace}/{netset.name}"), value)]
    value = model.NetworkSet(canonical_networks(netset.spec.nets), netset.labels, origin=netset)
    return [(model.NetworkSetKey(netset.name), value)]


_ENCAP_MODES = {"Always": "always", "CrossSubnet": "cross-subnet"}


def _ip_pool(pool: IPPool) -> list[KV]:
    spec = pool.spec
    try:
        cidr = str(parse_network(spec.cidr))
    except ValueError:
        return []
    value = model.IPPool(
        cidr=cidr,
        ipip_mode=_ENCAP_MODES.get(spec.ipip_mode, ""),
        vxlan_mode=_ENCAP_MODES.get(spec.vxlan_mode, ""),
        masquerade=spec.nat_outgoing,
        disabled=spec.disabled,
        disable_bgp_export=spec.disable_bgp_export,
        allowed_uses=spec.allowed_uses or ("Workload", "Tunnel"),
        assignment_mode=spec.assignment_mode or "Automatic",
        origin=pool,
    )
    return [(model.IPPoolKey(cidr), value)]


@functools.cache
def use_pod_cidr() -> bool:
    """libcalico-go's usePodCIDR (host-local IPAM on the Kubernetes datastore), read from the
    environment as its client configuration is: CALICO_USE_POD_CIDR, else USE_POD_CIDR, true
    as Go's ParseBool reads it. Read once: Felix loads it at start."""
    value = os.environ.get("CALICO_USE_POD_CIDR", os.environ.get("USE_POD_CIDR", ""))
    from pyfelix.resources.crd import GO_TRUE  # noqa: PLC0415

    return value in GO_TRUE


def _ipam_block(block: IPAMBlock) -> list[KV]:
    """An IPAM block, unless usePodCIDR: then Felix's syncer lists none, and the nodes' pod
    CIDRs stand for them (a dump's blocks are not read)."""
    if use_pod_cidr():
        return []
    spec = block.spec
    allocations = tuple(a if isinstance(a, int) else None for a in (spec.allocations or ()))
    attributes = tuple(a for a in (spec.attributes or ()) if isinstance(a, Mapping))
    value = model.AllocationBlock(
        spec.cidr, spec.affinity, allocations, attributes, spec.deleted, origin=block
    )
    return [(model.BlockKey(spec.cidr), value)]


def _host_network(address: str) -> str:
    """The subnet of "10.0.0.1/24" ("10.0.0.0/24"; "" without a prefix length or if invalid)."""
    if "/" not in address:
        return ""
    try:
        return str(ipaddress.ip_interface(address).network)
    except ValueError:
        return ""


def _host_ip(address: str) -> str:
    """The address part of "10.0.0.1/24" or "10.0.0.1" ("" if neither)."""
    try:
        return str(ipaddress.ip_interface(address).ip)
    except ValueError:
        return ""


NODE_CONFIG_FIELDS = (
    "IpInIpTunnelAddr",
    "IPv4VXLANTunnelAddr",
    "VXLANTunnelMACAddr",
    "IPv6VXLANTunnelAddr",
    "VXLANTunnelMACAddrV6",
)


def _node(node: Node) -> list[KV]:
    spec = node.spec
    name = node.name
    bgp = spec.bgp
    values = {
        "IpInIpTunnelAddr": _host_ip(bgp.ipv4_ipip_tunnel_addr) if bgp else "",
        "IPv4VXLANTunnelAddr": _host_ip(spec.ipv4_vxlan_tunnel_addr),
        "VXLANTunnelMACAddr": spec.vxlan_tunnel_mac_addr,
        "IPv6VXLANTunnelAddr": _host_ip(spec.ipv6_vxlan_tunnel_addr),
        "VXLANTunnelMACAddrV6": spec.vxlan_tunnel_mac_addr_v6,
    }
    kvs: list[KV] = [
        (model.HostConfigKey(name, field), model.ConfigValue(v, origin=node) if v else None)
        for field, v in values.items()
    ]
    v4, v6 = (bgp.ipv4_address, bgp.ipv6_address) if bgp else ("", "")
    addresses: tuple[tuple[model.ModelKey, str], ...] = (
        (model.HostIPKey(name), _host_ip(v4)),
        (model.HostIPv6Key(name), _host_ip(v6)),
        (model.HostNetworkKey(name), _host_network(v4)),
        (model.HostNetworkV6Key(name), _host_network(v6)),
    )
    kvs.extend((key, model.ConfigValue(v, origin=node) if v else None) for key, v in addresses)
    status = node.status
    wireguard = model.Wireguard(
        public_key=status.wireguard_public_key if status else "",
        interface_ipv4_addr=spec.wireguard.interface_ipv4_address if spec.wireguard else "",
        public_key_v6=status.wireguard_public_key_v6 if status else "",
        interface_ipv6_addr=spec.wireguard.interface_ipv6_address if spec.wireguard else "",
        origin=node,
    )
    has_wireguard = any(
        (
            wireguard.public_key,
            wireguard.interface_ipv4_addr,
            wireguard.public_key_v6,
            wireguard.interface_ipv6_addr,
        )
    )
    kvs.append((model.WireguardKey(name), wireguard if has_wireguard else None))
    kvs.append((model.ResourceKey("Node", "", name), model.Passthrough(node)))
    if use_pod_cidr():
        # Host-local IPAM: each pod CIDR is an IPAM block affine to the node, holding no
        # allocations, as Felix's node processor makes them; the routes to its pods follow.
        for cidr in status.pod_cidrs if status else ():
            block = model.AllocationBlock(cidr, f"host:{name}", origin=node)
            kvs.append((model.BlockKey(cidr), block))
    return kvs


def _kubernetes_node(node: KubernetesNode) -> list[KV]:
    """A v1 Node is the Calico Node calico-node's annotations describe (with usePodCIDR, its
    tunnel addresses from its pod CIDR)."""
    from pyfelix.resources.k8s_conversion import calico_node  # noqa: PLC0415

    return _node(calico_node(node, use_pod_cidr()))
