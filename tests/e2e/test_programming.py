"""The agent programs a node: routes and policy with live edits and repair, health and metrics, a
clean stop, restart with an established connection and after an edit, python-iptables reading
the legacy backend, a refused table write, ChainInsertMode and backend detection."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.rules.render import render
from tests.e2e.cluster import (
    CLIENT_IP,
    POLICY,
    SERVER_IP,
    Cluster,
    fetch,
    metrics,
    program,
)
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns


def test_agent_programs_routes_and_policy(cluster: Cluster) -> None:
    """The agent routes to its workloads and enforces policy; edits apply within seconds;
    tampering (a flushed chain, a removed FORWARD jump, a deleted workload route, deleted
    IP set members) is repaired by the next refresh."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "http"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    routes = run_in(cluster.node, "ip", "route", "show", "proto", "boot").stdout
    assert f"{SERVER_IP} dev calisrv" in routes
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)

    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "9090"))
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=5)
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)

    saved = run_in(cluster.node, "iptables-nft-save", "-t", "filter").stdout
    chain = next(
        line.split()[1] for line in saved.splitlines() if line.startswith("-A cali-tw-calisrv")
    )
    run_in(cluster.node, "iptables-nft", "-F", chain)
    run_in(cluster.node, "iptables-nft", "-D", "FORWARD", "-j", "cali-FORWARD")

    def repaired() -> bool:
        text = run_in(cluster.node, "iptables-nft-save", "-t", "filter").stdout
        return "-A cali-tw-calisrv" in text and "-j cali-FORWARD" in text

    assert eventually(repaired, timeout=5)

    run_in(cluster.node, "ip", "route", "del", f"{SERVER_IP}/32")
    sets = run_in(cluster.node, "ipset", "list", "-n").stdout.split()
    cluster_set = next(name for name in sets if name.startswith("cali40s:"))
    before = run_in(cluster.node, "ipset", "save", cluster_set).stdout
    for line in before.splitlines():
        if line.startswith("add "):
            run_in(cluster.node, "ipset", "del", cluster_set, line.split()[2])

    def routes_and_sets_repaired() -> bool:
        routes = run_in(cluster.node, "ip", "route", "show", "proto", "boot").stdout
        return (
            f"{SERVER_IP} dev calisrv" in routes
            and run_in(cluster.node, "ipset", "save", cluster_set).stdout == before
        )

    assert eventually(routes_and_sets_repaired, timeout=5)
    assert cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    assert cluster.agent is not None
    assert cluster.agent.poll() is None


def test_health_metrics_and_clean_stop(cluster: Cluster) -> None:
    """Health and metrics answer as configured; SIGTERM stops the agent with exit code 0 and
    leaves the dataplane programmed (allowed traffic keeps flowing)."""
    cluster.start_agent()
    assert eventually(lambda: fetch(cluster, "http://127.0.0.1:9099/readiness").startswith("200"))
    liveness = fetch(cluster, "http://127.0.0.1:9099/liveness")
    assert liveness.startswith("200")
    # Felix's component table: each component, its timeout and state.
    assert "CalculationGraph" in liveness
    assert "InternalDataplaneMainLoop" in liveness
    values = metrics(cluster)
    assert values['felix_calc_graph_updates_processed{type="WorkloadEndpointKey"}'] >= 2
    assert values['felix_host{host="node"}'] == 1
    assert values["felix_active_local_endpoints"] == 2
    assert values["felix_int_dataplane_apply_time_seconds_count"] >= 1
    assert values["felix_int_dataplane_apply_time_seconds_sum"] > 0
    # One save and one restore per IP version (the four tables in one restore), IPv4 and IPv6.
    assert values["felix_iptables_restore_calls"] >= 2
    assert values["felix_iptables_save_calls"] >= 2
    assert values["felix_ipset_calls"] >= 1
    assert values["felix_iptables_restore_errors"] == values["felix_int_dataplane_failures"] == 0
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
    assert cluster.agent is not None
    cluster.agent.terminate()
    assert cluster.agent.wait(timeout=10) == 0
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
    assert "cali-FORWARD" in run_in(cluster.node, "iptables-nft-save").stdout


