"""The Linux driver: the dry-run dataplane's state, rendered and written into the kernel.

``apply`` (called by the connector for every message) only updates the in-memory state; the
apply loop, once the first InSync has arrived (and again on changes, netlink link and address
events, and refresh periods), reconciles the kernel as Felix orders it: routes (the VXLAN
device and its neighbours first) in a worker thread from the start; meanwhile host endpoints
are resolved against the kernel's interfaces, the chains rendered, IP sets created and
updated, then each IP version's tables written (concurrently with the other version's); IP
set deletions last. Applies are throttled; a failure is logged with the failing line and
retried with backoff; periodic refreshes re-read the kernel and repair drift
(IptablesRefreshInterval, IpsetsRefreshInterval and RouteRefreshInterval, each on its own
schedule). The first successful apply is reported as DataplaneInSync; process status goes out
every ReportingIntervalSecs, endpoint status after applies when EndpointReportingEnabled.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

import attrs
import trio

from pyfelix import messages as m
from pyfelix import model
from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import ChainInsertMode
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.dryrun import DryRunDataplane
from pyfelix_dataplane.linux.commands import available
from pyfelix_dataplane.linux.host_endpoints import interface_addresses, resolve
from pyfelix_dataplane.linux.ipsets import IpsetWriter
from pyfelix_dataplane.linux.iptables import IptablesWriter, Script, detect_backend
from pyfelix_dataplane.linux.monitor import watch_interfaces
from pyfelix_dataplane.linux.routes import (
    IFF_RUNNING,
    IFF_UP,
    RouteTarget,
    RouteWriter,
    link_flags,
)
from pyfelix_dataplane.linux.vxlan import DEVICE as VXLAN_DEVICE
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice, sync_vxlan
from pyfelix_dataplane.linux.wireguard import WireguardDevice, peers_from, sync_wireguard
from pyfelix_dataplane.rules.marks import wireguard_mark
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import HOOKS, TABLES, ip_versions, kernel_ipsets, render_chains

log = logging.getLogger(__name__)

MIN_APPLY_INTERVAL = 0.01
#: The loop reports its health at least this often, idle or not (Felix's healthInterval).
HEALTH_INTERVAL = 10.0
RETRY_START = 0.2
RETRY_MAX = 10.0
#: What a failed kernel write raises (each writer maps the errors below it): retried with
#: backoff, never fatal.
WRITE_ERRORS = (DataplaneWriteError,)


#: Each area of the kernel is re-read on its own period, as Felix does, so a tampered route is
#: repaired without also paying for an iptables-save of every table.
REFRESH_INTERVALS: dict[str, Callable[[FelixConfig], float]] = {
    "iptables": lambda config: config.iptables_refresh_interval,
    "ipsets": lambda config: config.ipsets_refresh_interval,
    "routes": lambda config: config.route_refresh_interval,
}


@attrs.define
class RefreshSchedule:
    """When each area (iptables, ipsets, routes) is next due to be re-read from the kernel.

    Every area is due on the first apply; an interval of 0 disables that area's refresh.
    """

    _due_at: dict[str, float] = attrs.Factory(lambda: dict.fromkeys(REFRESH_INTERVALS, 0.0))

    def next_due(self) -> float:
        return min(self._due_at.values())

    def take_due(self, now: float, config: FelixConfig) -> frozenset[str]:
        due = frozenset(area for area, when in self._due_at.items() if when <= now)
        for area in due:
            interval = REFRESH_INTERVALS[area](config)
            self._due_at[area] = now + interval if interval > 0 else math.inf
        return due

    def make_all_due(self, now: float) -> None:
        for area in self._due_at:
            self._due_at[area] = now


def _status_update(key: Any, status: str) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusUpdate(key, status)
    return m.WorkloadEndpointStatusUpdate(key, status)


def _status_remove(key: Any) -> m.FromDataplane:
    if isinstance(key, model.HostEndpointKey):
        return m.HostEndpointStatusRemove(key)
    return m.WorkloadEndpointStatusRemove(key)


@attrs.define(eq=False)
class LinuxDriver:
    to_calc: Any
    hostname: str = ""
    state: DryRunDataplane = attrs.Factory(DryRunDataplane)
    applies: int = 0
    failures: int = 0
    apply_seconds: float = 0.0
    #: Told (ready) on every round of the apply loop and every HEALTH_INTERVAL while idle;
    #: ready once the first apply succeeded.
    report_health: Callable[[bool], None] = lambda ready: None
    _wake: trio.Event = attrs.Factory(trio.Event)
    _reported_in_sync: bool = False
    # What the last successful applies wrote, so steady state writes only what changed; an
    # area's refresh forgets its part and so re-reads and repairs it.
    _tables_written: dict[tuple[int, str], tuple[Chain, ...]] = attrs.Factory(dict)
    _routes_written: dict[str, RouteTarget] | None = None
    _vxlan_written: tuple[VtepDevice | None, tuple[RemoteVtep, ...]] | None = None
    # The WireGuard device as last written (None: none, or never enabled), whether the route
    # refresh asks for it to be re-read, and its key.
    _wireguard_written: WireguardDevice | None = None
    _wireguard_stale: bool = False
    public_key: str = ""
    _route_results: dict[str, str] = attrs.Factory(dict)
    _statuses: dict[Any, str] = attrs.Factory(dict)
    # The node's interfaces (with addresses) and which host endpoint governs each, as of the
    # last apply (only looked up while there are host endpoints).
    _host_interfaces: dict[str, model.HostEndpointKey] = attrs.Factory(dict)
    _started: float = 0.0

    async def apply(self, msg: m.ToDataplane) -> None:
        self.state.apply(msg)
        self._wake.set()

    def _on_interface(self, name: str) -> None:
        """A link or an address changed: if it is a local workload's interface, re-route now
        rather than at refresh; with host endpoints, re-resolve them and report their status."""
        if any(update.endpoint.name == name for update in self.state.workloads.values()):
            self._routes_written = None
            self._wake.set()
        elif self.state.hosts:
            self._wake.set()

    def endpoint_statuses(self, route_results: dict[str, str]) -> dict[Any, str]:
        """ "up" when every address of a workload is routed, "down" while its interface is
        missing or down (what Felix reports when EndpointReportingEnabled)."""
        statuses = {}
        for key, update in self.state.workloads.items():
            nets = update.endpoint.ipv4_nets + update.endpoint.ipv6_nets
            waiting = any(route_results.get(net) == "waiting" for net in nets)
            statuses[key] = "down" if waiting or not nets else "up"
        return statuses

    def host_endpoint_statuses(self) -> dict[Any, str]:
        """As Felix: "up" when every interface the host endpoint governs is up and running,
        "down" otherwise, "error" when it governs none (no such interface, no interface with
        its expected addresses, or another endpoint won it). An all-interfaces ("*")
        endpoint is always resolved: "up"."""
        statuses = {}
        for key, update in self.state.hosts.items():
            if update.endpoint.name == "*":
                statuses[key] = "up"
                continue
            interfaces = [name for name, owner in self._host_interfaces.items() if owner == key]
            flags = [link_flags(name) for name in interfaces]
            if not flags:
                statuses[key] = "error"
                continue
            running = IFF_UP | IFF_RUNNING
            up = all(found is not None and found[1] & running == running for found in flags)
            statuses[key] = "up" if up else "down"
        return statuses

    async def _resolve_host_endpoints(self) -> None:
        if not self.state.hosts:
            self._host_interfaces = {}
            return
        named = tuple({u.endpoint.name for u in self.state.hosts.values()} - {"", "*"})
        prefixes = tuple(self.state.config.interface_prefix.split(","))
        interfaces = await trio.to_thread.run_sync(interface_addresses, named, prefixes)
        self._host_interfaces = resolve(self.state.hosts, interfaces)

    def _rendering_state(self) -> DryRunDataplane:
        """The state with each host endpoint placed on the interfaces it governs (several, for
        an endpoint matched by address; none, for one that lost its interface); named
        endpoints whose interface does not exist yet stay as named, "*" ones as they are."""
        if not self.state.hosts:
            return self.state
        governed = set(self._host_interfaces.values())
        hosts: dict[Any, m.HostEndpointUpdate] = {
            key: update
            for key, update in self.state.hosts.items()
            if update.endpoint.name == "*"
            or (
                update.endpoint.name
                and key not in governed
                and update.endpoint.name not in self._host_interfaces
            )
        }
        for interface, key in self._host_interfaces.items():
            update = self.state.hosts[key]
            endpoint = attrs.evolve(update.endpoint, name=interface)
            hosts[(key, interface)] = attrs.evolve(update, endpoint=endpoint)
        return attrs.evolve(self.state, hosts=hosts)

    async def _report_endpoints(self, route_results: dict[str, str]) -> None:
        if not self.state.config.endpoint_reporting_enabled:
            return
        statuses = self.endpoint_statuses(route_results) | self.host_endpoint_statuses()
        for key, status in statuses.items():
            if self._statuses.get(key) != status:
                await self.to_calc.send(_status_update(key, status))
        for key in self._statuses.keys() - statuses.keys():
            await self.to_calc.send(_status_remove(key))
        self._statuses = statuses

    def desired_vxlan(self) -> tuple[VtepDevice | None, tuple[RemoteVtep, ...]]:
        """This node's VTEP device and the remote VTEPs, when VXLAN is on and ours is known."""
        encapsulation = self.state.encapsulation
        local = self.state.vteps.get(self.hostname)
        if encapsulation is None or not encapsulation.vxlan_enabled or local is None:
            return None, ()
        config = self.state.config
        device = VtepDevice(
            vni=config.vxlan_vni,
            port=config.vxlan_port,
            mac=local.mac,
            tunnel_ip=local.ipv4_addr,
            parent_ip=local.parent_device_ip,
            mtu=config.vxlan_mtu,
        )
        remotes = tuple(
            RemoteVtep(vtep.ipv4_addr, vtep.mac, vtep.parent_device_ip)
            for node, vtep in sorted(self.state.vteps.items())
            if node != self.hostname and vtep.ipv4_addr and vtep.parent_device_ip
        )
        return device, remotes

    def desired_wireguard(self) -> WireguardDevice | None:
        """This node's WireGuard device and peers, when WireguardEnabled: a peer for every
        remote node whose public key is known, allowed its blocks and WireGuard address."""
        config = self.state.config
        if not config.wireguard_enabled:
            return None
        port = config.wireguard_listening_port
        keys, addresses = {}, {}
        for (kind, host), update in self.state.others.items():
            if kind == "wireguard":
                keys[host] = (update.public_key, update.interface_ipv4_addr)
            elif kind == "host":
                addresses[host] = update.ipv4_addr
        blocks: dict[str, list[str]] = {}
        for route in self.state.routes.values():
            if "REMOTE_WORKLOAD" in route.types and route.dst_node:
                blocks.setdefault(route.dst_node, []).append(route.dst)
        return WireguardDevice(
            name=config.wireguard_interface_name,
            port=port,
            fwmark=wireguard_mark(config.iptables_mark_mask),
            # Felix takes the first table of RouteTableRange (1-250 by default).
            table=1,
            rule_priority=config.wireguard_routing_rule_priority,
            address=keys.get(self.hostname, ("", ""))[1],
            mtu=config.wireguard_mtu,
            peers=peers_from(keys, blocks, addresses, port, self.hostname),
        )

    def desired_routes(self, vxlan_on: bool) -> dict[str, RouteTarget]:
        """Local workloads through their interfaces; with VXLAN, remote blocks through the
        remote node's tunnel address (or straight to the node, where the pool's VXLAN mode
        is CrossSubnet and the node shares our subnet)."""
        routes = {}
        for update in self.state.workloads.values():
            endpoint = update.endpoint
            for net in endpoint.ipv4_nets + endpoint.ipv6_nets:
                routes[net] = RouteTarget(endpoint.name, endpoint.mac)
        if not vxlan_on:
            return routes
        for route in self.state.routes.values():
            if "REMOTE_WORKLOAD" not in route.types or route.dst_node == self.hostname:
                continue
            vtep = self.state.vteps.get(route.dst_node)
            if route.tunnel == "vxlan" and vtep is not None and vtep.ipv4_addr:
                routes[route.dst] = RouteTarget(VXLAN_DEVICE, gateway=vtep.ipv4_addr)
            elif route.tunnel == "none" and route.dst_node_ip:
                routes[route.dst] = RouteTarget("", gateway=route.dst_node_ip)
        return routes

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_status)
            nursery.start_soon(watch_interfaces, self._on_interface)
            task_status.started()
            # The configuration (IptablesBackend, refresh intervals) arrives with the snapshot:
            # nothing is written, nor the backend chosen, before InSync.
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
            backend = await detect_backend(self.state.config.iptables_backend)
            versions = [
                v
                for v in ip_versions(self.state.config)
                if v == 4 or available(f"ip6tables-{backend}")
            ]
            append = self.state.config.chain_insert_mode is ChainInsertMode.APPEND
            writers = {
                version: IptablesWriter(version, backend, "append" if append else "insert")
                for version in versions
            }
            ipsets, routes = IpsetWriter(), RouteWriter()
            log.info("programming with iptables-%s, IPv%s", backend, "/".join(map(str, versions)))
            self._wake.set()
            retry = RETRY_START
            refresh = RefreshSchedule()
            while True:
                self.report_health(self._reported_in_sync)
                health_due = trio.current_time() + HEALTH_INTERVAL
                with trio.move_on_at(min(refresh.next_due(), health_due)):
                    await self._wake.wait()
                if not self._wake.is_set() and refresh.next_due() > trio.current_time():
                    continue  # only the health tick
                self._wake = trio.Event()
                due = refresh.take_due(trio.current_time(), self.state.config)
                if self.applies:
                    # Let a burst of changes gather; the first apply has the whole snapshot.
                    await trio.sleep(MIN_APPLY_INTERVAL)
                try:
                    await self._apply_all(writers, ipsets, routes, versions, due)
                except WRITE_ERRORS as exc:
                    log.warning("dataplane apply failed (retrying in %.1fs): %s", retry, exc)
                    self.failures += 1
                    await trio.sleep(retry)
                    retry = min(retry * 2, RETRY_MAX)
                    refresh.make_all_due(trio.current_time())
                    continue
                retry = RETRY_START
                if not self._reported_in_sync:
                    self._reported_in_sync = True
                    await self.to_calc.send(m.DataplaneInSync())

    async def _apply_all(
        self,
        writers: dict[int, IptablesWriter],
        ipsets: IpsetWriter,
        routes: RouteWriter,
        versions: list[int],
        due: frozenset[str],
    ) -> None:
        """Write what changed since the last apply; re-read and repair the ``due`` areas.

        IP sets are created before the tables (rules refer to them) and deleted after (once no
        rule does). Each IP version is rendered and planned, then written while the next one
        is rendered, planned and written, as Felix writes its tables in parallel: the tools'
        parsing overlaps, and when one nft transaction commits while the other is being
        built, the tool notices (generation id) and rebuilds its batch, which costs little.
        Routes are written beside the tables (netlink in a worker thread), once every
        version is planned: before that their thread would take the GIL from rendering and
        planning.
        """
        if "iptables" in due:
            self._tables_written.clear()
        if "routes" in due:
            self._routes_written = None
            self._vxlan_written = None
            self._wireguard_stale = True
        started = trio.current_time()
        timeline: dict[str, float] = {}
        failed: list[Exception] = []

        def mark(event: str) -> None:
            timeline[event] = trio.current_time() - started

        async def area(write: Callable[[], Awaitable[None]], name: str) -> None:
            # A failure in one area lets the others finish; the first is raised afterwards.
            try:
                await write()
            except WRITE_ERRORS as exc:
                failed.append(exc)
            mark(name)

        async with trio.open_nursery() as nursery:
            await self._resolve_host_endpoints()
            rendering = self._rendering_state()
            desired_sets = kernel_ipsets(self.state, versions)
            try:
                await ipsets.apply_updates(desired_sets, refresh="ipsets" in due)
            except WRITE_ERRORS as exc:
                failed.append(exc)  # the rules would refer to missing sets: no tables
            mark("ipsets")
            for version in versions if not failed else []:
                chains = render_chains(rendering, version)
                try:
                    script, tables = await self._plan_tables(writers[version], chains)
                except WRITE_ERRORS as exc:
                    failed.append(exc)
                    continue
                mark(f"IPv{version} planned")
                write = partial(self._write_tables, writers[version], script, tables)
                nursery.start_soon(area, write, f"IPv{version} written")
            mark("routes started")
            nursery.start_soon(area, partial(self._apply_routes, routes), "routes")
        if failed:
            raise failed[0]
        await ipsets.apply_deletions(desired_sets)
        self.applies += 1
        self.apply_seconds += trio.current_time() - started
        # The first apply (the start-up cost an operator waits for) is worth an Info line.
        log.log(
            logging.INFO if self.applies == 1 else logging.DEBUG,
            "apply %d: %s (%.3fs in all)",
            self.applies,
            ", ".join(f"{event} at {at:.3f}s" for event, at in timeline.items()),
            trio.current_time() - started,
        )
        await self._report_endpoints(self._route_results)

    async def _apply_routes(self, routes: RouteWriter) -> None:
        """The VXLAN device and its neighbours first (routes go through it), the WireGuard
        device, peers and routing, then routes."""
        vxlan = self.desired_vxlan()
        if self._vxlan_written != vxlan and (
            await trio.to_thread.run_sync(sync_vxlan, *vxlan) != "waiting"
        ):
            self._vxlan_written = vxlan
        wireguard = self.desired_wireguard()
        written = self._wireguard_written
        # Never enabled: the kernel is left alone. Disabled: the device goes.
        if wireguard != written or (wireguard is not None and self._wireguard_stale):
            previous = written.name if written is not None else ""
            key = await trio.to_thread.run_sync(sync_wireguard, wireguard, previous)
            self._wireguard_written, self._wireguard_stale = wireguard, False
            if key != self.public_key:
                self.public_key = key
                log.info("WireGuard public key: %s", key or "(none)")
                await self.to_calc.send(m.WireguardStatusUpdate(key))
        desired = self.desired_routes(vxlan_on=vxlan[0] is not None)
        if self._routes_written != desired:
            self._route_results = await routes.apply(desired)
            if not {"waiting", "failed"} & set(self._route_results.values()):
                self._routes_written = desired

    async def _plan_tables(
        self, writer: IptablesWriter, chains: Mapping[str, tuple[Chain, ...]]
    ) -> tuple[Script, dict[str, tuple[Chain, ...]]]:
        """The restore script for one IP version's tables that changed since they were last
        written, and those tables' chains."""
        desired = {}
        for table in TABLES:
            if self._tables_written.get((writer.version, table)) == chains[table]:
                continue
            hooks = list(HOOKS[table])
            if table == "nat":
                hooks.append(("POSTROUTING", "cali-POSTROUTING"))
            desired[table] = (chains[table], hooks)
        script = await writer.prepare(desired) if desired else Script()
        return script, {table: chains[table] for table in desired}

    async def _write_tables(
        self,
        writer: IptablesWriter,
        script: Script,
        tables: dict[str, tuple[Chain, ...]],
    ) -> None:
        """One IP version's restore (a transaction per table)."""
        await writer.write(script)
        for table, chains in tables.items():
            self._tables_written[(writer.version, table)] = chains

    async def _report_status(self) -> None:
        """ProcessStatusUpdate every ReportingIntervalSecs. The first goes out at start, before
        the configuration has arrived, so the interval is re-read at least every second."""
        while True:
            sent_at = trio.current_time()
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            await self.to_calc.send(m.ProcessStatusUpdate(stamp, sent_at - self._started))
            while True:
                interval = self.state.config.reporting_interval or 30.0
                remaining = sent_at + interval - trio.current_time()
                if remaining <= 0:
                    break
                await trio.sleep(min(remaining, 1.0))
