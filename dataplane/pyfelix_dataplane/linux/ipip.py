"""The IPIP writer: Felix's ``tunl0`` device, as its IPIP manager keeps it.

When IPIP is on and this node has an IPIP tunnel address (IpInIpTunnelAddr), tunl0 exists (the
kernel makes it in every namespace once the ipip module is loaded; created otherwise), is up
with the IPIP MTU and holds the tunnel address (/32) as its only IPv4 address. When IPIP is
off the device is left (the kernel's) but its addresses are removed, as Felix's clean-up does.
The routes to remote blocks (via each node's IP, onlink out of tunl0) are the route writer's.
One IPRoute per call, in the calling worker thread.
"""

from __future__ import annotations

import errno
import logging

import attrs

from pyfelix_dataplane.linux.commands import writing
from pyfelix_dataplane.linux.pyroute import iproute, netlink_error
from pyfelix_dataplane.linux.routes import link_flags, sync_only_address

log = logging.getLogger(__name__)

DEVICE = "tunl0"
#: What encapsulation costs: the outer IPv4 header.
IPIP_OVERHEAD = 20


@attrs.frozen
class IpipDevice:
    """tunl0 as it must be: its address (this node's IpInIpTunnelAddr) and MTU."""

    address: str
    mtu: int


@writing("IPIP device")
def sync_ipip(device: IpipDevice | None) -> str:
    """Make the kernel match; returns "absent" (IPIP off) or "ready". Blocking."""
    if device is None and link_flags(DEVICE) is None:
        return "absent"  # nothing to take off
    with iproute() as ipr:
        found = ipr.link_lookup(ifname=DEVICE)
        if device is None:
            if found:
                sync_only_address(ipr, found[0], "")
            return "absent"
        if not found:
            try:
                ipr.link("add", ifname=DEVICE, kind="ipip")
                log.info("created %s", DEVICE)
            except netlink_error() as exc:
                # Loading the ipip module (which this add may do) makes tunl0 itself.
                if exc.code != errno.EEXIST:
                    raise
            found = ipr.link_lookup(ifname=DEVICE)
        index = found[0]
        ipr.link("set", index=index, mtu=device.mtu, state="up")
        sync_only_address(ipr, index, device.address)
    return "ready"
