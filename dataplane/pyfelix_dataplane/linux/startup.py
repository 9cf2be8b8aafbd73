"""What the Linux driver does before its first apply, and the one setting it follows after.

``StartupProbe`` probes the kernel's tools with the start-up configuration (the iptables
backend, the nftables mode) beside the first read, read-only, as Felix detects its backend
when its dataplane starts, then reads the tables they lead to while the snapshot still loads.
At InSync the driver takes the probe and the readings if the settings they were made for
still hold (``answers``), and probes again otherwise. ``follow_kube_proxy`` is NFTablesMode
Auto's watch on kube-proxy's mode. Neither writes anything; what is written is the
managers'.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

from pyfelix.config import FelixConfig
from pyfelix.errors import DataplaneWriteError, RestartRequired
from pyfelix_dataplane.linux.kernel import EarlyReaders, KernelProbe
from pyfelix_dataplane.linux.managers.tables import TableReading, read_tables
from pyfelix_dataplane.linux.reading import Reading, start_reading

if TYPE_CHECKING:
    from pyfelix_dataplane.linux.nftables import KernelTable

log = logging.getLogger(__name__)

#: How often NFTablesMode Auto looks at kube-proxy's mode again (Felix's 15 s).
KUBE_PROXY_CHECK_INTERVAL = 15.0


@attrs.define(eq=False)
class StartupProbe:
    probe_kernel: Callable[[FelixConfig], Awaitable[KernelProbe]]
    early_readers: Callable[[FelixConfig, KernelProbe], EarlyReaders]
    #: The configuration the agent starts with; None: nothing is probed before InSync.
    config: FelixConfig | None
    probe: KernelProbe | None = None
    #: Set once the probe has been made, or has failed.
    probed: trio.Event = attrs.Factory(trio.Event)
    #: The tables read after the probe, per IP version: iptables', nftables'.
    tables: dict[int, TableReading] = attrs.Factory(dict)
    nftables: dict[int, Reading[KernelTable | None]] = attrs.Factory(dict)

    async def run(self, nursery: trio.Nursery) -> None:
        """Probe, then start the readings in ``nursery``. A failure here is left for the
        probe at InSync, where it counts. A restarted node's tables hold the last run's
        rules, whose reading (a fifth of a second of the tools' time on a large node) the
        first apply's plans would otherwise wait for; a table changed between this reading
        and that apply's write makes the write fail (and the apply retry, reading again) or
        is put right by the check after it, as for any reading."""
        try:
            if self.config is not None:
                self.probe = await self.probe_kernel(self.config)
        except DataplaneWriteError as exc:
            log.debug("probing the kernel before InSync failed (%s); probing at InSync", exc)
        finally:
            self.probed.set()
        if self.probe is not None and self.config is not None:
            readers = self.early_readers(self.config, self.probe)
            self.tables = read_tables(readers.tables, nursery)
            self.nftables = {
                v: start_reading(reader.read, nursery, f"IPv{v} nftables table")
                for v, reader in readers.nftables.items()
            }
            # The tables' text (megabytes on a large node) lives on in the readers only.
            self.probe = attrs.evolve(self.probe, saved={})

    def answers(self, config: FelixConfig) -> bool:
        """Whether the probe (and so the readings) stands for ``config``."""
        return self.probe is not None and self.probe.answers(config)

    def take_readings(
        self,
    ) -> tuple[dict[int, TableReading], dict[int, Reading[KernelTable | None]]]:
        """The readings, handed over once (the probe keeps no reference to them)."""
        tables, nftables = self.tables, self.nftables
        self.tables, self.nftables = {}, {}
        return tables, nftables


async def follow_kube_proxy(detect: Callable[[], Awaitable[bool]], now: bool) -> None:
    """NFTablesMode Auto, as Felix: when kube-proxy's mode (nftables or not) changes, the
    agent restarts into the other one."""
    while True:
        await trio.sleep(KUBE_PROXY_CHECK_INTERVAL)
        try:
            detected = await detect()
        except DataplaneWriteError as exc:
            log.warning("cannot tell kube-proxy's mode: %s", exc)
            continue
        if detected != now:
            mode = "nftables" if detected else "iptables"
            raise RestartRequired(f"kube-proxy now runs in {mode} mode (NFTablesMode Auto)")
