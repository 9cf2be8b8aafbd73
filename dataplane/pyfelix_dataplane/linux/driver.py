"""The Linux driver: the loop that brings the kernel to the node's desired state. It only
loops and orders; what each part of the kernel holds is its manager's business.

``apply`` (called by the connector for every message) updates the desired state (NodeState)
and hands the message to every manager (``on_update``). Once the first InSync has arrived,
the loop wakes on changes, on netlink link and address events and on refresh periods, lets
the messages already on their way arrive, and (rate limited by a leaky bucket: ten applies at
once, then one per 10 ms) completes the managers' work in Felix's order
(pyfelix_dataplane.linux.managers): host endpoints resolved, the tables written by the table
mode (iptables with its IP sets, or nftables), each IP version's as the next is rendered,
beside the devices and routes, then the mode's clean-up, endpoint status reported. A failure
in one area lets the others finish; the apply is then retried with backoff, every area read
again. What a refresh period does is pyfelix_dataplane.linux.refresh's. The first successful
apply is reported as DataplaneInSync; process status goes out every ReportingIntervalSecs.

What the kernel is comes from ``open_kernel`` (the real one, or a test's fake). With the
start-up configuration (``startup_config``), the kernel is probed before InSync
(pyfelix_dataplane.linux.startup); the probe and its readings stand at InSync if the
settings they were made for hold.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix.errors import DataplaneWriteError
from pyfelix.stats import DataplaneStats
from pyfelix.throttle import LeakyBucket
from pyfelix_dataplane.driver import ToCalc
from pyfelix_dataplane.linux.kernel import EarlyReaders, Kernel, KernelProbe
from pyfelix_dataplane.linux.managers.assembly import Managers
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.linux.monitor import rescan_interfaces
from pyfelix_dataplane.linux.mtu import MONITOR_INTERVAL, state_dir
from pyfelix_dataplane.linux.opening import early_readers, linux_kernel, probe_kernel
from pyfelix_dataplane.linux.refresh import Refresher
from pyfelix_dataplane.linux.startup import StartupProbe, follow_kube_proxy
from pyfelix_dataplane.process_status import report_process_status
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)

#: The apply throttle, Felix's leaky bucket: a burst of ten applies, then one per interval
#: while changes keep coming (they coalesce in the desired state meanwhile). Felix refills
#: every 100 ms, which puts each change of a steady stream up to 100 ms behind; an apply of a
#: few changes costs 2-4 ms here, so a token every 10 ms keeps applying under a third of a
#: core and a stream's changes 10 ms behind (bench/RESULTS.md).
APPLY_BURST = 10
APPLY_REFILL_INTERVAL = 0.01
#: Before applying, the loop yields until this many passes of the scheduler bring no message:
#: a flush of the calculation graph arrives one message at a time.
QUIET_PASSES = 2
#: ... but gathers for this long at most.
GATHER_MAX = 0.05
#: The loop reports its health at least this often, idle or not (Felix's healthInterval).
HEALTH_INTERVAL = 10.0
RETRY_START = 0.2
RETRY_MAX = 10.0


@attrs.define(eq=False)
class LinuxDriver:
    to_calc: ToCalc
    hostname: str = ""
    state: NodeState = attrs.Factory(NodeState)
    #: Told (ready) on every round of the apply loop and every HEALTH_INTERVAL while idle;
    #: ready once the first apply succeeded.
    report_health: Callable[[bool], None] = lambda ready: None
    open_kernel: Callable[[FelixConfig, KernelProbe | None], Awaitable[Kernel]] = linux_kernel
    probe_kernel: Callable[[FelixConfig], Awaitable[KernelProbe]] = probe_kernel
    #: What to read after the probe, before InSync (``early_readers``).
    early_readers: Callable[[FelixConfig, KernelProbe], EarlyReaders] = early_readers
    #: The configuration the agent starts with (its FelixConfigurations and environment, as
    #: the calculation graph will send it): the kernel is probed with it before InSync.
    startup_config: FelixConfig | None = None
    #: Counts and timings for Felix's metrics.
    stats: DataplaneStats = attrs.Factory(DataplaneStats)
    managers: Managers | None = None
    #: Where the pods' MTU is written (Felix's /var/lib/calico; PYFELIX_STATE_DIR moves it).
    state_dir: Path = attrs.Factory(state_dir)
    mtu_interval: float = MONITOR_INTERVAL
    throttle: LeakyBucket = attrs.Factory(lambda: LeakyBucket(APPLY_REFILL_INTERVAL, APPLY_BURST))
    _wake: trio.Event = attrs.Factory(trio.Event)
    _received: int = 0
    #: The messages received before the last apply (the next one takes in the rest).
    _taken: int = 0
    _reported_in_sync: bool = False
    _remove_other_mode: Callable[[], Awaitable[None]] | None = None
    _started: float = 0.0
    #: Set once the first apply has handed its tables to the kernel's tools (or failed): from
    #: then on this process mostly waits for them, and work that can wait may run.
    writing: trio.Event = attrs.Factory(trio.Event)

    async def apply(self, msg: m.ToDataplane) -> None:
        self.state.apply(msg)
        if self.managers is not None:
            self.managers.on_update(msg)
        self.stats.messages[type(msg).__name__] += 1
        self._received += 1
        self._wake.set()

    def _rescan_interval(self) -> float:  # InterfaceRefreshInterval, as configured now
        return self.state.config.interface_refresh_interval

    def _wake_up(self) -> None:
        """Wake the loop (the event is a new one after each apply)."""
        self._wake.set()

    async def _gather(self) -> None:
        """Let the messages already on their way arrive, as Felix drains its channel before an
        apply: otherwise the first message of a flush would be applied on its own. Not for
        longer than GATHER_MAX: a calculation graph kept busy (pods created without pause)
        never goes quiet, and what it has sent must not wait for it."""
        quiet, until = 0, trio.current_time() + GATHER_MAX
        while quiet < QUIET_PASSES and trio.current_time() < until:
            received = self._received
            await trio.lowlevel.checkpoint()
            quiet = quiet + 1 if self._received == received else 0

    @property
    def public_key(self) -> str:
        return self.managers.wireguard.public_key if self.managers else ""

    def _on_interface(self, name: str) -> None:
        """A link or an address changed: apply now if a manager wants to (the first apply,
        before the managers exist, reads every interface anyway)."""
        if self.managers is not None and self.managers.on_interface(name, self.state):
            self._wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_process_status, self.state, self.to_calc, self._started)
            startup = StartupProbe(self.probe_kernel, self.early_readers, self.startup_config)
            nursery.start_soon(startup.run, nursery)
            task_status.started()
            # The configuration (IptablesBackend, refresh intervals) arrives with the snapshot:
            # nothing is written, nor the backend chosen, before InSync (_probe_early only
            # reads, with the start-up configuration).
            while not self.state.in_sync:
                self.report_health(False)
                with trio.move_on_after(HEALTH_INTERVAL):
                    await self._wake.wait()
                    self._wake = trio.Event()
            log.info(
                "in sync: %d local workloads, %d host endpoints, %d active policies",
                len(self.state.workloads),
                len(self.state.hosts),
                len(self.state.policies),
            )
            await startup.probed.wait()
            kernel = await self.open_kernel(self.state.config, startup.probe)
            self._remove_other_mode = kernel.remove_other_mode
            nursery.start_soon(kernel.watch, self._on_interface)
            mtus = partial(
                MtuManager, self.state, state_dir=self.state_dir, interval=self.mtu_interval
            )
            self.managers = managers = Managers.build(
                self.state, kernel, self.hostname, self.to_calc, mtus=mtus, stats=self.stats
            )
            tables, nftables = startup.take_readings()
            if startup.answers(self.state.config):
                # The kernel was opened with the probe the early readings were made with.
                managers.table_mode.adopt(tables, nftables)
            log.info("programming with %s", kernel.description)
            await nursery.start(managers.mtus.run)
            links, interval = kernel.interfaces.links, self._rescan_interval
            nursery.start_soon(rescan_interfaces, links, interval, self._on_interface)
            if kernel.kube_proxy_nftables is not None:
                nursery.start_soon(
                    follow_kube_proxy, kernel.kube_proxy_nftables, bool(kernel.nftables)
                )
            await self._loop(managers, nursery)

    async def _loop(self, managers: Managers, nursery: trio.Nursery) -> None:
        self._wake.set()
        retry = RETRY_START
        refresher = Refresher(self._wake_up)
        while True:
            self.report_health(self._reported_in_sync)
            health_due = trio.current_time() + HEALTH_INTERVAL
            with trio.move_on_at(min(refresher.next_due(), health_due)):
                await self._wake.wait()
            if not self._wake.is_set() and refresher.next_due() > trio.current_time():
                continue  # only the health tick
            invalidated = refresher.refresh(managers.refreshed(), nursery, self.state.config)
            if not (self._wake.is_set() or invalidated):
                continue  # only a check was due
            if self.throttle.throttled:
                log.debug("dataplane updates throttled")
            await self.throttle.take()
            await self._gather()
            self.stats.batch_sizes.observe(self._received - self._taken)
            self._wake, self._taken = trio.Event(), self._received
            try:
                wrote_tables = await self._apply_all(managers)
            except DataplaneWriteError as exc:
                log.warning("dataplane apply failed (retrying in %.1fs): %s", retry, exc)
                self.stats.failures += 1
                await trio.sleep(retry)
                retry = min(retry * 2, RETRY_MAX)
                refresher.failed()
                continue
            retry = RETRY_START
            refresher.applied(wrote_tables, self.state.config)
            if not self._reported_in_sync:
                self._reported_in_sync = True
                await self.to_calc.send(m.DataplaneInSync())

    async def _apply_all(self, managers: Managers) -> bool:
        """Write what changed since the last apply, in Felix's order: the table mode renders
        and writes each IP version's tables (and, in the iptables mode, the IP sets before
        them); devices and routes are written beside them, once every version is rendered
        (before that their thread would take the GIL from rendering). A failure in one area
        lets the others finish; the first is raised afterwards. Returns whether any table was
        written."""
        started = trio.current_time()
        timeline: dict[str, float] = {}
        failed: list[DataplaneWriteError] = []
        mode = managers.table_mode

        def mark(event: str) -> None:
            timeline[event] = trio.current_time() - started

        async def area(
            write: Callable[[], Awaitable[None]],
            name: str,
            *,
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            # Started with nursery.start, the write runs up to its first wait (its tool
            # started) before the caller goes on: Trio would otherwise run it after the
            # caller's next piece of work (the next version's rendering) half of the time.
            task_status.started()
            try:
                await write()
            except DataplaneWriteError as exc:
                failed.append(exc)
            mark(name)

        async with trio.open_nursery() as nursery:
            await managers.host_facts.complete_deferred_work()
            await managers.endpoints.complete_deferred_work()
            # The sets and every version's chains from one state: messages keep arriving while
            # the writes are awaited, and a rule must never name a set that was not written.
            rendering = managers.endpoints.rendering_state()
            placement = (self.state.rules_generation, managers.endpoints.placement)

            async def start_area(write: Callable[[], Awaitable[None]], name: str) -> None:
                await nursery.start(area, write, name)

            await mode.start(nursery, rendering, placement, start_area, mark)
            mark("routes started")
            managers.mtus.start()
            nursery.start_soon(area, partial(self._apply_routing, managers), "routes")
            self.writing.set()
        wrote_tables = await mode.finish(failed)
        if failed:
            raise failed[0]
        if self._remove_other_mode is not None:
            # Once this mode is in place, never before: the node is never without policy.
            remove, self._remove_other_mode = self._remove_other_mode, None
            await remove()
        self.stats.applies.observe(trio.current_time() - started)
        if self.stats.initial_resync_seconds is None:
            self.stats.initial_resync_seconds = trio.current_time() - self._started
        # The first apply (the start-up cost an operator waits for) is worth an Info line.
        log.log(
            logging.INFO if self.stats.applies.count == 1 else logging.DEBUG,
            "apply %d: %s (%.3fs in all)",
            self.stats.applies.count,
            ", ".join(f"{event} at {at:.3f}s" for event, at in timeline.items()),
            trio.current_time() - started,
        )
        await managers.status.complete_deferred_work()
        return wrote_tables

    async def _apply_routing(self, managers: Managers) -> None:
        """The tunnel devices first (VXLAN's two with their neighbours, IPIP: routes go through
        them), the WireGuard device, peers and routing, then routes; once the MTUs are known."""
        await managers.mtus.known.wait()
        for manager in managers.routing():
            await manager.complete_deferred_work()
