"""The interface monitor: netlink link and address events, read on the kernel socket from Trio.

A workload's interface usually appears after its endpoint is known (the CNI plugin creates it);
the driver must route it the moment it comes up, not at the next refresh. Host endpoints are
resolved by interface name or address, so address changes matter too.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Awaitable, Callable

import trio

from pyfelix_dataplane.linux import rtnl
from pyfelix_dataplane.linux.mtu import Link

log = logging.getLogger(__name__)

GROUPS = rtnl.RTMGRP_LINK | rtnl.RTMGRP_IPV4_IFADDR | rtnl.RTMGRP_IPV6_IFADDR


async def watch_interfaces(on_change: Callable[[str], None]) -> None:
    """Call ``on_change(name)`` for every link event (created, changed, removed) and every
    address added to or removed from an interface. Events the socket had no room for (a
    burst of thousands) are made up for by reporting every interface."""
    with rtnl.subscribe(GROUPS) as sock:
        while True:
            await trio.lowlevel.wait_readable(sock)
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                log.warning("interface events were lost (a burst): rechecking every interface")
                with rtnl.Rtnl() as netlink:
                    links = await trio.to_thread.run_sync(netlink.links)
                for name, _, _ in links:
                    on_change(name)
                continue
            for link, index in rtnl.event_interfaces(data):
                try:
                    on_change(link or socket.if_indextoname(index))
                except OSError:
                    continue  # an address's interface, gone already: its link event says so


async def rescan_interfaces(
    links: Callable[[], Awaitable[list[Link]]],
    interval: Callable[[], float],
    on_change: Callable[[str], None],
) -> None:
    """Felix's interface monitor resync: every InterfaceRefreshInterval (``interval``; 0:
    never) every interface is treated as changed, so an event the monitor missed costs at
    most that long."""
    while True:
        seconds = interval()
        if seconds <= 0:
            await trio.sleep_forever()  # a change of the setting restarts the agent
        await trio.sleep(seconds)
        for name, _, _ in await links():
            on_change(name)
