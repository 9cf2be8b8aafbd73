"""``pyfelix run``: the agent, one Trio nursery tree.

    agent nursery
    ├─ syncer          files (inotify) or etcd (list + watch)   -> decoupler
    ├─ calc loop       validation filter, graph, sequencer       -> to-dataplane channel
    ├─ connector       restart checks; status back to the datastore
    ├─ driver          the Linux driver (ipsets, routes, iptables), or with --dry-run the
    │                  printing driver
    └─ key updater     WireGuard public key into the Node (etcd only)

A Shutdown anywhere ends the tree: after Felix's 2 s pause the agent exits with code 129
(RestartRequired: a configuration or encapsulation change, or SIGHUP) so that systemd (or any
supervisor) restarts it with the new configuration, or 1 (FatalShutdown: the datastore is not
ready). SIGTERM and SIGINT stop it at once, leaving the dataplane as programmed.
"""

from __future__ import annotations

import logging
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from pyfelix import messages as m
from pyfelix import startup
from pyfelix.calc.async_loop import CalcLoop
from pyfelix.calc.config_batcher import startup_config
from pyfelix.calc.decoupler import Decoupler
from pyfelix.calc.graph import GraphSettings
from pyfelix.config import FelixConfig
from pyfelix.connector import SHUTDOWN_PAUSE, DataplaneConnector
from pyfelix.datastore import is_etcd, is_kubernetes
from pyfelix.errors import RestartRequired, Shutdown
from pyfelix.health import DATAPLANE, HEALTH_INTERVAL, HealthAggregator
from pyfelix.logs import configure_logging
from pyfelix.resources.parse_cache import ParseCache
from pyfelix.resources.shared_parse import ParsePrefetch
from pyfelix.stats import DataplaneStats
from pyfelix.status_files import EndpointStatusFiles
from pyfelix.syncer.files import FileSyncer
from pyfelix.validation import context_from
from pyfelix_dataplane.driver import DataplaneDriver
from pyfelix_dataplane.linux.driver import LinuxDriver

if TYPE_CHECKING:
    from pyfelix.datastore.etcd import EtcdClient
    from pyfelix.datastore.kubernetes import KubeClient, KubeConfig
    from pyfelix.datastore.prefetch import ListingPrefetch
    from pyfelix.status import EtcdStatusReporter
    from pyfelix.syncer.etcd import EtcdSyncer
    from pyfelix.syncer.kubernetes import KubernetesSyncer

log = logging.getLogger(__name__)

# Flushes the calc loop may get ahead of the driver (each a flush's messages, handed over in
# one piece: one by one, 1,400 messages took 25 ms of a 10k-endpoint start). Beyond that the
# loop waits, and updates coalesce in the sequencer instead of piling up here.
TO_DATAPLANE_FLUSHES = 4
# Status from the driver is small and periodic; a few slots keep the driver from waiting.
FROM_DATAPLANE_BUFFER = 10


@attrs.frozen
class AgentOptions:
    hostname: str
    datastore: str
    dry_run: bool = True
    #: The file datastore's first read, started by the CLI before the agent's imports.
    prefetch: ParsePrefetch | None = None
    #: etcd's first listing, likewise.
    listing: ListingPrefetch | None = None
    #: What the file datastore's earlier first reads parsed.
    parse_cache: ParseCache | None = None


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    """SIGTERM/SIGINT stop the agent cleanly, leaving the dataplane as programmed; SIGHUP is
    Felix's request to reload the configuration, so a restart (exit 129)."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for received in signals:
            if received == signal.SIGHUP:
                raise RestartRequired("SIGHUP: reloading the configuration")
            log.info("received %s: stopping (the dataplane stays programmed)", received)
            scope.cancel()
            return


def kube_config(source: str) -> KubeConfig:
    """The Kubernetes API a ``kubernetes://`` source names (raises KubeConfigError)."""
    from pyfelix.datastore.kubernetes import config_for  # noqa: PLC0415

    return config_for(source)


#: How long the health and metrics servers wait, once the configuration is known, for the first
#: apply to hand its tables to the kernel's tools.
HEALTH_START_DELAY = 1.0


