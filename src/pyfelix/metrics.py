"""Felix's Prometheus metrics, served through prometheus-client.

The agent's parts count and time into plain objects (pyfelix.stats, the calc loop's and the
drivers' counters); ``FelixCollector`` reads them when scraped and yields Felix's metric
families with Felix's names, types, help and labels. The library does the rest: the registry,
the process collector (PrometheusProcessMetricsEnabled), the Python runtime collectors in place
of Go's (PrometheusGoMetricsEnabled), label escaping and the text format.

One adaptation: prometheus-client names every counter ``<name>_total``, while Go's client, and
so Felix, exposes ``felix_ipset_calls`` as it is. Dashboards and alerts written for Felix query
Felix's names, so ``exposition`` renames the felix counters back.
"""

from __future__ import annotations

import logging
import math
import re
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pyfelix.calc.stats_collector import StatsCollector
from pyfelix.config import FelixConfig
from pyfelix.errors import PyfelixError
from pyfelix.httpserver import Response
from pyfelix.logs import ERRORS as LOG_ERRORS
from pyfelix.stats import DataplaneStats, Observations
from pyfelix.syncer.api import SyncStatus
from pyfelix_dataplane.linux.commands import CALLS, ERRORS
from pyfelix_dataplane.linux.wireguard import DeviceStats, device_stats

if TYPE_CHECKING:
    from pyfelix.calc.async_loop import CalcLoop

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The labels of Felix's per-table iptables gauges.
LABELS_TABLE = ["ip_version", "table"]
#: The felix_cluster_num_* counts besides hosts, and what their help says they count.
CLUSTER_COUNTS = {
    "host_endpoints": "host endpoints cluster-wide",
    "workload_endpoints": "workload endpoints cluster-wide",
    "tiers": "tiers cluster-wide",
    "policies": "policies cluster-wide",
    "profiles": "profiles cluster-wide",
}
#: felix_resync_state's values (felix/calc/async_calc_graph.go).
RESYNC_STATE = {
    SyncStatus.WAIT_FOR_DATASTORE: 1.0,
    SyncStatus.RESYNC_IN_PROGRESS: 2.0,
    SyncStatus.IN_SYNC: 3.0,
}

#: Felix's counters of the tools it runs, by pyfelix's tool kind.
TOOL_COUNTERS = {
    "ipset": ("felix_ipset_calls", "felix_ipset_errors", "ipset commands"),
    "iptables-restore": (
        "felix_iptables_restore_calls",
        "felix_iptables_restore_errors",
        "iptables-restore",
    ),
    "iptables-save": ("felix_iptables_save_calls", "felix_iptables_save_errors", "iptables-save"),
    "nft": ("felix_nft_calls", "felix_nft_errors", "nft rule write transaction"),
    "nft-list": ("felix_nft_list_calls", "felix_nft_list_errors", "nft list"),
    "nft-set": ("felix_nft_set_calls", "felix_nft_set_errors", "nftables set transaction"),
}
#: The nftables mode's gauges per IP version, by the place in DataplaneStats.nft's tuples.
NFT_GAUGES = (
    ("felix_nft_chains", "Number of active nft chains in the Calico table."),
    ("felix_nft_rules", "Number of active nftables rules in the Calico table."),
    ("felix_nft_sets", "Number of active Calico nftables sets."),
    ("felix_nft_maps", "Number of active Calico nftables maps."),
)

#: The counters prometheus-client suffixed with _total (a gauge of Felix's may end so too).
_COUNTER_TYPE = re.compile(rb"^# TYPE ((?:felix|wireguard)_[a-zA-Z0-9_]+?)_total counter$", re.M)

#: Felix's client-authentication modes, as Python's ssl can enforce them. Python cannot ask
#: for a certificate without verifying it, so RequireAnyClientCert verifies it (and says so).
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


class MetricsTLSError(PyfelixError, OSError):
    """A PrometheusMetrics* TLS file is missing or unusable; names the setting and the file."""


def summary(name: str, help_text: str, observations: Observations) -> Metric:
    """A summary family with Felix's quantiles, as Go's client exposes one."""
    family = Metric(name, help_text, "summary")
    for quantile, value in observations.quantiles().items():
        family.add_sample(name, {"quantile": f"{quantile:g}"}, value)
    family.add_sample(name + "_sum", {}, observations.total)
    family.add_sample(name + "_count", {}, observations.count)
    return family


def by_type(name: str, help_text: str, counts: Mapping[str, int]) -> Metric:
    """A counter family with one sample per ``type`` label, as Felix's CounterVecs."""
    family = CounterMetricFamily(name, help_text, labels=["type"])
    for kind, count in sorted(counts.items()):
        family.add_metric([kind], count)
    return family


