"""The route writer: routes to local workloads through their cali interfaces, with pyroute2.

For each local workload whose interface exists and is up: a scope-link route to each of its
addresses, the sysctls Felix sets on workload interfaces (proxy ARP so the workload's gateway
resolves, forwarding), and a permanent ARP entry for the workload's MAC when known (IPv4
only: Felix never pins IPv6 neighbours). Routes are written and owned as Felix's main route
table does (RouteOwnership): device routes (workloads, the VXLAN device) with
DeviceRouteProtocol (boot by default), routes via a gateway with 80 unless
DeviceRouteProtocol is something else; ours are routes of the exclusive protocol, routes on
the VXLAN device, and routes on workload interfaces (any of them with RemoveExternalRoutes,
else those of our protocols). Ours that nobody wants are removed. Every call opens its own
IPRoute in the worker thread that runs it, so a handle is only ever used by the thread that
owns it. An interface's index and up flag are looked up by name with ioctls (cheap), not by
dumping every link.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Mapping
from typing import Any

import attrs
import trio
from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWNEIGH, RTM_NEWROUTE
from pyroute2.netlink.rtnl.ndmsg import ndmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from pyfelix_dataplane.linux.commands import writing

log = logging.getLogger(__name__)

FELIX_ROUTE_PROTO = 80
MAIN_TABLE = 254
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
IFF_RUNNING = 0x40
NUD_PERMANENT = 0x80
RTNH_F_ONLINK = 0x4
RT_SCOPE_LINK = 253
RTN_UNICAST = 1


RTPROT_BOOT = 3


@attrs.frozen
class RouteOwnership:
    """Felix's main-table ownership policy and route protocols, from DeviceRouteProtocol,
    RemoveExternalRoutes and InterfacePrefix."""

    device_proto: int = RTPROT_BOOT
    workload_prefixes: tuple[str, ...] = ("cali",)
    remove_external: bool = True
    special_interfaces: tuple[str, ...] = ("vxlan.calico",)
    #: DeviceRouteSourceAddress / DeviceRouteSourceAddressIPv6: the workload routes' src.
    source_v4: str = ""
    source_v6: str = ""
    #: RouteSyncDisabled (network policy only): no route is touched, added or removed; the
    #: workload interfaces are still configured.
    sync: bool = True

    def source_for(self, dst: str) -> str:
        return self.source_v6 if ":" in dst else self.source_v4

    @property
    def gateway_proto(self) -> int:
        """Routes via a gateway (boot is shared with other tools: 80 then, as Felix)."""
        return FELIX_ROUTE_PROTO if self.device_proto == RTPROT_BOOT else self.device_proto

    def is_ours(self, interface: str | None, proto: int) -> bool:
        if proto == self.gateway_proto:
            return True
        if interface is None:
            return False
        if interface.startswith(self.workload_prefixes):
            return self.remove_external or proto in (self.device_proto, self.gateway_proto)
        return interface in self.special_interfaces


@attrs.frozen
class RouteTarget:
    """Where a destination is routed: out of ``interface`` (scope link; a workload's, whose
    ``mac`` gets a permanent neighbour entry), or via ``gateway`` (out of ``interface`` with
    onlink, as VXLAN routes go; or wherever the kernel's routes reach it when ``interface``
    is empty)."""

    interface: str
    mac: str = ""
    gateway: str = ""
    #: The workload may send from other addresses (allowSpoofedSourcePrefixes): its interface
    #: gets no reverse-path filter.
    spoofing: bool = False
    #: The route's metric (Felix's IPv4/IPv6NormalRoutePriority for workload routes); 0: none.
    priority: int = 0


def set_sysctl(path: str, value: str) -> None:
    """Set a sysctl unless it already has ``value`` (plain system calls: a node sets several
    for each of hundreds of interfaces at start)."""
    try:
        fd = os.open(f"/proc/sys/{path}", os.O_RDWR)
        try:
            if os.read(fd, 64).strip() != value.encode():
                # At offset 0: the kernel ignores sysctl writes anywhere else.
                os.pwrite(fd, value.encode(), 0)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("cannot set %s: %s", path, exc)


def default_rp_filter() -> str:
    """The namespace's default reverse-path filter (net.ipv4.conf.default.rp_filter), which
    Felix gives workload interfaces; strict (1) when it cannot be read, as Felix."""
    try:
        with open("/proc/sys/net/ipv4/conf/default/rp_filter") as file:
            return file.read().strip() or "1"
    except OSError:
        log.warning("cannot read the default rp_filter; workload interfaces get 1 (strict)")
        return "1"


def _configure_interface(interface: str, rp_filter: str) -> None:
    """Felix's settings for a workload interface: proxy ARP (the pod's gateway 169.254.1.1
    resolves to the host), forwarding, the reverse-path filter ``rp_filter``, routing to
    localhost for NAT; with IPv6, proxy NDP and forwarding; never accepting router
    advertisements."""
    settings = [
        (f"net/ipv4/conf/{interface}/proxy_arp", "1"),
        (f"net/ipv4/neigh/{interface}/proxy_delay", "0"),
        (f"net/ipv4/conf/{interface}/forwarding", "1"),
        (f"net/ipv4/conf/{interface}/rp_filter", rp_filter),
        (f"net/ipv4/conf/{interface}/route_localnet", "1"),
    ]
    if os.path.exists(f"/proc/sys/net/ipv6/conf/{interface}"):
        settings += [
            (f"net/ipv6/conf/{interface}/accept_ra", "0"),
            (f"net/ipv6/conf/{interface}/proxy_ndp", "1"),
            (f"net/ipv6/conf/{interface}/forwarding", "1"),
        ]
    for path, value in settings:
        set_sysctl(path, value)


def _configure_only(
    desired: Mapping[str, RouteTarget], links: Mapping[str, tuple[int | None, bool]]
) -> dict[str, str]:
    """RouteSyncDisabled: the workload interfaces configured, no route touched; "unmanaged"
    per destination, or "waiting" while its interface is missing or down."""
    rp_filter = default_rp_filter()
    done = {}
    configured: set[str] = set()
    for dst, wanted in desired.items():
        index, up = links.get(wanted.interface, (None, True))
        if wanted.interface and (index is None or not up):
            done[dst] = "waiting"
            continue
        if wanted.interface and not wanted.gateway and wanted.interface not in configured:
            _configure_interface(wanted.interface, "0" if wanted.spoofing else rp_filter)
            configured.add(wanted.interface)
        done[dst] = "unmanaged"
    return done


def link_flags(name: str) -> tuple[int, int] | None:
    """(ifindex, IFF_* flags) of an interface of this namespace, or None if there is none.

    Two ioctls per interface: a full netlink link dump, parsed by pyroute2, costs about 0.5 ms
    of CPU per link, and at start-up that competed with iptables-restore for the node's cores.
    """
    try:
        index = socket.if_nametoindex(name)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH14x", name.encode(), 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
    except (OSError, ValueError):
        return None
    return index, flags


def _link_state(name: str) -> tuple[int | None, bool]:
    """(ifindex, administratively up) of an interface, or (None, False) if there is none."""
    found = link_flags(name)
    return (None, False) if found is None else (found[0], bool(found[1] & IFF_UP))


def _interface_name(index: int | None, names: dict[int, str | None]) -> str | None:
    if index is None:
        return None
    if index not in names:
        try:
            names[index] = socket.if_indextoname(index)
        except OSError:
            names[index] = None
    return names[index]


def sync_routes(
    desired: Mapping[str, RouteTarget], ownership: RouteOwnership | None = None
) -> dict[str, str]:
    """Make the kernel's routes that are ours (``ownership``) equal ``desired`` (dst ->
    target), blocking.

    Returns what was done per destination ("added", "kept", "removed", "waiting" when the
    interface is missing or down, "failed" when the kernel refused the route).
    """
    ownership = ownership or RouteOwnership()
    done: dict[str, str] = {}
    interfaces = {w.interface for w in desired.values() if w.interface}
    links = {name: _link_state(name) for name in interfaces}
    if not ownership.sync:
        return _configure_only(desired, links)
    names: dict[int, str | None] = {}
    with _filtering_iproute() as ipr:
        existing: dict[str, tuple[int | None, str | None, int]] = {}
        sources: dict[str, str] = {}
        #: Every route of ours per destination by metric (one dst may have several metrics).
        metrics: dict[str, dict[int, tuple[int, int]]] = {}
        for family in (2, 10):
            for route in table_routes(ipr, family, MAIN_TABLE):
                dst = route.get_attr("RTA_DST")
                if dst is None or (family == 10 and dst == "fe80::" and route["dst_len"] == 64):
                    continue  # the kernel's IPv6 link-local route: never anyone's
                index = route.get_attr("RTA_OIF")
                if not ownership.is_ours(_interface_name(index, names), route["proto"]):
                    continue
                via = route.get_attr("RTA_GATEWAY")
                key = f"{dst}/{route['dst_len']}"
                priority = route.get_attr("RTA_PRIORITY") or 0
                metrics.setdefault(key, {})[priority] = (route["proto"], route["scope"])
                existing[key] = (index, via, route["proto"])
                sources[key] = route.get_attr("RTA_PREFSRC") or ""
        configured: set[str] = set()
        rp_filter = default_rp_filter()
        batch: list[Any] = []
        stale_metrics: list[tuple[str, int, int, int]] = []
        for dst, wanted in desired.items():
            index, up = links.get(wanted.interface, (None, True))
            if wanted.interface and (index is None or not up):
                done[dst] = "waiting"
                continue
            if wanted.gateway:
                # Through a device (VXLAN, onlink) it is a device route; else via a gateway.
                proto = ownership.device_proto if index is not None else ownership.gateway_proto
                current = existing.get(dst)
                if (
                    current is not None
                    and current[1] == wanted.gateway
                    and current[2] == proto
                    and (index is None or current[0] == index)
                ):
                    done[dst] = "kept"
                    continue
                try:
                    _route_via(ipr, dst, wanted.gateway, index, proto)
                except NetlinkError as exc:
                    log.warning("cannot route %s via %s: %s", dst, wanted.gateway, exc)
                    done[dst] = "failed"
                else:
                    done[dst] = "added"
                continue
            if index is None:  # a direct route needs an interface; none was named
                done[dst] = "waiting"
                continue
            if wanted.interface not in configured:
                # As Felix: no reverse-path filter where the workload may spoof its source.
                _configure_interface(wanted.interface, "0" if wanted.spoofing else rp_filter)
                configured.add(wanted.interface)
            source = ownership.source_for(dst)
            # The kernel gives an IPv6 route without a metric 1024.
            priority = wanted.priority or (IPV6_DEFAULT_METRIC if ":" in dst else 0)
            others = {k: v for k, v in metrics.get(dst, {}).items() if k != priority}
            if (
                existing.get(dst) == (index, None, ownership.device_proto)
                and sources.get(dst, "") == source
                and priority in metrics.get(dst, {})
                and not others
            ):
                done[dst] = "kept"
            else:
                request = direct_route(
                    dst, index, proto=ownership.device_proto, src=source, priority=priority
                )
                batch.append(request)
                done[dst] = "added"
                # Of another metric, an old route is another route: it goes once ours is in.
                stale_metrics.extend((dst, priority, *v) for priority, v in others.items())
            if wanted.mac and ":" not in dst:
                batch.append(_permanent_neighbour(dst, wanted.mac, index))
        if batch:
            # One send for all: pyroute2 spends about 0.5 ms on each request made on its own.
            ipr.nlm_request_batch(batch)
        removals = [
            (dst, p, *v)
            for dst in existing.keys() - desired.keys()
            for p, v in metrics[dst].items()
        ]
        for dst, priority, proto, scope in stale_metrics + removals:
            try:
                # The kernel only deletes a route whose scope (and metric) match the request's.
                extra = {"priority": priority} if priority else {}
                ipr.route("del", dst=dst, proto=proto, table=MAIN_TABLE, scope=scope, **extra)
                if dst not in desired:
                    done[dst] = "removed"
            except NetlinkError as exc:
                log.warning("cannot remove route %s: %s", dst, exc)
    return done


def _filtering_iproute() -> IPRoute:
    """An IPRoute whose route dumps the kernel filters (strict checking, Linux 4.20 and
    later). Otherwise every route of every table comes back, fe80::/64 and local ones for each
    interface, and pyroute2 spends 0.1 s parsing them for a node with 200 workloads, holding
    the GIL that rendering the tables needs. Older kernels refuse the option."""
    try:
        return IPRoute(strict_check=True)
    except OSError:
        return IPRoute()


def table_routes(ipr: IPRoute, family: int, table: int, proto: int | None = None) -> list[Any]:
    """The routes of one family in ``table`` (of protocol ``proto`` if given). pyroute2 only
    filters its dumps in Python unless given its own ``dump_filter``; then, on a socket with
    strict checking, the table and protocol go to the kernel. The filter still checks what
    comes back, for sockets and kernels that ignore them."""

    def wanted(route: Any) -> bool:
        in_table = (route.get_attr("RTA_TABLE") or route["table"]) == table
        return bool(in_table and (proto is None or route["proto"] == proto))

    query = {"table": table} if proto is None else {"table": table, "proto": proto}
    return list(ipr.route("dump", family=family, dump_filter=wanted, **query))


_REPLACE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
IPV6_DEFAULT_METRIC = 1024


def direct_route(
    dst: str,
    index: int,
    table: int = MAIN_TABLE,
    *,
    proto: int = FELIX_ROUTE_PROTO,
    src: str = "",
    priority: int = 0,
) -> Any:
    """The request for ``dst`` straight out of interface ``index`` (scope link) with protocol
    ``proto`` (and metric ``priority``), replacing any route there of that metric; sent with
    others in one ``nlm_request_batch``."""
    network = ipaddress.ip_network(dst)
    msg = rtmsg()
    msg["family"] = socket.AF_INET6 if network.version == 6 else socket.AF_INET
    msg["dst_len"] = network.prefixlen
    msg["table"] = table if table < 256 else 0  # the header has 8 bits; RTA_TABLE has all
    msg["proto"] = proto
    msg["scope"] = RT_SCOPE_LINK
    msg["type"] = RTN_UNICAST
    msg["attrs"] = [
        ("RTA_TABLE", table),
        ("RTA_DST", str(network.network_address)),
        ("RTA_OIF", index),
        *([("RTA_PREFSRC", src)] if src else []),
        *([("RTA_PRIORITY", priority)] if priority else []),
    ]
    msg["header"]["type"] = RTM_NEWROUTE
    msg["header"]["flags"] = _REPLACE
    return msg


def _permanent_neighbour(dst: str, mac: str, index: int) -> Any:
    """The request for a permanent neighbour entry (a workload's MAC), to be sent in a batch."""
    address = ipaddress.ip_network(dst).network_address
    msg = ndmsg()
    msg["family"] = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    msg["ifindex"] = index
    msg["state"] = NUD_PERMANENT
    msg["attrs"] = [("NDA_DST", str(address)), ("NDA_LLADDR", mac)]
    msg["header"]["type"] = RTM_NEWNEIGH
    msg["header"]["flags"] = _REPLACE
    return msg


def sync_only_address(ipr: IPRoute, index: int, address: str, version: int = 4) -> None:
    """Interface ``index`` holds ``address`` (/32 or /128) as its only address of IP
    ``version`` (none if ""); IPv6's link-local addresses are the kernel's and stay."""
    family, length = (socket.AF_INET6, 128) if version == 6 else (socket.AF_INET, 32)
    wanted = {(address, length)} if address else set()
    present = {
        (entry.get_attr("IFA_ADDRESS"), entry["prefixlen"])
        for entry in ipr.get_addr(index=index, family=family)
        if not str(entry.get_attr("IFA_ADDRESS")).lower().startswith("fe80:")
    }
    for other, prefixlen in present - wanted:
        ipr.addr("del", index=index, address=other, prefixlen=prefixlen)
    for new, prefixlen in wanted - present:
        ipr.addr("add", index=index, address=new, prefixlen=prefixlen)


def _route_via(ipr: IPRoute, dst: str, gateway: str, index: int | None, proto: int) -> None:
    """A route through a gateway: onlink out of ``index`` when given (the gateway is a VXLAN
    tunnel address, reachable only through that device), else as the kernel resolves it."""
    extra: dict[str, object] = {"oif": index, "flags": RTNH_F_ONLINK} if index is not None else {}
    ipr.route(
        "replace",
        dst=dst,
        gateway=gateway,
        proto=proto,
        table=MAIN_TABLE,
        **extra,
    )


class RouteWriter:
    async def apply(
        self, desired: Mapping[str, RouteTarget], ownership: RouteOwnership | None = None
    ) -> dict[str, str]:
        with writing("routes"):
            return await trio.to_thread.run_sync(sync_routes, dict(desired), ownership)