@pytest.mark.both_modes
def test_restart_keeps_established_connections(cluster: Cluster) -> None:
    """Restarting the agent leaves an established allowed connection working, and new
    connections keep succeeding: nothing is torn down while the new agent starts."""
    cluster.serve(cluster.workloads[SERVER_IP], program("echo_server.py"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
    client = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            cluster.workloads[CLIENT_IP],
            sys.executable,
            program("long_client.py"),
            SERVER_IP,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cluster.servers.append(client)
    assert client.stdin is not None
    assert client.stdout is not None

    def echo(word: str) -> str:
        assert client.stdin is not None
        assert client.stdout is not None
        client.stdin.write(word + "\n")
        client.stdin.flush()
        return client.stdout.readline().strip()

    assert echo("before") == "before"
    assert cluster.agent is not None
    cluster.agent.terminate()
    assert cluster.agent.wait(timeout=10) == 0
    cluster.start_agent()
    assert echo("during") == "during"
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
    time.sleep(2)
    assert echo("after") == "after"
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)


@pytest.mark.both_modes
def test_a_policy_changed_while_the_agent_was_stopped_holds_after_its_restart(
    cluster: Cluster,
) -> None:
    """A restarted agent finds its last run's rules in place (read while its snapshot loads)
    and plans from them: the policy edited while no agent ran is the one in force, the port
    it no longer allows closed."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "http"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
    assert cluster.agent is not None
    cluster.agent.terminate()
    assert cluster.agent.wait(timeout=10) == 0
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "9090"))
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080), "the rules stay while no agent runs"
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090))
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)


def test_python_iptables_agrees_with_the_legacy_backend(cluster: Cluster) -> None:
    """With IptablesBackend Legacy, python-iptables (libiptc, independent of our code) reads
    exactly the cali chains and rule ids the renderer computed for this node."""
    base = cluster.manifests / "base.yaml"
    base.write_text(
        base.read_text().replace(
            "iptablesRefreshInterval: 1s", "iptablesRefreshInterval: 1s\n  iptablesBackend: Legacy"
        )
    )
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
    result = run_in(cluster.node, sys.executable, program("iptc_dump.py"))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    resources = [item.resource for item in load_paths([cluster.manifests]).resources]
    _, dataplane = compute(resources, "node")
    rendered = render(dataplane, versions=(4,))
    # python-iptables cuts a comment at "--" (it parses it like an option), so ids are compared
    # up to the first "--" on both sides.
    expected = {
        f"{table}/{chain.name}": [f"cali:{h}".split("--")[0] for h in chain.rule_hashes()]
        for table, chains in rendered.chains[4].items()
        for chain in chains
    }
    assert {k: [c.split("--")[0] for c in v] for k, v in seen.items()} == expected


def test_failed_table_write_is_atomic_logged_and_retried(cluster: Cluster, tmp_path: Path) -> None:
    """A transaction the kernel refuses (here: deleting a stale cali chain that someone else's
    chain still jumps to) leaves that table exactly as it was, is logged with the failing line
    and counted, and is retried with backoff until it succeeds."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    node = cluster.node
    for command in ("-N cali-stale", "-N mychain", "-A mychain -j cali-stale"):
        assert run_in(node, "iptables-nft", *command.split()).returncode == 0
    log = tmp_path / "agent.log"
    cluster.start_agent(log=log)

    def failures() -> float:
        return metrics(cluster).get("felix_int_dataplane_failures", 0.0)

    assert eventually(lambda: failures() >= 2), "never retried"
    assert "failing line: -X cali-stale" in log.read_text()
    saved = run_in(node, "iptables-nft-save", "-t", "filter").stdout
    assert ":cali-tw-calisrv" not in saved, "the refused transaction left part of itself"
    assert "cali-FORWARD" not in saved
    assert cluster.connects(CLIENT_IP, SERVER_IP, 9090), "nothing programmed, nothing enforced"

    run_in(node, "iptables-nft", "-F", "mychain")
    assert eventually(lambda: not cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=15)
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
    assert ":cali-stale" not in run_in(node, "iptables-nft-save", "-t", "filter").stdout
    settled = failures()
    time.sleep(2)
    assert failures() == settled


@pytest.mark.parametrize(("mode", "port_9090"), [("Insert", False), ("Append", True)])
def test_chain_insert_mode(cluster: Cluster, tmp_path: Path, mode: str, port_9090: bool) -> None:
    """ChainInsertMode: Felix's jump goes before the node's own FORWARD rules (Insert, the
    default) or after them (Append), where a rule of the node's accepts before policy runs;
    either way FORWARD ends with Felix's accept of what policy accepted, and its mark."""
    config = cluster.manifests / "base.yaml"
    config.write_text(
        config.read_text().replace(
            "iptablesRefreshInterval: 1s", f"iptablesRefreshInterval: 1s\n  chainInsertMode: {mode}"
        )
    )
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    accept = ["-p", "tcp", "--dport", "9090", "-j", "ACCEPT"]
    assert run_in(cluster.node, "iptables-nft", "-A", "FORWARD", *accept).returncode == 0
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert eventually(
        lambda: "-j cali-FORWARD" in run_in(cluster.node, "iptables-nft", "-S", "FORWARD").stdout
    )
    forward = run_in(cluster.node, "iptables-nft", "-S", "FORWARD").stdout.splitlines()
    rules = [line for line in forward if line.startswith("-A FORWARD")]
    hook = next(i for i, line in enumerate(rules) if "cali-FORWARD" in line)
    assert hook == (len(rules) - 3 if mode == "Append" else 0)
    assert "Policy explicitly accepted packet." in rules[-2]
    assert rules[-2].endswith("-j ACCEPT")
    assert rules[-1].endswith("-j MARK --set-xmark 0x10000/0x10000")
    assert cluster.connects(CLIENT_IP, SERVER_IP, 9090) == port_9090


def test_other_programs_forward_rules_apply_to_what_policy_accepts(cluster: Cluster) -> None:
    """As with Felix, what policy accepts returns from cali-FORWARD and is accepted only at the
    end of FORWARD: a rule another program added to FORWARD still applies to it (Felix's
    rules used to accept inside cali-FORWARD, which skipped every such rule). Appended after
    ours, such a rule is moved in front of them on the next refresh."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "http"))
    drop = ["-d", SERVER_IP, "-p", "tcp", "--dport", "8080", "-j", "DROP"]
    assert run_in(cluster.node, "iptables-nft", "-A", "FORWARD", *drop).returncode == 0
    cluster.start_agent()

    def forward() -> list[str]:
        text = run_in(cluster.node, "iptables-nft", "-S", "FORWARD").stdout
        return [line for line in text.splitlines() if line.startswith("-A FORWARD")]

    assert eventually(lambda: len(forward()) == 4), "never programmed"
    assert "--dport 8080 -j DROP" in forward()[1]
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080), "the node's own DROP was skipped"
    assert run_in(cluster.node, "iptables-nft", "-D", "FORWARD", *drop).returncode == 0
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
    assert run_in(cluster.node, "iptables-nft", "-A", "FORWARD", *drop).returncode == 0
    assert eventually(lambda: "--dport 8080 -j DROP" in forward()[1], timeout=5)
    assert forward()[-1].endswith("-j MARK --set-xmark 0x10000/0x10000")
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)


def test_backend_detected_from_existing_rules(cluster: Cluster, tmp_path: Path) -> None:
    """Without IptablesBackend, the agent writes with the backend that already holds the
    node's rules: legacy here, though nft is the default."""
    assert run_in(cluster.node, "iptables-legacy", "-A", "INPUT", "-j", "ACCEPT").returncode == 0
    log = tmp_path / "agent.log"
    cluster.start_agent(log=log)
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert eventually(lambda: "programming with iptables-legacy" in log.read_text())
    assert ":cali-FORWARD" in run_in(cluster.node, "iptables-legacy-save", "-t", "filter").stdout
    assert "cali-" not in run_in(cluster.node, "iptables-nft-save").stdout


@pytest.mark.parametrize("forwarding", ["Enabled", "Disabled"])
def test_ip_forwarding_as_felix_sets_it(cluster: Cluster, forwarding: str) -> None:
    """IPForwarding Enabled (the default) turns on the node's global IPv4 and IPv6 forwarding
    at start; Disabled leaves them as they were. Conntrack accounting is on either way."""
    base = cluster.manifests / "base.yaml"
    base.write_text(
        base.read_text().replace("spec:\n", f"spec:\n  ipForwarding: {forwarding}\n", 1)
    )
    node = cluster.node
    for setting in ("net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0"):
        assert run_in(node, "sysctl", "-qw", setting).returncode == 0
    cluster.start_agent()
    assert eventually(lambda: fetch(cluster, "http://127.0.0.1:9099/readiness").startswith("200"))

    def sysctl(name: str) -> str:
        return run_in(node, "sysctl", "-n", name).stdout.strip()

    expected = "1" if forwarding == "Enabled" else "0"
    assert sysctl("net.ipv4.ip_forward") == expected
    assert sysctl("net.ipv6.conf.all.forwarding") == expected
    assert sysctl("net.netfilter.nf_conntrack_acct") == "1"
    # Workload interfaces forward either way: Felix turns forwarding on per interface too.
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)