def dataplane_timeout(config: FelixConfig) -> float:
    """Felix's dataplane health timeout: DataplaneWatchdogTimeout, at least two intervals."""
    return max(config.dataplane_watchdog_timeout, 2 * HEALTH_INTERVAL)


def _on_config(health: HealthAggregator, config: FelixConfig) -> None:
    health.overrides = dict(config.health_timeout_overrides)
    health.register(DATAPLANE, timeout=dataplane_timeout(config))


async def _serve_health(
    calc: CalcLoop,
    connector: DataplaneConnector,
    driver: DataplaneDriver,
    config_known: trio.Event,
) -> None:
    """Once the configuration is known, serve health (/liveness, /readiness) and Felix's
    metrics (/metrics, over TLS when configured) on their ports, each if enabled. What serves
    them is imported only for what is enabled (the HTTP server 0.045 s, Prometheus' client
    0.03 s), and only once the first apply's tables are with the kernel's tools (at most
    HEALTH_START_DELAY): the configuration comes with InSync, as the first apply renders."""
    await config_known.wait()
    config = connector.felix_config
    assert config is not None
    if not (config.health_enabled or config.prometheus_metrics_enabled):
        return
    with trio.move_on_after(HEALTH_START_DELAY):
        await driver.writing.wait()
    from pyfelix.httpserver import HttpServer  # noqa: PLC0415

    async with trio.open_nursery() as nursery:
        if config.health_enabled:
            from pyfelix.health import health_routes  # noqa: PLC0415

            health = HttpServer(health_routes(calc.health, lambda: connector.dataplane_in_sync))
            await nursery.start(health.serve, config.health_host, config.health_port)
        if config.prometheus_metrics_enabled:
            from pyfelix.metrics import (  # noqa: PLC0415
                FelixCollector,
                WireguardCollector,
                metrics_routes,
                registry,
                tls_context,
            )

            versions = (4, 6) if config.ipv6_support else (4,)
            felix = FelixCollector(calc.hostname, calc, driver.stats, lambda: versions)
            server = HttpServer(
                metrics_routes(registry(config, felix, WireguardCollector(calc.hostname))),
                tls=tls_context(config),
                name="metrics",
            )
            await nursery.start(
                server.serve, config.prometheus_metrics_host, config.prometheus_metrics_port
            )


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def dataplane_readiness(in_sync: bool, stats: DataplaneStats) -> tuple[bool, str]:
    """The dataplane's readiness and health detail: in sync, and enforcing every policy
    whole. A policy an IP set programmed cut weakens (a deny that lets the members left out
    through) keeps the node from being ready, named in the detail, until the set fits."""
    detail = "; ".join(
        f"IP set {name} over MaxIpsetSize weakens {', '.join(policies)}"
        for name, policies in stats.weakened_policies.items()
    )
    return in_sync and not stats.weakened_policies, detail


