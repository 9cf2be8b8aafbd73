"""The route writer: routes to local workloads through their cali interfaces.

For each local workload whose interface exists and is up: a scope-link route to each of its
addresses, the sysctls Felix sets on workload interfaces (proxy ARP so the workload's gateway
resolves, forwarding), and a permanent ARP entry for the workload's MAC when known (IPv4
only: Felix never pins IPv6 neighbours). Routes are written and owned as Felix's main route
table does (RouteOwnership): device routes (workloads, the VXLAN device) with
DeviceRouteProtocol (boot by default), routes via a gateway with 80 unless
DeviceRouteProtocol is something else; ours are routes of the exclusive protocol, routes on
the VXLAN device, and routes on workload interfaces (any of them with RemoveExternalRoutes,
else those of our protocols). Ours that nobody wants are removed. Every call opens its own
rtnetlink socket (rtnl.py: the dumps and one batch of requests, packed by hand, where
pyroute2 cost 0.2 s of Python for 200 workloads) in the worker thread that runs it. An
interface's index and up flag are looked up by name with ioctls (cheap), not by dumping
every link.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import logging
import os
import socket
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import trio

from pyfelix_dataplane.linux.commands import writing
from pyfelix_dataplane.linux.rtnl import (
    NLM_F_REQUEST,
    REPLACE,
    RT_SCOPE_LINK,
    RT_SCOPE_UNIVERSE,
    RTM_DELROUTE,
    RTM_NEWNEIGH,
    RTM_NEWROUTE,
    Rtnl,
    neighbour_message,
    route_message,
)

if TYPE_CHECKING:
    from pyroute2 import IPRoute

log = logging.getLogger(__name__)

FELIX_ROUTE_PROTO = 80
MAIN_TABLE = 254
SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
IFF_RUNNING = 0x40
NUD_PERMANENT = 0x80
RTNH_F_ONLINK = 0x4


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
    with Rtnl() as nl:
        existing: dict[str, tuple[int | None, str | None, int]] = {}
        sources: dict[str, str] = {}
        #: Every route of ours per destination by metric (one dst may have several metrics).
        metrics: dict[str, dict[int, tuple[int, int]]] = {}
        for family in (socket.AF_INET, socket.AF_INET6):
            for route in nl.routes(family, MAIN_TABLE):
                dst = route.dst
                if dst is None or (family == socket.AF_INET6 and dst == "fe80::"):
                    continue  # the kernel's IPv6 link-local route: never anyone's
                if not ownership.is_ours(_interface_name(route.oif, names), route.proto):
                    continue
                key = f"{dst}/{route.dst_len}"
                metrics.setdefault(key, {})[route.priority] = (route.proto, route.scope)
                existing[key] = (route.oif, route.gateway, route.proto)
                sources[key] = route.prefsrc
        configured: set[str] = set()
        rp_filter = default_rp_filter()
        #: (destination, message) in the order sent; the destination is "" for neighbours.
        batch: list[tuple[str, tuple[int, int, bytes]]] = []
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
                batch.append((dst, _route_via(dst, wanted.gateway, index, proto)))
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
                batch.append((dst, request))
                done[dst] = "added"
                # Of another metric, an old route is another route: it goes once ours is in.
                stale_metrics.extend((dst, priority, *v) for priority, v in others.items())
            if wanted.mac and ":" not in dst:
                batch.append(("", _permanent_neighbour(dst, wanted.mac, index)))
        # One send for all (pyroute2 spent about 0.5 ms on each request made on its own). A
        # route via a gateway the kernel refuses waits for the next apply; a workload's route
        # or neighbour refused fails the apply (retried, as every failed write).
        refused: OSError | None = None
        for (dst, _), error in zip(batch, nl.request([m for _, m in batch]), strict=True):
            if not error:
                continue
            if dst in desired and desired[dst].gateway:
                log.warning(
                    "cannot route %s via %s: %s", dst, desired[dst].gateway, os.strerror(error)
                )
                done[dst] = "failed"
            elif refused is None:
                refused = OSError(
                    error, f"cannot write {dst or 'a neighbour'}: {os.strerror(error)}"
                )
        removals = [
            (dst, p, *v)
            for dst in existing.keys() - desired.keys()
            for p, v in metrics[dst].items()
        ]
        # The kernel only deletes a route whose scope (and metric) match the request's.
        deletions = [
            route_message(dst, table=MAIN_TABLE, proto=proto, scope=scope, priority=priority)
            for dst, priority, proto, scope in stale_metrics + removals
        ]
        errors = nl.request([(RTM_DELROUTE, NLM_F_REQUEST, body) for body in deletions])
        for (dst, *_), error in zip(stale_metrics + removals, errors, strict=True):
            if error and error != errno.ESRCH:
                log.warning("cannot remove route %s: %s", dst, os.strerror(error))
            elif dst not in desired:
                done[dst] = "removed"
    if refused is not None:
        raise refused
    return done


IPV6_DEFAULT_METRIC = 1024


def direct_route(
    dst: str,
    index: int,
    table: int = MAIN_TABLE,
    *,
    proto: int = FELIX_ROUTE_PROTO,
    src: str = "",
    priority: int = 0,
) -> tuple[int, int, bytes]:
    """The request for ``dst`` straight out of interface ``index`` (scope link) with protocol
    ``proto`` (and metric ``priority``), replacing any route there of that metric; sent with
    others in one ``Rtnl.request``."""
    body = route_message(
        dst,
        table=table,
        proto=proto,
        scope=RT_SCOPE_LINK,
        oif=index,
        prefsrc=src,
        priority=priority,
    )
    return RTM_NEWROUTE, REPLACE, body


def _permanent_neighbour(dst: str, mac: str, index: int) -> tuple[int, int, bytes]:
    """The request for a permanent neighbour entry (a workload's MAC), sent in a batch."""
    address = str(ipaddress.ip_network(dst).network_address)
    return RTM_NEWNEIGH, REPLACE, neighbour_message(address, mac, index, NUD_PERMANENT)


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


def _route_via(dst: str, gateway: str, index: int | None, proto: int) -> tuple[int, int, bytes]:
    """A route through a gateway: onlink out of ``index`` when given (the gateway is a VXLAN
    tunnel address, reachable only through that device), else as the kernel resolves it."""
    body = route_message(
        dst,
        table=MAIN_TABLE,
        proto=proto,
        scope=RT_SCOPE_UNIVERSE,
        oif=index,
        gateway=gateway,
        route_flags=RTNH_F_ONLINK if index is not None else 0,
    )
    return RTM_NEWROUTE, REPLACE, body


class RouteWriter:
    async def apply(
        self, desired: Mapping[str, RouteTarget], ownership: RouteOwnership | None = None
    ) -> dict[str, str]:
        with writing("routes"):
            return await trio.to_thread.run_sync(sync_routes, dict(desired), ownership)