def nft_listing(node: str) -> str:
    return run_in(node, "nft", "list", "table", "ip", "calico").stdout


@pytest.mark.parametrize("dataplane_mode", ["nftables"], indirect=True)
def test_nftables_mode_repairs_tampering_and_hands_over_both_ways(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, dataplane_mode: str, tmp_path: Path
) -> None:
    """NFTablesMode Enabled: the policy lives in the ip/ip6 calico tables, none of it in
    iptables or ipsets; a deleted set element, a flushed chain and a flushed base chain (the
    hook gone) are repaired on the NftablesRefreshInterval (1 s); another tool's nft table
    is left alone. Restarted in the iptables mode the agent removes the calico tables once
    its iptables rules are in place, and back in the nftables mode it removes its iptables
    chains and IP sets; the policy holds throughout."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "http"))
    run_in(cluster.node, "nft", "add", "table", "inet", "other")
    run_in(cluster.node, "nft", "add", "chain", "inet", "other", "keep")
    log = tmp_path / "agent.log"
    monkeypatch.setenv("FELIX_LOGSEVERITYSCREEN", "Debug")  # the repair's steps, if it fails
    cluster.start_agent(log=log)
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    listed = nft_listing(cluster.node)
    assert "chain filter-cali-tw-calisrv {" in listed
    assert "cali-" not in run_in(cluster.node, "iptables-nft-save").stdout
    assert "cali" not in run_in(cluster.node, "ipset", "list", "-n").stdout
    assert "ip6 calico" in run_in(cluster.node, "nft", "list", "tables").stdout

    allowed = next(
        line.split()[1] for line in listed.splitlines() if line.strip().startswith("set cali40s-")
    )
    elements = run_in(cluster.node, "nft", "list", "set", "ip", "calico", allowed).stdout
    member = elements.split("elements = {")[1].split("}")[0].split(",")[0].strip()
    tampering = [
        ("delete", "element", "ip", "calico", allowed, f"{{ {member} }}"),
        ("flush", "chain", "ip", "calico", "filter-cali-tw-calisrv"),
        ("flush", "chain", "ip", "calico", "filter-FORWARD"),
    ]
    for argv in tampering:
        assert run_in(cluster.node, "nft", *argv).returncode == 0, argv

    def repaired() -> bool:
        text = nft_listing(cluster.node)
        tw = text.split("chain filter-cali-tw-calisrv {")[1].split("}")[0]
        forward = text.split("chain filter-FORWARD {")[1].split("}")[0]
        return member in text and "jump" in tw and "jump filter-cali-FORWARD" in forward

    assert eventually(repaired, timeout=5), f"{nft_listing(cluster.node)}\n{log.read_text()}"
    assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    assert "chain keep" in run_in(cluster.node, "nft", "list", "table", "inet", "other").stdout

    for mode, present, absent in (("Disabled", "iptables", "nft"), ("Enabled", "nft", "iptables")):
        assert cluster.agent is not None
        cluster.agent.terminate()
        assert cluster.agent.wait(timeout=10) == 0
        monkeypatch.setenv("FELIX_NFTABLESMODE", mode)
        cluster.start_agent()

        def handed_over(present: str = present) -> bool:
            tables = run_in(cluster.node, "nft", "list", "tables").stdout
            iptables = "cali-FORWARD" in run_in(cluster.node, "iptables-nft-save").stdout
            return (("ip calico" in tables) != iptables) and (iptables == (present == "iptables"))

        assert eventually(handed_over, timeout=10), (present, absent)
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    assert "cali" not in run_in(cluster.node, "ipset", "list", "-n").stdout