async def run_agent(options: AgentOptions, out: TextIO = sys.stdout) -> int:
    """Run until cancelled or a restart is required; returns the process exit code."""
    decoupler = Decoupler()
    to_send, to_receive = trio.open_memory_channel[m.Flush](TO_DATAPLANE_FLUSHES)
    from_send, from_receive = trio.open_memory_channel[m.FromDataplane](FROM_DATAPLANE_BUFFER)
    health = HealthAggregator()
    health.register(DATAPLANE, timeout=dataplane_timeout(FelixConfig()))

    def report_dataplane(ready: bool) -> None:
        ready, detail = dataplane_readiness(ready, driver.stats)
        health.report(DATAPLANE, live=True, ready=ready, detail=detail)

    driver: DataplaneDriver
    if options.dry_run:
        # The printer (and the messages' descriptions) only for --dry-run: 5 ms of a start.
        from pyfelix_dataplane.printing import PrintingDriver  # noqa: PLC0415

        driver = PrintingDriver(out, from_send, report_health=report_dataplane)
    else:
        driver = LinuxDriver(from_send, options.hostname, report_health=report_dataplane)
    config_known = trio.Event()

    reporters: list[EtcdStatusReporter] = []

    def on_config(config: FelixConfig) -> None:
        if not config_known.is_set():
            # Any change of the log settings restarts the agent, so the first is the one.
            configure_logging(config)
        _on_config(health, config)
        for reporter in reporters:
            reporter.set_ttl(config.reporting_ttl)
            reporter.endpoint_delay = config.endpoint_reporting_delay
        config_known.set()

    exit_code = 0
    try:
        async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
            status = None
            updater = None
            syncer: FileSyncer | EtcdSyncer | KubernetesSyncer
            client: EtcdClient | None = None
            kube: KubeClient | None = None
            if is_kubernetes(options.datastore):
                # The Kubernetes API datastore: no process or endpoint status is written (Felix
                # drops its status reports in KDD mode), only the WireGuard keys on the Node.
                from pyfelix.datastore.kubernetes import KubeClient  # noqa: PLC0415
                from pyfelix.status import KubeNodeStore, WireguardKeyUpdater  # noqa: PLC0415
                from pyfelix.syncer.kubernetes import KubernetesSyncer  # noqa: PLC0415

                kube = KubeClient(kube_config(options.datastore))
                stack.push_async_callback(kube.aclose)
                syncer = KubernetesSyncer(kube, decoupler)
                updater = WireguardKeyUpdater(KubeNodeStore(kube), options.hostname)
                await nursery.start(updater.run)
            elif is_etcd(options.datastore):
                # etcd's client, syncer and reporters, imported only by an agent that reads
                # etcd (4-6 ms of every other start).
                from pyfelix.datastore.etcd import EtcdClient, EtcdConfig  # noqa: PLC0415
                from pyfelix.status import (  # noqa: PLC0415
                    EtcdNodeStore,
                    EtcdStatusReporter,
                    WireguardKeyUpdater,
                )
                from pyfelix.syncer.etcd import EtcdSyncer  # noqa: PLC0415

                client = EtcdClient(EtcdConfig.from_url(options.datastore))
                stack.push_async_callback(client.aclose)
                syncer = EtcdSyncer(client, decoupler, prefetch=options.listing, health=health)
                status = EtcdStatusReporter(client, options.hostname)
                reporters.append(status)
                await nursery.start(status.run)
                updater = WireguardKeyUpdater(EtcdNodeStore(client), options.hostname)
                await nursery.start(updater.run)
            else:
                syncer = FileSyncer(
                    Path(options.datastore),
                    decoupler,
                    prefetch=options.prefetch,
                    cache=options.parse_cache,
                )
            startup_resources = (
                await startup.kube_startup_configurations(kube, options.hostname)
                if kube is not None
                else await startup.startup_configurations(
                    options.datastore, client, options.hostname, options.parse_cache
                )
            )
            config = startup_config(startup_resources, options.hostname)
            driver.startup_config = config  # the kernel may be probed with it before InSync
            calc = CalcLoop(
                options.hostname,
                decoupler,
                to_send,
                context=context_from(startup_resources, options.hostname),
                settings=GraphSettings.of(config),
                health=health,
            )
            await nursery.start(calc.run)
            status_files = None
            if config.endpoint_status_path_prefix and not options.dry_run:
                status_files = EndpointStatusFiles(Path(config.endpoint_status_path_prefix))
                await nursery.start(status_files.run)
            connector = DataplaneConnector(
                to_receive,
                driver.apply,
                from_receive,
                status=status,
                status_files=status_files,
                on_wireguard_key=updater.on_key if updater else None,
                on_config=on_config,
            )
            await nursery.start(connector.run)
            await nursery.start(driver.run)
            nursery.start_soon(syncer.run)
            nursery.start_soon(_serve_health, calc, connector, driver, config_known)
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
    except* Shutdown as group:
        leaves = [leaf for leaf in _leaves(group) if isinstance(leaf, Shutdown)]
        for leaf in leaves:
            log.warning(
                "%s: %s", "restarting" if isinstance(leaf, RestartRequired) else "stopping", leaf
            )
        # A failure outranks a restart: the supervisor must see it.
        exit_code = min(leaf.exit_code for leaf in leaves)
        log.info("sleeping %.0f s to avoid a tight restart loop", SHUTDOWN_PAUSE)
        await trio.sleep(SHUTDOWN_PAUSE)
    return exit_code
