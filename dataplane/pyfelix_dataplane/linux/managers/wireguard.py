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
from pyfelix_dataplane.linux.wireguard import WireguardDevice, peers_from
from pyfelix_dataplane.rules.marks import wireguard_mark
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)

#: The kernel's own tables (local, main, default): never handed out.
RESERVED_TABLES = range(253, 256)
DEFAULT_TABLES = ((1, 250),)


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


def wireguard_table(config: FelixConfig) -> int | None:
    """IPv4 WireGuard's table: the first one handed out (the next is IPv6's), as Felix
    allocates it whether or not WireGuard is on."""
    return next(route_tables(config), None)


@attrs.define(eq=False)
class WireguardManager:
    state: NodeState
    writer: DeviceWriting
    hostname: str
    to_calc: Any
    area: str = "routes"
    public_key: str = ""
    #: The device's MTU (WireguardMTU, or the host MTU less 60: see linux/mtu.py).
    mtu: int = 0
    # The device as last written (None: none, or never enabled), and whether the route
    # refresh asks for it to be re-read.
    _written: WireguardDevice | None = None
    _stale: bool = False

    def invalidate(self) -> None:
        self._stale = True

    def desired(self) -> WireguardDevice | None:
        config = self.state.config
        if not config.wireguard_enabled:
            return None
        table = wireguard_table(config)
        if table is None:
            log.warning("no routing table left in RouteTableRanges for WireGuard: it stays off")
            return None
        port = config.wireguard_listening_port
        keys, addresses = {}, {}
        for (kind, host), update in self.state.others.items():
            if kind == "wireguard":
                keys[host] = (update.public_key, update.interface_ipv4_addr)
            elif kind == "host":
                addresses[host] = update.ipv4_addr
        blocks: dict[str, list[str]] = {}
        for route in self.state.routes.values():
            if "REMOTE_WORKLOAD" in route.types and route.dst_node:
                blocks.setdefault(route.dst_node, []).append(route.dst)
        return WireguardDevice(
            name=config.wireguard_interface_name,
            port=port,
            fwmark=wireguard_mark(config.iptables_mark_mask),
            table=table,
            rule_priority=config.wireguard_routing_rule_priority,
            address=keys.get(self.hostname, ("", ""))[1],
            mtu=self.mtu,
            keepalive=round(config.wireguard_persistent_keep_alive),
            peers=peers_from(keys, blocks, addresses, port, self.hostname),
        )

    async def apply(self) -> None:
        """Never enabled: the kernel is left alone. Disabled: the device goes."""
        wireguard = self.desired()
        written = self._written
        if wireguard == written and not (wireguard is not None and self._stale):
            return
        previous = written.name if written is not None else ""
        key = await self.writer.wireguard(wireguard, previous)
        self._written, self._stale = wireguard, False
        if key != self.public_key:
            self.public_key = key
            log.info("WireGuard public key: %s", key or "(none)")
            await self.to_calc.send(m.WireguardStatusUpdate(key))
