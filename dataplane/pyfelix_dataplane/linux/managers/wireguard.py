"""WireGuard: the device, its peers (every remote node whose key is known, allowed its blocks and
WireGuard address), the routing table and rule; the device's public key goes back to the
datastore through the calc side."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix_dataplane.linux.kernel import DeviceWriting
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.linux.wireguard import WireguardDevice, peers_from
from pyfelix_dataplane.rules.marks import wireguard_mark
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)

#: The kernel's own tables (local, main, default): never handed out.
RESERVED_TABLES = range(253, 256)
DEFAULT_TABLES = ((1, 250),)
#: What a device, its peers and their allowed addresses come from.
CHANGES_WIREGUARD = (
    m.ConfigUpdate,
    m.WireguardEndpointUpdate,
    m.WireguardEndpointRemove,
    m.HostMetadataUpdate,
    m.HostMetadataRemove,
    m.RouteUpdate,
    m.RouteRemove,
)


def route_tables(config: FelixConfig) -> Iterator[int]:
    """The routing tables pyfelix may own, lowest first, as Felix's index allocator hands
    them out: RouteTableRanges, else the deprecated RouteTableRange, else 1-250; overlaps
    once, the kernel's 253-255 never."""
    ranges = config.route_table_ranges or (
        (config.route_table_range,) if config.route_table_range else DEFAULT_TABLES
    )
    given = 0
    for low, high in sorted(ranges):
        for table in range(max(low, given + 1), high + 1):
            if table not in RESERVED_TABLES:
                yield table
        given = max(given, high)


def wireguard_tables(config: FelixConfig) -> tuple[int | None, int | None]:
    """IPv4 and IPv6 WireGuard's tables: the first two handed out, as Felix allocates them
    whether or not WireGuard is on."""
    tables = route_tables(config)
    return next(tables, None), next(tables, None)


def wireguard_table(config: FelixConfig, version: int = 4) -> int | None:
    return wireguard_tables(config)[0 if version == 4 else 1]


@attrs.define(eq=False)
class WireguardManager:
    """Both devices: IPv4's (WireguardEnabled) and IPv6's (WireguardEnabledV6)."""

    state: NodeState
    writer: DeviceWriting
    hostname: str
    to_calc: Any
    area: str = "routes"
    #: IP version -> the device's public key as last reported.
    public_keys: dict[int, str] = attrs.Factory(dict)
    #: Where the devices' MTUs come from (WireguardMTU / WireguardMTUV6, or the host MTU less
    #: 60 / 80: managers/mtu.py).
    mtus: MtuManager | None = None
    # Per IP version, the device as last written (absent: never enabled), and whether the
    # route refresh asks for them to be re-read.
    _written: dict[int, WireguardDevice | None] = attrs.Factory(dict)
    _stale: bool = False
    #: Whether a message since the last apply may change a device or its peers.
    _dirty: bool = True

    @property
    def mtu(self) -> int:
        return self.mtus.wireguard if self.mtus is not None else 0

    @property
    def mtu_v6(self) -> int:
        return self.mtus.wireguard_v6 if self.mtus is not None else 0

    @property
    def public_key(self) -> str:
        return self.public_keys.get(4, "")

    def invalidate(self) -> None:
        self._stale = self._dirty = True

    def on_update(self, msg: m.ToDataplane) -> None:
        if isinstance(msg, CHANGES_WIREGUARD):
            self._dirty = True

    def desired(self, version: int = 4) -> WireguardDevice | None:
        config = self.state.config
        v6 = version == 6
        if not (config.wireguard_enabled_v6 if v6 else config.wireguard_enabled):
            return None
        table = wireguard_table(config, version)
        if table is None:
            log.warning(
                "no routing table left in RouteTableRanges for IPv%d WireGuard: it stays off",
                version,
            )
            return None
        port = config.wireguard_listening_port_v6 if v6 else config.wireguard_listening_port
        keys = {
            host: (
                (update.public_key_v6, update.interface_ipv6_addr)
                if v6
                else (update.public_key, update.interface_ipv4_addr)
            )
            for host, update in self.state.wireguard.items()
        }
        addresses = {
            host: update.ipv6_addr if v6 else update.ipv4_addr
            for host, update in self.state.host_metadata.items()
        }
        encrypt_hosts = config.wireguard_host_encryption_enabled
        destinations = self._destinations(v6, encrypt_hosts)
        peers = peers_from(keys, destinations, addresses, port, self.hostname)
        peered = {peer.node for peer in peers}
        # As Felix with host encryption and no WireGuard address: the node's own address.
        address = keys.get(self.hostname, ("", ""))[1]
        if not address and encrypt_hosts:
            address = addresses.get(self.hostname, "")
        return WireguardDevice(
            name=config.wireguard_interface_name_v6 if v6 else config.wireguard_interface_name,
            port=port,
            fwmark=wireguard_mark(config.iptables_mark_mask),
            table=table,
            rule_priority=config.wireguard_routing_rule_priority,
            address=address,
            mtu=self.mtu_v6 if v6 else self.mtu,
            keepalive=round(config.wireguard_persistent_keep_alive),
            peers=peers,
            version=version,
            throw=tuple(
                sorted(
                    dst for node, dsts in destinations.items() if node not in peered for dst in dsts
                )
            ),
            src_valid_mark=encrypt_hosts and not v6,
        )

    def _destinations(self, v6: bool, encrypt_hosts: bool) -> dict[str, list[str]]:
        """Per remote node, what WireGuard would carry to it (as Felix's WireGuard manager
        takes routes): its workloads' and tunnels' addresses and, with host encryption, its
        own address; of one IP version."""
        found: dict[str, list[str]] = {}
        for route in self.state.routes.values():
            node, types = route.dst_node, route.types
            if not node or node == self.hostname or (":" in route.dst) != v6:
                continue
            if "REMOTE_HOST" in types:
                wanted = encrypt_hosts
            else:
                wanted = bool(types & {"REMOTE_WORKLOAD", "REMOTE_TUNNEL"})
            if wanted:
                found.setdefault(node, []).append(route.dst)
        return found

    async def complete_deferred_work(self) -> None:
        """Never enabled: the kernel is left alone. Disabled: the device goes."""
        if not self._dirty:
            return
        stale, self._stale = self._stale, False
        for version in (4, 6):
            wireguard = self.desired(version)
            if version not in self._written and wireguard is None:
                continue
            written = self._written.get(version)
            if wireguard == written and not (wireguard is not None and stale):
                continue
            previous = written.name if written is not None else ""
            key = await self.writer.wireguard(wireguard, previous, version)
            self._written[version] = wireguard
            if key != self.public_keys.get(version, ""):
                self.public_keys[version] = key
                log.info("IPv%d WireGuard public key: %s", version, key or "(none)")
                await self.to_calc.send(m.WireguardStatusUpdate(key, version))
        self._dirty = False
