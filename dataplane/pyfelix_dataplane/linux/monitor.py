"""The interface monitor: netlink link and address events, read on the kernel socket from Trio.

A workload's interface usually appears after its endpoint is known (the CNI plugin creates it);
the driver must route it the moment it comes up, not at the next refresh. Host endpoints are
resolved by interface name or address, so address changes matter too.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import trio
from pyroute2 import IPRSocket
from pyroute2.netlink.rtnl import RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR, RTMGRP_LINK


async def watch_interfaces(on_change: Callable[[str], None]) -> None:
    """Call ``on_change(name)`` for every link event (created, changed, removed) and every
    address added to or removed from an interface."""
    sock = IPRSocket()
    try:
        sock.bind(groups=RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR)
        raw = getattr(sock, "socket", sock)
        raw.setblocking(False)
        while True:
            await trio.lowlevel.wait_readable(raw.fileno())
            try:
                messages = sock.get()
            except BlockingIOError:
                continue
            for message in messages:
                name = message.get_attr("IFLA_IFNAME") or _address_owner(message)
                if name:
                    on_change(name)
    finally:
        sock.close()


def _address_owner(message: Any) -> str:
    """The interface an address message is about ("" if it is gone already)."""
    if message.get_attr("IFA_ADDRESS") is None:
        return ""
    try:
        return socket.if_indextoname(message["index"])
    except OSError:
        return ""
