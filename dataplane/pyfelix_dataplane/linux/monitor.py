"""The interface monitor: netlink link events, read on the kernel socket from Trio.

A workload's interface usually appears after its endpoint is known (the CNI plugin creates it);
the driver must route it the moment it comes up, not at the next refresh.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from pyroute2 import IPRSocket
from pyroute2.netlink.rtnl import RTMGRP_LINK


async def watch_interfaces(on_change: Callable[[str], None]) -> None:
    """Call ``on_change(name)`` for every link event (created, changed, removed)."""
    sock = IPRSocket()
    try:
        sock.bind(groups=RTMGRP_LINK)
        raw = getattr(sock, "socket", sock)
        raw.setblocking(False)
        while True:
            await trio.lowlevel.wait_readable(raw.fileno())
            try:
                messages = sock.get()
            except BlockingIOError:
                continue
            for message in messages:
                name = message.get_attr("IFLA_IFNAME")
                if name:
                    on_change(name)
    finally:
        sock.close()
