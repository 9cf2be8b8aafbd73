"""pyroute2, imported where it is first used.

The devices' writers (VXLAN, IPIP, WireGuard) and the host endpoints' address dump use
pyroute2. Importing it costs about 0.09 s (it reads iproute2's tables and builds its message
classes), which a node without overlays or host endpoints need not pay at start-up: its
routes, links, interface events and set elements go over plain sockets (linux/rtnl.py,
linux/nft_elements.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyroute2 import IPRoute


def iproute() -> IPRoute:
    """A new IPRoute socket (a context manager); blocking, for a worker thread."""
    from pyroute2 import IPRoute

    return IPRoute()


def netlink_error() -> Any:
    """pyroute2's NetlinkError (untyped, as pyroute2 is), for an ``except`` clause: evaluated
    only once something was raised."""
    from pyroute2.netlink.exceptions import NetlinkError

    return NetlinkError


def is_netlink_error(exc: BaseException) -> bool:
    """Whether ``exc`` is pyroute2's NetlinkError, without importing pyroute2: if it is not
    imported, nothing raised one."""
    module = sys.modules.get("pyroute2.netlink.exceptions")
    return module is not None and isinstance(exc, module.NetlinkError)
