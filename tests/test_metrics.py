"""Felix's metrics as a scraper sees them: Felix's names and types, the runtime collectors the
configuration enables, and HTTPS with client certificates."""

from __future__ import annotations

import logging
import math
import os
import ssl
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
import trio
import trio.testing
from prometheus_client.core import Metric

from pyfelix import messages as m
from pyfelix import model
from pyfelix.agent import dataplane_readiness
from pyfelix.calc.async_loop import CalcLoop
from pyfelix.calc.decoupler import Decoupler
from pyfelix.config import parse_config
from pyfelix.demo import DemoNode
from pyfelix.httpserver import HttpServer
from pyfelix.messages import RuleIPSets
from pyfelix.metrics import FelixCollector, exposition, metrics_routes, registry, tls_context
from pyfelix.stats import MAX_AGE, DataplaneStats, Observations
from pyfelix.syncer.api import SyncStatus
from pyfelix.syncer.processors import Converter
from pyfelix_dataplane.linux.commands import CALLS
from pyfelix_dataplane.linux.managers.ipsets import IpsetsManager
from pyfelix_dataplane.state import NodeState
from tests.calc_harness import example_state
from tests.conftest import REPO
from tests.etcd_server import free_port, make_certificates
from tests.fake_kernel import FakeIpsets, FakeNode
from tests.netns import eventually


async def _synced_loop(nursery: trio.Nursery) -> CalcLoop:
    decoupler = Decoupler()
    send, receive = trio.open_memory_channel[m.Flush](10_000)
    loop = CalcLoop("node-a", decoupler, send)
    await nursery.start(loop.run)
    converter = Converter()
    for key, resource in example_state().items():
        decoupler.on_updates(converter.update(key, resource))
    decoupler.on_status(SyncStatus.IN_SYNC)
    await trio.sleep(1)
    nursery.start_soon(_drain, receive)
    return loop


async def _drain(receive: trio.MemoryReceiveChannel[m.Flush]) -> None:
    async for _ in receive:
        pass


def _samples(text: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_felix_families_names_and_types(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        loop = await _synced_loop(nursery)
        stats = DataplaneStats()
        stats.applies.observe(0.25)
        stats.messages["InSync"] += 1
        CALLS["ipset"] += 1
        collector = FelixCollector("node-a", loop, stats, lambda: (4, 6))
        text = exposition(registry(parse_config({}), collector)).decode()
        nursery.cancel_scope.cancel()
    samples = _samples(text)
    # Counters keep Felix's (Go client's) names: no _total suffix, still typed counter.
    assert "# TYPE felix_ipset_calls counter" in text
    assert samples["felix_ipset_calls"] >= 1
    assert "felix_ipset_calls_total" not in text
    assert samples['felix_calc_graph_updates_processed{type="WorkloadEndpointKey"}'] >= 1
    assert samples["felix_resync_state"] == 3
    assert samples['felix_host{host="node-a"}'] == 1
    assert samples['felix_ipsets_calico{ip_version="6"}'] == len(loop.graph.ipsets)
    assert samples['felix_int_dataplane_messages{type="InSync"}'] == 1
    # Summaries as Felix's: quantiles, sum and count.
    assert "# TYPE felix_int_dataplane_apply_time_seconds summary" in text
    assert samples['felix_int_dataplane_apply_time_seconds{quantile="0.99"}'] == 0.25
    assert samples["felix_int_dataplane_apply_time_seconds_count"] == 1
    assert samples["felix_calc_graph_update_time_seconds_count"] >= 1
    # The runtime collectors Felix's Go and process settings stand for.
    assert "process_cpu_seconds_total" in samples
    assert any(name.startswith("python_gc_") for name in samples)


async def test_runtime_collectors_follow_the_configuration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        loop = await _synced_loop(nursery)
        config = parse_config(
            {"PrometheusGoMetricsEnabled": "false", "PrometheusProcessMetricsEnabled": "false"}
        )
        text = exposition(registry(config, FelixCollector("n", loop, DataplaneStats()))).decode()
        nursery.cancel_scope.cancel()
    assert "felix_resync_state" in text
    assert "process_" not in text
    assert "python_" not in text


def test_summary_quantiles_over_the_recent_window() -> None:
    now = [0.0]
    observations = Observations(clock=lambda: now[0])
    assert all(math.isnan(v) for v in observations.quantiles().values())
    for value in range(1, 101):
        observations.observe(float(value))
    assert observations.quantiles() == {0.5: 51.0, 0.9: 91.0, 0.99: 100.0}
    now[0] = MAX_AGE + 1
    observations.observe(7.0)
    assert observations.quantiles() == {0.5: 7.0, 0.9: 7.0, 0.99: 7.0}
    assert observations.count == 101


async def _https_get(port: int, context: ssl.SSLContext) -> str:
    """The response, or "" when the server broke the connection off (TLS 1.3 checks the
    client's certificate after the client's side of the handshake is done)."""
    data = b""
    try:
        stream = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=context)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            while chunk := await stream.receive_some(65536):
                data += chunk
    except trio.BrokenResourceError:
        pass  # refused, or the server's close without a TLS close_notify after answering
    return data.decode()


async def test_metrics_over_tls_with_client_certificates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_certificates(tmp_path)
    config = parse_config(
        {
            "PrometheusMetricsCertFile": str(tmp_path / "server.pem"),
            "PrometheusMetricsKeyFile": str(tmp_path / "server-key.pem"),
            "PrometheusMetricsCAFile": str(tmp_path / "ca.pem"),
            "PrometheusMetricsClientAuth": "RequireAndVerifyClientCert",
        }
    )
    tls = tls_context(config)
    assert tls is not None
    server = HttpServer(
        {"/metrics": lambda: (200, "text/plain", b"felix_host 1\n")}, tls=tls, name="metrics"
    )
    port = free_port()
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, "127.0.0.1", port)
        await trio.sleep(0.2)
        assert await _https_get(port, client) == "", "no client certificate: refused"
        client.load_cert_chain(tmp_path / "client.pem", tmp_path / "client-key.pem")
        answer = await _https_get(port, client)
        assert answer.startswith("HTTP/1.1 200")
        assert answer.endswith("felix_host 1\n")
        # A certificate file that goes missing is reported by name; the server stays up.
        (tmp_path / "server.pem").rename(tmp_path / "moved.pem")
        with caplog.at_level(logging.ERROR):
            assert await _https_get(port, client) == ""
        assert "PrometheusMetricsCertFile" in caplog.text
        assert str(tmp_path / "server.pem") in caplog.text
        (tmp_path / "moved.pem").rename(tmp_path / "server.pem")
        assert (await _https_get(port, client)).startswith("HTTP/1.1 200")
        nursery.cancel_scope.cancel()