#: Families Felix registers when it starts, whatever its dataplane, and that stay zero where
#: their part does not run: the BPF conntrack scanner's (pyfelix refuses BpfEnabled) and the
#: flow collector's (pyfelix collects no flows). Exposed the same, so that dashboards built
#: on Felix plot a flat zero rather than "no data". (Felix's labelled families of those
#: parts, felix_bpf_events and felix_nflog_*, have no samples until a label is used, and are
#: left out as Go's client leaves them out.)
IDLE_GAUGES = (
    ("felix_bpf_conntrack_used", "Entries in use found by the last BPF conntrack sweep."),
    ("felix_bpf_conntrack_cleaned", "Entries removed by the last BPF conntrack sweep."),
    ("felix_bpf_conntrack_cleaned_total", "Entries removed by every BPF conntrack sweep."),
    ("felix_bpf_conntrack_sweep_duration", "How long the last BPF conntrack sweep took (ns)."),
    ("felix_collector_epstats", "Entries in the flow collector's endpoint statistics cache."),
    (
        "felix_collector_dataplanestats_update_processing_errors_per_minute",
        "Errors per minute merging dataplane statistics into the flow collector's cache.",
    ),
)
IDLE_COUNTERS = (("felix_bpf_conntrack_sweeps", "BPF conntrack table sweeps made."),)
IDLE_HISTOGRAMS = (
    (
        "felix_collector_conntrack_processing_latency_seconds",
        "How long the flow collector took over conntrack entries.",
    ),
    (
        "felix_collector_dumpstats_latency_seconds",
        "How long the flow collector took to dump its cached statistics.",
    ),
    (
        "felix_collector_dataplanestats_update_processing_latency_seconds",
        "How long the flow collector took to merge dataplane statistics.",
    ),
)
#: Go client's default histogram buckets, which those histograms use.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def idle_families() -> Iterator[Metric]:
    """IDLE_GAUGES, IDLE_COUNTERS and IDLE_HISTOGRAMS, every sample zero."""
    for name, help_text in IDLE_GAUGES:
        yield GaugeMetricFamily(name, help_text, 0)
    for name, help_text in IDLE_COUNTERS:
        yield CounterMetricFamily(name, help_text, 0)
    for name, help_text in IDLE_HISTOGRAMS:
        buckets = [(f"{bound:g}", 0.0) for bound in DEFAULT_BUCKETS] + [("+Inf", 0.0)]
        yield HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=0.0)


