"""The dataplane connector (the seed's DataplaneConnector): the bridge between the calc loop and
the dataplane driver, in both directions.

To the driver it forwards every message, watching a few on the way: InSync makes the agent
ready; a configuration change that cannot be applied live, or an encapsulation different from
the one at start-up, stop the agent with exit code 129 so that its supervisor restarts it with
the new settings; a datastore marked not ready stops it as a failure (exit code 1), as Felix
does. From the driver it takes status: process status goes to the status reporter, endpoint
status to it (EndpointReportingEnabled) and to the status files (EndpointStatusPathPrefix), a
new WireGuard public key to the key updater.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import trio

from pyfelix import collection
from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix.config.support import NO_EFFECT, no_effect, unsafe
from pyfelix.errors import FatalShutdown, RestartRequired
from pyfelix.status_files import EndpointStatusFiles

log = logging.getLogger(__name__)

#: Felix sleeps this long before exiting for a restart or a failure, "to avoid a tight restart
#: loop" (daemon.go); a signal (other than SIGHUP) exits at once.
SHUTDOWN_PAUSE = 2.0
# Felix applies only these without a restart (the health timeouts live; the others are
# informational and come from ClusterInformation).
LIVE_CONFIG = frozenset({"HealthTimeoutOverrides", "ClusterGUID", "ClusterType", "CalicoVersion"})


class StatusSink(Protocol):
    async def report_process(self, status: m.ProcessStatusUpdate) -> None: ...

    async def report_endpoint(
        self,
        key: object,
        status: str | None,
    ) -> None: ...


@attrs.define(eq=False)
class DataplaneConnector:
    source: trio.MemoryReceiveChannel[m.Flush]
    send_to_driver: Callable[[m.ToDataplane], Awaitable[None]]
    from_driver: trio.MemoryReceiveChannel[m.FromDataplane]
    status: StatusSink | None = None
    #: The endpoint-status directory Calico's CNI plugin reads (None: EndpointStatusPathPrefix
    #: is empty).
    status_files: EndpointStatusFiles | None = None
    on_wireguard_key: Callable[[str, int], None] | None = None
    #: Every configuration the agent runs with (the first, and each live change).
    on_config: Callable[[FelixConfig], None] | None = None
    #: The configuration as Felix's text (to tell what changed) and typed (to use).
    config: dict[str, str] | None = None
    felix_config: FelixConfig | None = None
    encapsulation: m.Encapsulation | None = None
    ready: bool = False
    dataplane_in_sync: bool = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._to_dataplane)
            nursery.start_soon(self._from_dataplane)
            task_status.started()

    def check(self, message: m.ToDataplane) -> None:
        """Raise RestartRequired for messages the running agent cannot absorb."""
        if isinstance(message, m.InSync):
            self.ready = True
        elif isinstance(message, m.DatastoreNotReady):
            raise FatalShutdown("datastore is not ready (ClusterInformation datastoreReady)")
        elif isinstance(message, m.ConfigUpdate):
            new = dict(message.config)
            if self.config is not None:
                changed = {
                    k for k in self.config.keys() | new.keys() if self.config.get(k) != new.get(k)
                }
                if changed - LIVE_CONFIG:
                    names = ", ".join(sorted(changed - LIVE_CONFIG))
                    raise RestartRequired(f"configuration changed: {names}")
            refused = unsafe(new)
            if refused:
                raise FatalShutdown(f"refusing this configuration: {refused[0]}")
            previous = set(no_effect(self.config or {}))
            for name in no_effect(new):
                if name not in previous:
                    log.warning("FelixConfiguration parameter %s is %s", name, NO_EFFECT)
            self.config, self.felix_config = new, message.typed
            if self.on_config is not None:
                self.on_config(message.typed)
        elif isinstance(message, m.Encapsulation):
            if self.encapsulation is not None and message != self.encapsulation:
                raise RestartRequired(
                    f"encapsulation changed from {self.encapsulation} to {message}"
                )
            self.encapsulation = message

    @property
    def _reporting(self) -> bool:
        """EndpointReportingEnabled: endpoint status goes to the datastore (the dataplane
        sends it for the status files too)."""
        return self.felix_config is not None and self.felix_config.endpoint_reporting_enabled

    async def _to_dataplane(self) -> None:
        async for flush in self.source:
            for message in flush:
                self.check(message)
                await self.send_to_driver(message)

    async def _from_dataplane(self) -> None:
        async for message in self.from_driver:
            if isinstance(message, m.DataplaneInSync):
                if not self.dataplane_in_sync:
                    # The first apply's state (chains, rules, sets) is as long-lived as the
                    # snapshot the calculation graph froze at InSync: out of the collector's
                    # reach too, or every full collection walks it again (7-20 ms pauses).
                    collection.keep_heap_as_long_lived()
                self.dataplane_in_sync = True
                if self.status_files is not None:
                    self.status_files.in_sync()
            elif isinstance(message, m.ProcessStatusUpdate):
                if self.status is not None:
                    await self.status.report_process(message)
            elif isinstance(message, m.WorkloadEndpointStatusUpdate | m.HostEndpointStatusUpdate):
                if isinstance(message, m.WorkloadEndpointStatusUpdate) and self.status_files:
                    self.status_files.update(message.id, message.endpoint, message.status)
                if self.status is not None and self._reporting:
                    await self.status.report_endpoint(message.id, message.status)
            elif isinstance(message, m.WorkloadEndpointStatusRemove | m.HostEndpointStatusRemove):
                if isinstance(message, m.WorkloadEndpointStatusRemove) and self.status_files:
                    self.status_files.remove(message.id)
                if self.status is not None and self._reporting:
                    await self.status.report_endpoint(message.id, None)
            elif isinstance(message, m.WireguardStatusUpdate) and self.on_wireguard_key:
                self.on_wireguard_key(message.public_key, message.ip_version)
