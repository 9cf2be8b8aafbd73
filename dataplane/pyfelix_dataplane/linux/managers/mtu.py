"""MTUs: Felix's start-of-day detection of the host's MTU, the tunnels' defaulted from it,
the pods' written for the CNI plugin, then its periodic re-detection.

The tunnel managers (VXLAN, IPIP, WireGuard) pull their devices' MTUs from here; nothing
else assigns them. Detection starts when the first apply starts its devices and routes
(``start``): the links are read once the first tables are with their tools, as only the
devices need the MTUs, and reading 400 links takes the GIL from the rendering for 8-10 ms.
The devices wait for ``known``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import trio

from pyfelix import messages as m
from pyfelix.errors import FatalShutdown, RestartRequired
from pyfelix_dataplane.linux.kernel import InterfaceReading
from pyfelix_dataplane.linux.mtu import (
    MONITOR_INTERVAL,
    Link,
    TunnelMTUs,
    host_mtu,
    mtu_file,
    write_mtu_file,
)
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class MtuManager:
    state: NodeState
    interfaces: InterfaceReading
    #: Where the pods' MTU is written (Felix's /var/lib/calico).
    state_dir: Path
    interval: float = MONITOR_INTERVAL
    #: The tunnels' MTUs, once detected.
    tunnels: TunnelMTUs | None = None
    #: Set once the tunnels' MTUs are known.
    known: trio.Event = attrs.Factory(trio.Event)
    _wanted: trio.Event = attrs.Factory(trio.Event)

    def start(self) -> None:
        """The first apply starts its devices: detect now."""
        self._wanted.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Detect once started, then re-detect every ``interval``: a changed host MTU
        restarts the agent, as in Felix."""
        task_status.started()
        await self._wanted.wait()
        links = await self.interfaces.links()
        host = self._configure(links)
        self.known.set()
        while True:
            await trio.sleep(self.interval)
            now = host_mtu(await self.interfaces.links(), self.state.config.mtu_iface_pattern)
            if now != host:
                raise RestartRequired(f"host MTU changed from {host} to {now}")

    def _configure(self, links: list[Link]) -> int:
        """The host's MTU detected, the tunnels' from it, the pods' written (a failure is
        fatal with RequireMTUFile, as Felix). Returns the host MTU."""
        config = self.state.config
        host = host_mtu(links, config.mtu_iface_pattern)
        self.tunnels = tunnels = TunnelMTUs.of(config, host)
        encapsulation = self.state.encapsulation or m.Encapsulation(False, False)
        pod = tunnels.pod_mtu(
            ipip=encapsulation.ipip_enabled,
            vxlan=encapsulation.vxlan_enabled,
            wireguard=config.wireguard_enabled,
            vxlan_v6=encapsulation.vxlan_enabled_v6,
            wireguard_v6=config.wireguard_enabled_v6,
        )
        target = mtu_file(self.state_dir)
        try:
            write_mtu_file(pod, self.state_dir)
        except OSError as exc:
            if config.require_mtu_file:
                raise FatalShutdown(
                    f"cannot write the pods' MTU to {target} ({exc}) and RequireMTUFile is set"
                ) from exc
            log.error(
                "cannot write the pods' MTU to %s (%s): pods may get a wrong MTU", target, exc
            )
        else:
            log.info("host MTU %d, pod MTU %d (in %s)", host, pod, target)
        return host

    # The figures the tunnel managers pull (0 until detected: no device is written before).
    @property
    def vxlan(self) -> int:
        return self.tunnels.vxlan if self.tunnels else 0

    @property
    def vxlan_v6(self) -> int:
        return self.tunnels.vxlan_v6 if self.tunnels else 0

    @property
    def ipip(self) -> int:
        return self.tunnels.ipip if self.tunnels else 0

    @property
    def wireguard(self) -> int:
        return self.tunnels.wireguard if self.tunnels else 0

    @property
    def wireguard_v6(self) -> int:
        return self.tunnels.wireguard_v6 if self.tunnels else 0