@attrs.define(eq=False)
class FelixCollector(Collector):
    """Felix's metric families, read from the agent when scraped."""

    hostname: str
    calc: CalcLoop
    dataplane: DataplaneStats
    ip_versions: Callable[[], tuple[int, ...]] = lambda: (4,)

    def collect(self) -> Iterator[Metric]:
        calc, graph, dataplane = self.calc, self.calc.graph, self.dataplane
        host = GaugeMetricFamily(
            "felix_host", "Configured Felix hostname (as a label).", labels=["host"]
        )
        host.add_metric([self.hostname], 1)
        yield host
        yield GaugeMetricFamily(
            "felix_resync_state", "Current datastore state.", RESYNC_STATE[calc.sync_status]
        )
        yield CounterMetricFamily(
            "felix_resyncs_started", "Number of times Felix started a resync.", calc.resyncs_started
        )
        yield by_type(
            "felix_calc_graph_updates_processed",
            "Number of datastore updates processed by the calculation graph.",
            calc.updates_processed,
        )
        yield CounterMetricFamily(
            "felix_calc_graph_output_events",
            "Number of events emitted by the calculation graph.",
            calc.messages_emitted,
        )
        yield summary(
            "felix_calc_graph_update_time_seconds",
            "Seconds to update calculation graph for each batch of datastore updates.",
            calc.update_times,
        )
        sequencer = graph.sequencer
        yield GaugeMetricFamily(
            "felix_active_local_endpoints",
            "Number of active endpoints on this host.",
            len(sequencer.workloads.sent) + len(sequencer.hosts.sent),
        )
        yield GaugeMetricFamily(
            "felix_active_local_policies",
            "Number of active policies on this host.",
            len(sequencer.policies.sent),
        )
        yield GaugeMetricFamily(
            "felix_active_local_selectors",
            "Number of active selectors on this host.",
            len(graph.ipsets),
        )
        yield from self._cluster(graph.stats)
        ipsets = GaugeMetricFamily(
            "felix_ipsets_calico", "Number of active Calico IP sets.", labels=["ip_version"]
        )
        for version in self.ip_versions():
            ipsets.add_metric([str(version)], len(graph.ipsets))
        yield ipsets
        yield from self._dataplane(dataplane)

    @staticmethod
    def _cluster(stats: StatsCollector) -> Iterator[Metric]:
        """Felix's felix_cluster_num_* gauges: what the whole cluster holds."""
        yield GaugeMetricFamily(
            "felix_cluster_num_hosts", "Total number of calico hosts in the cluster.", stats.hosts
        )
        for kind, what in CLUSTER_COUNTS.items():
            yield GaugeMetricFamily(
                f"felix_cluster_num_{kind}", f"Total number of {what}.", stats.count(kind)
            )

    @staticmethod
    def _dataplane(stats: DataplaneStats) -> Iterator[Metric]:
        oversized = GaugeMetricFamily(
            "pyfelix_ipset_oversized_members",
            "Members wanted in an IP set over MaxIpsetSize, which is programmed cut to it"
            " (a deny set then lets the rest through).",
            labels=["set"],
        )
        for name, wanted in sorted(stats.oversized_ipsets.items()):
            oversized.add_metric([name], wanted)
        yield oversized
        weakened = GaugeMetricFamily(
            "pyfelix_policy_weakened_by_oversized_ipset",
            "1 for each policy that an IP set programmed cut (over MaxIpsetSize) weakens: a"
            " Deny rule matching the set, or an Allow rule matching outside it.",
            labels=["set", "policy"],
        )
        for name, policies in sorted(stats.weakened_policies.items()):
            for policy in policies:
                weakened.add_metric([name, policy], 1)
        yield weakened
        yield CounterMetricFamily(
            "felix_int_dataplane_failures",
            "Number of times dataplane updates failed and will be retried.",
            stats.failures,
        )
        yield by_type(
            "felix_int_dataplane_messages", "Number dataplane messages by type.", stats.messages
        )
        yield summary(
            "felix_int_dataplane_apply_time_seconds",
            "Time in seconds for each incremental update to the dataplane.",
            stats.applies,
        )
        if stats.initial_resync_seconds is not None:
            yield GaugeMetricFamily(
                "felix_int_dataplane_initial_resync_time_seconds",
                "Time in seconds that it took to do the initial resync with the dataplane.",
                stats.initial_resync_seconds,
            )
        yield summary(
            "felix_route_table_resync_seconds",
            "Time taken to list all the routes during a resync.",
            stats.route_syncs,
        )
        for name, what, value in (
            ("felix_route_table_num_routes", "routes that Felix is managing", stats.routes[0]),
            (
                "felix_route_table_num_ifaces",
                "interfaces that Felix is monitoring",
                stats.routes[1],
            ),
        ):
            family = GaugeMetricFamily(
                name, f"Number of {what} in the particular routing table.", labels=["table"]
            )
            family.add_metric(["main"], value)
            yield family
        yield CounterMetricFamily(
            "felix_log_errors", "Number of errors encountered while logging.", LOG_ERRORS[0]
        )
        # Lines are written as they come (Felix queues them, and drops them when blocked).
        yield CounterMetricFamily(
            "felix_logs_dropped",
            "Number of logs dropped because the output stream was blocked.",
            0,
        )
        yield summary(
            "felix_int_dataplane_msg_batch_size",
            "Number of messages processed in each batch.",
            stats.batch_sizes,
        )
        executed = CounterMetricFamily(
            "felix_iptables_lines_executed",
            "Number of iptables rule updates executed.",
            labels=LABELS_TABLE,
        )
        for (version, table), lines in sorted(stats.lines_executed.items()):
            executed.add_metric([str(version), table], lines)
        yield executed
        chains = GaugeMetricFamily(
            "felix_iptables_chains", "Number of active iptables chains.", labels=LABELS_TABLE
        )
        rules = GaugeMetricFamily(
            "felix_iptables_rules", "Number of active iptables rules.", labels=LABELS_TABLE
        )
        for (version, table), (chain_count, rule_count) in sorted(stats.tables.items()):
            chains.add_metric([str(version), table], chain_count)
            rules.add_metric([str(version), table], rule_count)
        yield chains
        yield rules
        for place, (name, help_text) in enumerate(NFT_GAUGES):
            gauge = GaugeMetricFamily(name, help_text, labels=["ip_version"])
            for version, sizes in sorted(stats.nft.items()):
                gauge.add_metric([str(version)], sizes[place])
            yield gauge
        for tool, (calls, errors, what) in TOOL_COUNTERS.items():
            yield CounterMetricFamily(calls, f"Number of {what} calls.", CALLS[tool])
            yield CounterMetricFamily(errors, f"Number of {what} errors.", ERRORS[tool])
        yield from idle_families()