def test_plain_http_without_certificates() -> None:
    assert tls_context(parse_config({})) is None
    routes = metrics_routes(registry(parse_config({}), _EmptyCollector()))
    status, content_type, body = routes["/metrics"]()
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    assert b"process_cpu_seconds_total" in body


class _EmptyCollector:
    def collect(self) -> list[Metric]:
        return []


async def test_an_ip_set_programmed_cut_is_a_metric() -> None:
    """A set over MaxIpsetSize is programmed with its first MaxIpsetSize members: a deny set
    then lets the rest through, so it is loud in the metrics too, by name, until it fits."""
    node = FakeNode()
    stats = DataplaneStats()
    writer = FakeIpsets(node)
    manager = IpsetsManager(NodeState(), writer, (4,), stats)
    writer.oversized["cali40s:deny-these"] = 2_500_000
    await manager.complete_deferred_work()
    (family,) = [f for f in FelixCollector._dataplane(stats) if f.name.startswith("pyfelix_ipset")]
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"set": "cali40s:deny-these"}, 2_500_000)
    ]
    writer.oversized.clear()
    await manager.complete_deferred_work()
    (family,) = [f for f in FelixCollector._dataplane(stats) if f.name.startswith("pyfelix_ipset")]
    assert family.samples == []


def _policy(name: str, action: str, sets: RuleIPSets) -> m.ActivePolicyUpdate:
    rule = model.Rule(action=action)
    policy = model.Policy("", "default", 1.0, (rule,), (), "all()")
    policy_id = m.PolicyID("default", name)
    return m.ActivePolicyUpdate(policy_id, policy, inbound=(m.ParsedRule(rule, sets),))


