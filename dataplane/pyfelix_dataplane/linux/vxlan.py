"""The VXLAN writer: Felix's ``vxlan.calico`` device (``vxlan-v6.calico`` for IPv6) and what
each remote VTEP needs.

When VXLAN is enabled for an IP version and this node's own VTEP of that version is known,
the device exists with the configured VNI and port, learning off, its local address and parent
being this node's underlay address of that version and the interface holding it, its MAC and
tunnel address (/32 or /128) being the VTEP's; for every remote VTEP there is a permanent ARP
(IPv6: NDP) entry (tunnel address -> VTEP MAC) and an FDB entry (VTEP MAC -> the remote node's
underlay address). The routes to remote blocks, via the tunnel addresses with onlink, are the
route writer's. Anything else on the device is removed; when VXLAN is off, the device is
deleted. One IPRoute per call, in the calling worker thread.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING

import attrs

from pyfelix_dataplane.linux.commands import writing
from pyfelix_dataplane.linux.pyroute import iproute, netlink_error
from pyfelix_dataplane.linux.routes import NUD_PERMANENT, link_flags, sync_only_address

if TYPE_CHECKING:
    from pyroute2 import IPRoute

log = logging.getLogger(__name__)

DEVICE = "vxlan.calico"
DEVICE_V6 = "vxlan-v6.calico"
#: What encapsulation costs: outer IPv4 (20), UDP (8), VXLAN (8) and inner Ethernet (14).
VXLAN_OVERHEAD = 50
#: The same over IPv6, whose header is 40 bytes.
VXLAN_V6_OVERHEAD = 70


def device_name(version: int) -> str:
    return DEVICE_V6 if version == 6 else DEVICE


def _family(version: int) -> int:
    return socket.AF_INET6 if version == 6 else socket.AF_INET


@attrs.frozen
class VtepDevice:
    """This node's VTEP, as the device must be; ``mtu`` 0 leaves the kernel's (the parent's
    less the overhead); the driver gives it Felix's (linux/mtu.py)."""

    vni: int
    port: int
    mac: str
    tunnel_ip: str
    parent_ip: str
    mtu: int = 0
    version: int = 4


@attrs.frozen
class RemoteVtep:
    tunnel_ip: str
    mac: str
    parent_ip: str


def _parent(ipr: IPRoute, address: str, version: int) -> int | None:
    """The index of the interface holding ``address``."""
    for entry in ipr.get_addr(family=_family(version)):
        if entry.get_attr("IFA_ADDRESS") == address:
            return int(entry["index"])
    return None


def _matches(link: object, want: VtepDevice, parent: int) -> bool:
    """Whether an existing device has the settings that cannot change in place."""
    info = link.get_attr("IFLA_LINKINFO")  # type: ignore[attr-defined]
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    if info is None or info.get_attr("IFLA_INFO_KIND") != "vxlan" or data is None:
        return False
    local = data.get_attr("IFLA_VXLAN_LOCAL6" if want.version == 6 else "IFLA_VXLAN_LOCAL")
    return bool(
        data.get_attr("IFLA_VXLAN_ID") == want.vni
        and data.get_attr("IFLA_VXLAN_PORT") == want.port
        and local == want.parent_ip
        and data.get_attr("IFLA_VXLAN_LINK") == parent
        and not data.get_attr("IFLA_VXLAN_LEARNING")
    )


@writing("VXLAN device")
def sync_vxlan(device: VtepDevice | None, remotes: Collection[RemoteVtep], version: int = 4) -> str:
    """Make the kernel's device of IP ``version`` match; returns "absent", "ready", or
    "waiting" (no interface holds the underlay address yet). Blocking."""
    name = device_name(version)
    if device is None and link_flags(name) is None:
        return "absent"  # nothing to remove
    with iproute() as ipr:
        found = ipr.link_lookup(ifname=name)
        if device is None:
            if found:
                log.info("VXLAN disabled: deleting %s", name)
                ipr.link("del", index=found[0])
            return "absent"
        parent_index = _parent(ipr, device.parent_ip, version)
        if parent_index is None:
            log.warning("no interface holds %s (VXLAN parent); waiting", device.parent_ip)
            return "waiting"
        if found and not _matches(ipr.get_links(found[0])[0], device, parent_index):
            log.info("%s has other VXLAN settings: recreating it", name)
            ipr.link("del", index=found[0])
            found = []
        if not found:
            local = {"vxlan_local6" if version == 6 else "vxlan_local": device.parent_ip}
            ipr.link(
                "add",
                ifname=name,
                kind="vxlan",
                vxlan_id=device.vni,
                vxlan_port=device.port,
                vxlan_learning=0,
                vxlan_link=parent_index,
                **local,
            )
            found = ipr.link_lookup(ifname=name)
        index = found[0]
        sized = {"mtu": device.mtu} if device.mtu else {}
        ipr.link("set", index=index, address=device.mac, state="up", **sized)
        sync_only_address(ipr, index, device.tunnel_ip, version)
        neighbours = {r.tunnel_ip: r.mac.lower() for r in remotes}
        _sync_neighbours(ipr, index, neighbours, version)
        _sync_fdb(ipr, index, {r.mac.lower(): r.parent_ip for r in remotes})
    return "ready"


def _sync_neighbours(ipr: IPRoute, index: int, wanted: dict[str, str], version: int) -> None:
    present = {
        entry.get_attr("NDA_DST"): (entry.get_attr("NDA_LLADDR") or "").lower()
        for entry in ipr.get_neighbours(ifindex=index, family=_family(version))
        if entry["state"] & NUD_PERMANENT
    }
    family = _family(version)
    for address in present.keys() - wanted.keys():
        ipr.neigh("del", dst=address, ifindex=index, family=family)
    for address, mac in wanted.items():
        if present.get(address) != mac:
            entry = {"lladdr": mac, "ifindex": index, "state": NUD_PERMANENT, "family": family}
            ipr.neigh("replace", dst=address, **entry)


def _sync_fdb(ipr: IPRoute, index: int, wanted: dict[str, str]) -> None:
    present: dict[str, str] = {}
    for entry in ipr.fdb("dump", ifindex=index):
        mac, dst = entry.get_attr("NDA_LLADDR"), entry.get_attr("NDA_DST")
        if entry["ifindex"] == index and mac and dst:
            present[mac.lower()] = dst
    for mac, dst in present.items():
        if wanted.get(mac) != dst:
            ipr.fdb("del", ifindex=index, lladdr=mac, dst=dst)
    for mac, dst in wanted.items():
        if present.get(mac) != dst:
            try:
                ipr.fdb("append", ifindex=index, lladdr=mac, dst=dst)
            except netlink_error() as exc:
                log.warning("cannot add FDB entry %s -> %s: %s", mac, dst, exc)