@attrs.define(eq=False)
class WireguardCollector(Collector):
    """Felix's WireGuard families (PrometheusWireGuardMetricsEnabled): every WireGuard device
    on the host and its peers, read when scraped, at most once a second."""

    hostname: str
    devices: Callable[[], Sequence[DeviceStats]] = device_stats
    clock: Callable[[], float] = time.monotonic
    _cached: tuple[float, Sequence[DeviceStats]] = (-math.inf, ())

    def collect(self) -> Iterator[Metric]:
        if self.clock() - self._cached[0] >= 1.0:
            self._cached = (self.clock(), self.devices())
        devices = self._cached[1]
        labels = ["hostname", "public_key", "iface", "listen_port"]
        meta = GaugeMetricFamily(
            "wireguard_meta", "wireguard interface and runtime metadata", labels=labels
        )
        peer_labels = ["hostname", "public_key", "peer_key", "peer_endpoint"]
        received = CounterMetricFamily(
            "wireguard_bytes_rcvd",
            "wireguard interface incoming bytes count from peer",
            labels=peer_labels,
        )
        sent = CounterMetricFamily(
            "wireguard_bytes_sent",
            "wireguard interface outgoing bytes count to peer",
            labels=peer_labels,
        )
        handshake = GaugeMetricFamily(
            "wireguard_latest_handshake_seconds",
            "wireguard interface latest handshake unix timestamp in seconds to a peer",
            labels=peer_labels,
        )
        for device in devices:
            meta.add_metric(
                [self.hostname, device.public_key, device.name, str(device.listen_port)], 1
            )
            for peer in device.peers:
                values = [self.hostname, device.public_key, peer.key, peer.endpoint]
                received.add_metric(values, peer.received)
                sent.add_metric(values, peer.sent)
                handshake.add_metric(values, peer.handshake)
        yield from (meta, received, sent, handshake)


def registry(
    config: FelixConfig, felix: Collector, wireguard: Collector | None = None
) -> CollectorRegistry:
    """Felix's families plus the runtime collectors the configuration enables (and, given,
    the WireGuard families: PrometheusWireGuardMetricsEnabled)."""
    result = CollectorRegistry()
    result.register(felix)
    if wireguard is not None and config.prometheus_wireguard_metrics_enabled:
        result.register(wireguard)
    if config.prometheus_process_metrics_enabled:
        ProcessCollector(registry=result)
    if config.prometheus_go_metrics_enabled:
        PlatformCollector(registry=result)
        GCCollector(registry=result)
    return result


def exposition(collectors: CollectorRegistry) -> bytes:
    """The text format, felix counters under Felix's own names."""
    text = generate_latest(collectors)
    counters = _COUNTER_TYPE.findall(text)
    if not counters:
        return text
    names = b"|".join(re.escape(name) for name in counters)
    suffixed = re.compile(rb"^(# (?:HELP|TYPE) )?(" + names + rb")_total\b", re.MULTILINE)
    return suffixed.sub(rb"\1\2", text)


def metrics_routes(collectors: CollectorRegistry) -> Mapping[str, Callable[[], Response]]:
    return {"/metrics": lambda: (200, CONTENT_TYPE, exposition(collectors))}


def tls_context(config: FelixConfig) -> Callable[[], ssl.SSLContext] | None:
    """HTTPS for the metrics port when PrometheusMetricsCertFile or KeyFile is set, as Felix
    serves it: the certificate and key, client certificates checked against
    PrometheusMetricsCAFile as PrometheusMetricsClientAuth says. Files are read for every
    connection (renewed certificates apply at once); an unusable one is an error naming it."""
    cert, key = config.prometheus_metrics_cert_file, config.prometheus_metrics_key_file
    if not (cert or key):
        return None
    ca, auth = config.prometheus_metrics_ca_file, str(config.prometheus_metrics_client_auth)
    if auth == "RequireAnyClientCert":
        log.warning(
            "PrometheusMetricsClientAuth RequireAnyClientCert: client certificates are "
            "verified against PrometheusMetricsCAFile (Python cannot accept unverified ones)"
        )

    def context() -> ssl.SSLContext:
        result = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        result.minimum_version = ssl.TLSVersion.TLSv1_2
        for name, path in (("CertFile", cert), ("KeyFile", key), ("CAFile", ca)):
            if not path:
                raise MetricsTLSError(
                    f"PrometheusMetrics{name} is needed to serve metrics over TLS"
                )
        try:
            result.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise MetricsTLSError(
                f"PrometheusMetricsCertFile {cert} with PrometheusMetricsKeyFile {key}: {exc}"
            ) from exc
        try:
            result.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise MetricsTLSError(f"PrometheusMetricsCAFile {ca}: {exc}") from exc
        result.verify_mode = CLIENT_AUTH[auth]
        return result

    return context