async def test_the_policies_an_ip_set_programmed_cut_weakens_are_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Deny rule matching a set programmed cut lets the members left out through, and so
    does an Allow rule matching outside it: each such policy is named in an error log, a
    metric and the dataplane's health detail, and the node is not ready until the set fits.
    An Allow rule matching in the set only denies more, and weakens nothing."""
    state = NodeState()
    state.ipsets["s:deny-these"] = ("hash:net", set())
    state.policies = {
        p.id: p
        for p in (
            _policy("deny-these", "deny", RuleIPSets(src=("s:deny-these",))),
            _policy("allow-others", "allow", RuleIPSets(not_src=("s:deny-these",))),
            _policy("allow-these", "allow", RuleIPSets(src=("s:deny-these",))),
        )
    }
    stats = DataplaneStats()
    writer = FakeIpsets(FakeNode())
    manager = IpsetsManager(state, writer, (4,), stats)
    writer.oversized["cali40s:deny-these"] = 2_500_000
    with caplog.at_level(logging.ERROR):
        await manager.complete_deferred_work()
    named = ("GlobalNetworkPolicy allow-others", "GlobalNetworkPolicy deny-these")
    assert stats.weakened_policies == {"cali40s:deny-these": named}
    assert "cali40s:deny-these" in caplog.text
    assert ", ".join(named) in caplog.text
    (family,) = [f for f in FelixCollector._dataplane(stats) if f.name.startswith("pyfelix_pol")]
    assert [s.labels["policy"] for s in family.samples] == list(named)
    ready, detail = dataplane_readiness(True, stats)
    assert not ready
    assert detail == f"IP set cali40s:deny-these over MaxIpsetSize weakens {', '.join(named)}"
    writer.oversized.clear()
    await manager.complete_deferred_work()
    assert dataplane_readiness(True, stats) == (True, "")


#: Every metric Calico's Felix dashboard (manifests/grafana-dashboards.yaml, "Calico: Felix")
#: queries, but felix_bpf_events and felix_nflog_*: labelled families a Felix without the BPF
#: dataplane or flow logs has no sample of either (Go's client leaves out a family with no
#: samples). The BPF conntrack and flow collector ones Felix registers at start: zero here, as
#: in Felix without them.
DASHBOARD = (
    "felix_bpf_conntrack_used",
    "felix_bpf_conntrack_sweep_duration",
    "felix_collector_epstats",
    "felix_collector_conntrack_processing_latency_seconds_sum",
    "felix_cluster_num_hosts",
    "felix_cluster_num_policies",
    "felix_cluster_num_profiles",
    "felix_cluster_num_tiers",
    "felix_cluster_num_host_endpoints",
    "felix_cluster_num_workload_endpoints",
    "felix_resyncs_started",
    "felix_active_local_endpoints",
    "felix_active_local_policies",
    "felix_active_local_selectors",
    "felix_calc_graph_update_time_seconds_sum",
    "felix_calc_graph_update_time_seconds_count",
    "felix_calc_graph_update_time_seconds",
    "felix_int_dataplane_apply_time_seconds_sum",
    "felix_int_dataplane_apply_time_seconds_count",
    "felix_int_dataplane_apply_time_seconds",
    "felix_ipset_errors",
    "felix_iptables_restore_errors",
    "felix_iptables_save_errors",
    "felix_iptables_rules",
    "felix_ipsets_calico",
)


async def test_the_cluster_counts(autojump_clock: trio.testing.MockClock) -> None:
    """felix_cluster_num_*: the example's two nodes, its endpoints, tiers, policies and
    profiles, cluster-wide (not only this node's)."""
    async with trio.open_nursery() as nursery:
        loop = await _synced_loop(nursery)
        collector = FelixCollector("node-a", loop, DataplaneStats())
        samples = _samples(exposition(registry(parse_config({}), collector)).decode())
        nursery.cancel_scope.cancel()
    kinds = [resource.KIND for resource in example_state().values()]
    assert samples["felix_cluster_num_hosts"] == 2
    assert samples["felix_cluster_num_workload_endpoints"] == kinds.count("WorkloadEndpoint")
    assert samples["felix_cluster_num_host_endpoints"] == kinds.count("HostEndpoint")
    assert samples["felix_cluster_num_tiers"] == kinds.count("Tier")
    policies = sum(1 for kind in kinds if kind.endswith("Policy"))  # staged ones too
    assert samples["felix_cluster_num_policies"] == policies
    assert samples["felix_cluster_num_profiles"] >= 1
    assert samples["felix_active_local_selectors"] == len(loop.graph.ipsets) > 0


@pytest.mark.netns
@pytest.mark.parametrize("mode", ["Disabled", "Enabled"])
def test_a_running_agent_serves_every_metric_of_felix_dashboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The agent programming a node (in a namespace of its own), scraped as Prometheus
    scrapes it: every name the dashboard's panels query has samples; in the nftables mode
    the nft families stand where the iptables rules do (as in Felix's)."""
    port = free_port()
    monkeypatch.setenv("FELIX_NFTABLESMODE", mode)
    monkeypatch.setenv("FELIX_PROMETHEUSMETRICSENABLED", "true")
    monkeypatch.setenv("FELIX_PROMETHEUSMETRICSPORT", str(port))
    nftables = mode == "Enabled"
    url = f"http://127.0.0.1:{port}/metrics"
    fetch = f"import urllib.request as u; print(u.urlopen({url!r}, timeout=2).read().decode())"
    with ExitStack() as stack:
        node = DemoNode(stack, tag=f"m{os.getpid()}")
        node.start_agent(REPO / "examples", "node-a", tmp_path / "agent.log")
        scraped = {"text": ""}

        def scrape() -> bool:
            done = subprocess.run(
                ["ip", "netns", "exec", node.node, sys.executable, "-c", fetch],
                capture_output=True,
                text=True,
                check=False,
            )
            scraped["text"] = done.stdout
            if nftables:
                return "felix_nft_rules{" in done.stdout
            # The routes are counted once written, which may follow the rules: wait for
            # both (under load, a scrape fell between them).
            samples = _samples(done.stdout)
            return all(
                samples.get(name, 0) > 0
                for name in (
                    'felix_iptables_rules{ip_version="4",table="filter"}',
                    'felix_route_table_num_routes{table="main"}',
                )
            )

        assert eventually(scrape, timeout=30), (tmp_path / "agent.log").read_text()[-3000:]
    names = {line.split("{")[0].split(" ")[0] for line in scraped["text"].splitlines()}
    samples = _samples(scraped["text"])
    if nftables:
        missing = [name for name in DASHBOARD if name not in names and "iptables" not in name]
        assert missing == []
        assert samples['felix_nft_rules{ip_version="4"}'] > 0
        assert samples['felix_nft_sets{ip_version="4"}'] > 0
        assert samples["felix_nft_calls"] >= 1
        return
    missing = [name for name in DASHBOARD if name not in names]
    assert missing == []
    assert samples['felix_iptables_rules{ip_version="4",table="filter"}'] > 0
    assert samples['felix_route_table_num_routes{table="main"}'] > 0
    assert samples["felix_route_table_resync_seconds_count"] >= 1
    assert samples["felix_log_errors"] == 0
    assert samples['felix_iptables_chains{ip_version="4",table="filter"}'] > 0
    executed = samples['felix_iptables_lines_executed{ip_version="4",table="filter"}']
    assert executed >= samples['felix_iptables_rules{ip_version="4",table="filter"}']
    assert samples["felix_int_dataplane_msg_batch_size_count"] >= 1
    assert samples["felix_int_dataplane_msg_batch_size_sum"] > 0
    assert samples["felix_cluster_num_hosts"] == 2


DUMP = (
    "wireguard.cali\tPRIV\tPUBKEY=\t51820\t0x100000\n"
    "wireguard.cali\tPEERB=\t(none)\t192.0.2.2:51820\t10.65.2.0/26\t1764950000\t1234\t5678\t0\n"
    "wireguard.cali\tPEERC=\t(none)\t(none)\t10.65.3.0/26\t0\t0\t0\t0\n"
)


class _Nothing:
    """No families: a registry with only the WireGuard collector's."""

    def collect(self) -> list[Metric]:
        return []


def test_wireguard_families_as_felix_names_them() -> None:
    """PrometheusWireGuardMetricsEnabled: every WireGuard device and peer on the host, with
    Felix's names, types and labels (a peer never heard from has Go's <nil> endpoint)."""
    from pyfelix.metrics import WireguardCollector  # noqa: PLC0415
    from pyfelix_dataplane.linux.wireguard import parse_dump  # noqa: PLC0415

    collector = WireguardCollector("node-a", lambda: parse_dump(DUMP))
    text = exposition(registry(parse_config({}), _Nothing(), collector)).decode()
    samples = _samples(text)
    assert "# TYPE wireguard_bytes_rcvd counter" in text
    assert "wireguard_bytes_rcvd_total" not in text
    device = 'hostname="node-a",iface="wireguard.cali",listen_port="51820",public_key="PUBKEY="'
    assert samples[f"wireguard_meta{{{device}}}"] == 1
    peer = 'hostname="node-a",peer_endpoint="192.0.2.2:51820",peer_key="PEERB="'
    peer += ',public_key="PUBKEY="'
    assert samples[f"wireguard_bytes_rcvd{{{peer}}}"] == 1234
    assert samples[f"wireguard_bytes_sent{{{peer}}}"] == 5678
    assert samples[f"wireguard_latest_handshake_seconds{{{peer}}}"] == 1764950000
    assert 'peer_endpoint="<nil>"' in text
    disabled = parse_config({"PrometheusWireGuardMetricsEnabled": "false"})
    assert "wireguard_meta" not in exposition(registry(disabled, _Nothing(), collector)).decode()
