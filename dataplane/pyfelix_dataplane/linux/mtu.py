"""MTUs as Felix works them out: the host's, each tunnel's, and the pods' (the mtu file).

The host MTU is the smallest MTU of the interfaces that are up and match MTUIfacePattern
(1460, the smallest of the common clouds, when none does). A tunnel whose MTU is not
configured gets the host MTU less its overhead, whether or not it is on, as Felix defaults
them; the pods get the smallest MTU of the tunnels that are on (the host MTU when none is),
written to ``mtu`` in the state directory, where the CNI plugin (and ``pyfelix pods``) reads
it. Felix re-detects the host MTU every 30 s and restarts when it changes; the driver does
the same with ``host_mtu``. What is on comes from the caller (the encapsulation and the
WireGuard settings).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

import attrs

from pyfelix.config import FelixConfig
from pyfelix_dataplane.linux.ipip import IPIP_OVERHEAD
from pyfelix_dataplane.linux.rtnl import Rtnl
from pyfelix_dataplane.linux.vxlan import VXLAN_OVERHEAD, VXLAN_V6_OVERHEAD
from pyfelix_dataplane.linux.wireguard import OVERHEAD as WIREGUARD_OVERHEAD
from pyfelix_dataplane.linux.wireguard import OVERHEAD_V6 as WIREGUARD_V6_OVERHEAD

log = logging.getLogger(__name__)

#: When no interface matches MTUIfacePattern: the smallest MTU among common cloud providers.
FALLBACK_HOST_MTU = 1460
#: How often Felix re-detects the host MTU (a change restarts it).
MONITOR_INTERVAL = 30.0
#: Felix's directory for state other components read; PYFELIX_STATE_DIR moves it (tests, or
#: several agents on one machine).
STATE_DIR = "/var/lib/calico"
MTU_FILE = "mtu"

IFF_RUNNING = 0x40
#: (name, MTU, operationally up) of one interface.
Link = tuple[str, int, bool]


def host_mtu(links: Iterable[Link], pattern: str) -> int:
    """The smallest MTU of the up interfaces matching ``pattern`` (FALLBACK_HOST_MTU if none)."""
    matcher = re.compile(pattern)
    candidates = [mtu for name, mtu, up in links if up and matcher.search(name)]
    if not candidates:
        log.warning(
            "no interface that is up matches MTUIfacePattern %r: assuming a host MTU of %d"
            " (set mtuIfacePattern to match this host's interfaces)",
            pattern,
            FALLBACK_HOST_MTU,
        )
        return FALLBACK_HOST_MTU
    return min(candidates)


@attrs.frozen
class TunnelMTUs:
    """Each tunnel's MTU: configured, or the host MTU less its overhead (IPv6's outer header
    costs 20 bytes more than IPv4's)."""

    host: int
    ipip: int
    vxlan: int
    wireguard: int
    vxlan_v6: int = 0
    wireguard_v6: int = 0

    @classmethod
    def of(cls, config: FelixConfig, host: int) -> TunnelMTUs:
        return cls(
            host=host,
            ipip=config.ipip_mtu or host - IPIP_OVERHEAD,
            vxlan=config.vxlan_mtu or host - VXLAN_OVERHEAD,
            wireguard=config.wireguard_mtu or host - WIREGUARD_OVERHEAD,
            vxlan_v6=config.vxlan_mtu_v6 or host - VXLAN_V6_OVERHEAD,
            wireguard_v6=config.wireguard_mtu_v6 or host - WIREGUARD_V6_OVERHEAD,
        )

    def pod_mtu(
        self,
        *,
        ipip: bool,
        vxlan: bool,
        wireguard: bool,
        vxlan_v6: bool = False,
        wireguard_v6: bool = False,
    ) -> int:
        """The smallest MTU of the tunnels that are on; the host MTU when none is."""
        tunnels = (
            (self.ipip, ipip),
            (self.vxlan, vxlan),
            (self.wireguard, wireguard),
            (self.vxlan_v6, vxlan_v6),
            (self.wireguard_v6, wireguard_v6),
        )
        on = [mtu for mtu, enabled in tunnels if enabled]
        if not on:
            return self.host
        smallest = min(on)
        if smallest > self.host:
            log.warning(
                "the configured tunnel MTU %d is larger than the host MTU %d", smallest, self.host
            )
        return smallest


def state_dir() -> Path:
    return Path(os.environ.get("PYFELIX_STATE_DIR") or STATE_DIR)


def mtu_file(directory: Path | None = None) -> Path:
    """Where the pods' MTU is kept (in ``directory``, else the state directory)."""
    return (directory or state_dir()) / MTU_FILE


def write_mtu_file(mtu: int, directory: Path | None = None) -> Path:
    """Write the pods' MTU where the CNI plugin reads it; raises OSError."""
    path = mtu_file(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(mtu))
    return path


def read_mtu_file(directory: Path | None = None) -> int | None:
    """The pods' MTU as the agent wrote it, None if it has not (or it is not a number)."""
    try:
        return int(mtu_file(directory).read_text().strip())
    except (OSError, ValueError):
        return None


def read_links() -> list[Link]:
    """Every interface of this network namespace; up means running (IFF_RUNNING), as
    Felix's interface monitor reads the operational state."""
    with Rtnl() as nl:
        return [(name, mtu, bool(flags & IFF_RUNNING)) for name, mtu, flags in nl.links()]
