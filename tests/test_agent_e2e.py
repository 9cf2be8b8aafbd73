"""The agent for real: ``pyfelix run`` inside a node namespace programs ipsets, routes and
iptables; workloads in their own namespaces, wired as Calico's CNI plugin wires them (a veth
pair, nothing else on the host side), talk over real TCP. Nothing here touches the root
namespace: the agent runs under ``ip netns exec``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.demo import DemoNode, Workload
from pyfelix.dryrun import compute
from pyfelix.pods import SERVER, connects
from pyfelix.resources import load_paths
from pyfelix.status import status_prefix
from pyfelix_dataplane.rules.render import render
from tests.etcd_server import EtcdServer
from tests.netns import eventually, run_in
from tests.workloads import OPEN_PROFILE

pytestmark = pytest.mark.netns

SERVER_IP, CLIENT_IP = "10.65.0.2", "10.65.0.3"
MANIFESTS = (
    """
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  iptablesRefreshInterval: 1s
  ipsetsRefreshInterval: 1s
  routeRefreshInterval: 1s
  reportingInterval: 1s
  healthEnabled: true
  healthHost: 127.0.0.1
  healthPort: 9099
  prometheusMetricsEnabled: true
  prometheusMetricsPort: 9091
---"""
    + OPEN_PROFILE
    + """---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node-k8s-server-eth0, namespace: app, labels: {app: server}}
spec:
  {orchestrator: k8s, node: node, pod: server, endpoint: eth0, interfaceName: calisrv,
   ipNetworks: [10.65.0.2/32], profiles: [open],
   ports: [{name: http, protocol: TCP, port: 8080, hostPort: 0, hostIP: ""}]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node-k8s-client-eth0, namespace: app, labels: {app: client}}
spec:
  {orchestrator: k8s, node: node, pod: client, endpoint: eth0, interfaceName: calicli,
   ipNetworks: [10.65.0.3/32], profiles: [open]}
"""
)
POLICY = """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: app}
spec:
  selector: app == "server"
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == "client"}
    destination: {ports: [PORT]}
"""


class Cluster:
    """A demo node (pyfelix.demo) driven by the tests: workloads by address, one agent."""

    def __init__(self, stack: ExitStack, manifests: Path) -> None:
        self.manifests = manifests
        self.demo = DemoNode(stack, tag=f"e2e-{os.getpid()}")
        self.node = self.demo.node
        self.workloads: dict[str, str] = {}
        self.servers = self.demo.processes
        self.agent: subprocess.Popen[str] | None = None
        self._by_address: dict[str, Workload] = {}

    def add_workload(
        self, interface: str, address: str, ports: Sequence[int] = (), mac: str = ""
    ) -> None:
        ports_by_number = dict.fromkeys(ports, "")
        workload = self.demo.add_workload(interface, interface, address, ports_by_number, mac)
        self._by_address[address] = workload
        self.workloads[address] = workload.namespace

    def connects(self, source: str, destination: str, port: int) -> bool:
        return self.demo.connects(self._by_address[source], self._by_address[destination], port)

    def start_agent(self, datastore: str = "", log: Path | None = None) -> None:
        self.agent = self.demo.start_agent(datastore or self.manifests, "node", log)

    def serve(self, namespace: str, code: str, *args: str) -> subprocess.Popen[str]:
        """Run a Python listener in ``namespace``; return once it prints "ready"."""
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.servers.append(server)
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        return server


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        yield cluster


def test_agent_programs_routes_and_policy(cluster: Cluster) -> None:
    """The agent routes to its workloads and enforces policy; edits apply within seconds;
    tampering (a flushed chain, a removed FORWARD jump, a deleted workload route, deleted
    IP set members) is repaired by the next refresh."""
    (cluster.manifests / "policy.yaml").write_text(POLICY.replace("PORT", "http"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    routes = run_in(cluster.node, "ip", "route", "show", "proto", "80").stdout
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
        return "-A cali-tw-calisrv" in text and "-A FORWARD" in text

    assert eventually(repaired, timeout=5)

    run_in(cluster.node, "ip", "route", "del", f"{SERVER_IP}/32")
    sets = run_in(cluster.node, "ipset", "list", "-n").stdout.split()
    cluster_set = next(name for name in sets if name.startswith("cali40s:"))
    before = run_in(cluster.node, "ipset", "save", cluster_set).stdout
    for line in before.splitlines():
        if line.startswith("add "):
            run_in(cluster.node, "ipset", "del", cluster_set, line.split()[2])

    def routes_and_sets_repaired() -> bool:
        routes = run_in(cluster.node, "ip", "route", "show", "proto", "80").stdout
        return (
            f"{SERVER_IP} dev calisrv" in routes
            and run_in(cluster.node, "ipset", "save", cluster_set).stdout == before
        )

    assert eventually(routes_and_sets_repaired, timeout=5)
    assert cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    assert cluster.agent is not None
    assert cluster.agent.poll() is None


FETCH = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code)
except OSError as e:
    print("down", e)
"""


def fetch(cluster: Cluster, url: str) -> str:
    return run_in(cluster.node, sys.executable, "-c", FETCH, url).stdout


def metrics(cluster: Cluster) -> dict[str, float]:
    """The agent's Prometheus metrics (felix_*), by name; empty while it does not answer."""
    text = fetch(cluster, "http://127.0.0.1:9091/metrics")
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("felix_")
    }


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
    assert "felix_calc_graph_updates_processed" in values
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


ECHO_SERVER = """
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000)); s.listen(4)
def echo(c):
    while data := c.recv(64):
        c.sendall(data)
print("ready", flush=True)
while True:
    c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
"""
LONG_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 7000), timeout=2)
for line in sys.stdin:
    c.sendall(line.encode()); print(c.recv(64).decode().strip(), flush=True)
"""


def test_restart_keeps_established_connections(cluster: Cluster) -> None:
    """Restarting the agent leaves an established allowed connection working, and new
    connections keep succeeding: nothing is torn down while the new agent starts."""
    cluster.serve(cluster.workloads[SERVER_IP], ECHO_SERVER)
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
    client = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            cluster.workloads[CLIENT_IP],
            sys.executable,
            "-c",
            LONG_CLIENT,
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


IPTC_DUMP = """
import json, iptc
out = {}
for name in ("filter", "raw", "mangle", "nat"):
    table = iptc.Table(name)
    table.refresh()
    for chain in table.chains:
        if chain.name.startswith("cali-"):
            out[name + "/" + chain.name] = [
                m.parameters.get("comment", "") for r in chain.rules for m in r.matches
                if m.name == "comment" and m.parameters.get("comment", "").startswith("cali:")
            ]
print(json.dumps(out))
"""


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
    result = run_in(cluster.node, sys.executable, "-c", IPTC_DUMP)
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


def test_each_area_refreshes_on_its_own_interval(tmp_path: Path) -> None:
    """RouteRefreshInterval repairs a deleted route while, with a long IptablesRefreshInterval,
    a flushed chain stays flushed: each area of the kernel is re-read on its own period."""
    (tmp_path / "base.yaml").write_text(
        MANIFESTS.replace("iptablesRefreshInterval: 1s", "iptablesRefreshInterval: 600s")
    )
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent()
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
        saved = run_in(cluster.node, "iptables-nft-save", "-t", "filter").stdout
        chain = next(
            line.split()[1] for line in saved.splitlines() if line.startswith("-A cali-tw-calisrv")
        )
        run_in(cluster.node, "iptables-nft", "-F", chain)
        run_in(cluster.node, "ip", "route", "del", f"{SERVER_IP}/32")

        def route_back() -> bool:
            routes = run_in(cluster.node, "ip", "route", "show", "proto", "80").stdout
            return f"{SERVER_IP} dev calisrv" in routes

        assert eventually(route_back, timeout=5)
        time.sleep(1.5)
        listed = run_in(cluster.node, "iptables-nft", "-S", chain).stdout.splitlines()
        assert listed == [f"-N {chain}"]


def test_interface_appearing_later_is_routed_at_once(tmp_path: Path) -> None:
    """With a long refresh interval, a workload whose interface appears after the agent has
    started is still routed and reachable within seconds: the netlink monitor triggers it."""
    (tmp_path / "base.yaml").write_text(
        MANIFESTS.replace("RefreshInterval: 1s", "RefreshInterval: 600s")
    )
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent()
        time.sleep(1.5)
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080), timeout=5)


def host_facing_cluster(stack: ExitStack, manifests: Path, *node_ports: str) -> Cluster:
    """A server workload (8080) and a client, and listeners on the node itself on
    ``node_ports``: what the tests of traffic to the host start from."""
    cluster = Cluster(stack, manifests)
    cluster.add_workload("calisrv", SERVER_IP, [8080])
    cluster.add_workload("calicli", CLIENT_IP)
    cluster.serve(cluster.node, SERVER, *node_ports)
    return cluster


@pytest.mark.parametrize(("action", "reachable"), [("Drop", False), ("Accept", True)])
def test_default_endpoint_to_host_action(tmp_path: Path, action: str, reachable: bool) -> None:
    """Traffic from a workload to its own node is governed by DefaultEndpointToHostAction,
    after the workload's egress policy has allowed it."""
    manifests = MANIFESTS.replace(
        "iptablesRefreshInterval: 1s",
        f"iptablesRefreshInterval: 1s\n  defaultEndpointToHostAction: {action}",
    )
    (tmp_path / "base.yaml").write_text(manifests)
    with ExitStack() as stack:
        cluster = host_facing_cluster(stack, tmp_path, "7777")
        cluster.start_agent()
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
        client_ns = cluster.workloads[CLIENT_IP]
        assert connects(client_ns, "192.0.2.1", 7777) is reachable


HOST_ENDPOINT = """
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-uplink, labels: {role: uplink}}
spec: {node: node, interfaceName: eth0, expectedIPs: [192.0.2.1]}
"""


@pytest.mark.parametrize("interface", ["interfaceName: eth0, ", "interfaceName: '*', ", ""])
def test_host_endpoint_with_failsafe_ports(tmp_path: Path, interface: str) -> None:
    """A host endpoint with no policy and no profile, for eth0, for all interfaces ("*") or
    for the interface holding its expected address, drops traffic into the node, except on
    the failsafe ports (tcp/22 by default)."""
    host_endpoint = HOST_ENDPOINT.replace("interfaceName: eth0, ", interface)
    (tmp_path / "base.yaml").write_text(MANIFESTS + host_endpoint)
    with ExitStack() as stack:
        cluster = host_facing_cluster(stack, tmp_path, "22", "7777")
        outside = cluster.demo.outside
        assert connects(outside, "192.0.2.1", 7777)
        cluster.start_agent()
        assert eventually(lambda: not connects(outside, "192.0.2.1", 7777))
        assert connects(outside, "192.0.2.1", 22)


OUTSIDER_IP = "10.65.0.4"
SEMANTICS = (
    OPEN_PROFILE
    + """---
apiVersion: v1
kind: Namespace
metadata: {name: app, labels: {team: blue}}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: servers, labels: {role: servers}}
spec: {nets: [10.65.0.2/32]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: blue-to-server}
spec:
  selector: app == "server"
  ingress:
  - {action: Allow, protocol: TCP, source: {namespaceSelector: team == "blue"},
     destination: {ports: [8080, 9090]}}
"""
)


def workload(pod: str, namespace: str, app: str, interface: str, address: str) -> str:
    """A WorkloadEndpoint on node "node", open profile first, then its namespace's."""
    return f"""
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {{name: node-k8s-{pod}-eth0, namespace: {namespace}, labels: {{app: {app}}}}}
spec:
  {{orchestrator: k8s, node: node, pod: {pod}, endpoint: eth0, interfaceName: {interface},
   ipNetworks: [{address}/32], profiles: [open, kns.{namespace}]}}
"""


OTHER_NAMESPACE = """
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: TEAM}}
"""
EGRESS = """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: no-9090-to-servers, namespace: app}
spec:
  selector: app == "client"
  types: [Egress]
  egress:
  - action: Deny
    protocol: TCP
    # A namespaced policy's selectors stay in its namespace unless told otherwise.
    destination: {namespaceSelector: global(), selector: role == "servers", ports: [9090]}
  - {action: Allow}
"""


def server_client_outsider(stack: ExitStack, manifests: Path) -> Cluster:
    """The server (8080, 9090), client and outsider workloads, and the agent running."""
    cluster = Cluster(stack, manifests)
    cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
    cluster.add_workload("calicli", CLIENT_IP)
    cluster.add_workload("calioth", OUTSIDER_IP)
    cluster.start_agent()
    return cluster


def seconds_until(check: Callable[[], bool], timeout: float = 5.0) -> float:
    """Seconds from now to the start of the first passing ``check``."""
    started = time.monotonic()
    while True:
        attempt = time.monotonic()
        if check():
            return attempt - started
        assert attempt - started < timeout, "never happened"
        time.sleep(0.02)


def test_policy_semantics_and_live_edits(tmp_path: Path) -> None:
    """Through the running agent: a global ingress policy on namespace labels, a namespaced
    egress policy on a network set; each edit (policy deleted or re-added, a workload's or
    a namespace's labels changed) takes effect within a second."""
    config = MANIFESTS.partition("---")[0]
    server = workload("server", "app", "server", "calisrv", SERVER_IP)
    outsider = workload("outsider", "other", "client", "calioth", OUTSIDER_IP)
    (tmp_path / "base.yaml").write_text("---".join((config, SEMANTICS, server, outsider)))
    (tmp_path / "client.yaml").write_text(workload("client", "app", "client", "calicli", CLIENT_IP))
    (tmp_path / "other.yaml").write_text(OTHER_NAMESPACE.replace("TEAM", "red"))
    (tmp_path / "egress.yaml").write_text(EGRESS)
    with ExitStack() as stack:
        cluster = server_client_outsider(stack, tmp_path)

        def client(port: int) -> Callable[[], bool]:
            return lambda: cluster.connects(CLIENT_IP, SERVER_IP, port)

        def client_denied(port: int) -> Callable[[], bool]:
            return lambda: not cluster.connects(CLIENT_IP, SERVER_IP, port)

        assert eventually(client(8080)), "never programmed"
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090), "egress deny via network set"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 8080), "namespace not blue"

        def pings(source: str, destination: str) -> bool:
            namespace = cluster.workloads[source]
            return run_in(namespace, "ping", "-c1", "-W1", destination).returncode == 0

        assert not pings(CLIENT_IP, SERVER_IP), "the server's policy admits TCP only"
        # With no types and no egress rules, the policy governs ingress only (as calicoctl
        # defaults it), so the server's egress falls to its open profile.
        assert pings(SERVER_IP, CLIENT_IP)

        (tmp_path / "egress.yaml").unlink()
        assert seconds_until(client(9090)) < 1.0, "deleting the policy restores access"

        (tmp_path / "egress.yaml").write_text(EGRESS)
        assert seconds_until(client_denied(9090)) < 1.0, "re-adding the policy denies again"

        (tmp_path / "client.yaml").write_text(
            workload("client", "app", "batch", "calicli", CLIENT_IP)
        )
        assert seconds_until(client(9090)) < 1.0, "the policy no longer selects the client"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)

        (tmp_path / "other.yaml").write_text(OTHER_NAMESPACE.replace("TEAM", "blue"))
        assert seconds_until(lambda: cluster.connects(OUTSIDER_IP, SERVER_IP, 8080)) < 1.0
        assert cluster.agent is not None
        assert cluster.agent.poll() is None


def test_etcd_datastore_lost_and_back(tmp_path: Path) -> None:
    """With etcd as the datastore (inside the node namespace, written with ``pyfelix
    datastore apply``): while etcd is down the kernel stays as it was and the agent keeps
    running; when etcd returns, a policy edit made meanwhile takes effect."""
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path / "unused")
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=cluster.node)
        etcd.start()
        stack.callback(etcd.stop)

        def apply(path: Path) -> None:
            run_in(
                cluster.node,
                sys.executable,
                "-m",
                "pyfelix",
                "datastore",
                "--datastore",
                etcd.etcd_url,
                "apply",
                "-f",
                str(path),
            )

        apply(tmp_path / "base.yaml")
        apply(tmp_path / "policy.yaml")
        cluster.start_agent(etcd.etcd_url)
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)

        etcd.stop()
        time.sleep(3)  # three refresh intervals without a datastore
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
        assert cluster.agent is not None
        assert cluster.agent.poll() is None

        etcd.start()
        (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "9090"))
        apply(tmp_path / "policy.yaml")
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=20)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert cluster.agent.poll() is None


def test_endpoint_status_reported_to_etcd(tmp_path: Path) -> None:
    """With EndpointReportingEnabled, workload and host endpoint status land in etcd under
    /calico/felix/v2/: up, down when the interface goes down, error when a host endpoint's
    interface does not exist or another endpoint governs it, and the key goes when the
    endpoint does."""
    interval = "  reportingInterval: 1s\n"
    manifests = MANIFESTS.replace(interval, interval + "  endpointReportingEnabled: true\n")
    missing = HOST_ENDPOINT.replace("node-uplink", "node-spare").replace("eth0", "eth9")
    # Matches eth0 by address, but node-uplink names eth0 and comes first by name.
    by_address = HOST_ENDPOINT.replace("node-uplink", "z-by-address")
    by_address = by_address.replace("interfaceName: eth0, ", "")
    (tmp_path / "base.yaml").write_text(manifests + HOST_ENDPOINT + by_address)
    (tmp_path / "spare.yaml").write_text(missing)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path / "unused")
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        cluster.add_workload("calicli", CLIENT_IP)
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=cluster.node)
        etcd.start()
        stack.callback(etcd.stop)

        def datastore(*args: str) -> None:
            pyfelix = (sys.executable, "-m", "pyfelix", "datastore")
            run_in(cluster.node, *pyfelix, "--datastore", etcd.etcd_url, *args)

        def statuses() -> dict[str, str]:
            """Status per endpoint: host endpoints by name, workloads by pod."""
            endpoints = etcd.etcd_url.replace("etcd://", "--endpoints=http://")
            prefix = status_prefix("node") + "/"
            lines = run_in(cluster.node, "etcdctl", endpoints, "get", "--prefix", prefix)
            out = lines.stdout.splitlines()
            found = {}
            for key, value in zip(out[0::2], out[1::2], strict=True):
                if "/workload/" in key:
                    name = "server" if "server" in key else "client"
                elif "/endpoint/" in key:
                    name = key.rsplit("/", 1)[-1]
                else:
                    continue
                found[name] = json.loads(value)["status"]
            return found

        datastore("apply", "-f", str(tmp_path / "base.yaml"))
        datastore("apply", "-f", str(tmp_path / "spare.yaml"))
        cluster.start_agent(etcd.etcd_url)
        expected = {"node-uplink": "up", "node-spare": "error", "server": "up", "client": "up"}
        expected["z-by-address"] = "error"
        assert eventually(lambda: statuses() == expected, timeout=20), statuses()

        def process_status() -> dict[str, object]:
            endpoints = etcd.etcd_url.replace("etcd://", "--endpoints=http://")
            key = status_prefix("node") + "/status"
            out = run_in(cluster.node, "etcdctl", endpoints, "get", "--print-value-only", key)
            return dict(json.loads(out.stdout)) if out.stdout.strip() else {}

        # Process status too, every ReportingInterval (1 s here): the uptime moves on.
        first = process_status()
        assert first
        assert eventually(lambda: process_status().get("uptime") != first["uptime"], timeout=5)

        run_in(cluster.node, "ip", "link", "set", "eth0", "down")
        assert eventually(lambda: statuses().get("node-uplink") == "down"), statuses()
        run_in(cluster.node, "ip", "link", "set", "eth0", "up")
        assert eventually(lambda: statuses().get("node-uplink") == "up"), statuses()

        datastore("delete", "-f", str(tmp_path / "spare.yaml"))
        assert eventually(lambda: "node-spare" not in statuses()), statuses()
        assert statuses()["server"] == "up"

        # With node-uplink gone, the endpoint expecting eth0's address governs eth0.
        (tmp_path / "uplink.yaml").write_text(HOST_ENDPOINT)
        datastore("delete", "-f", str(tmp_path / "uplink.yaml"))
        assert eventually(lambda: statuses().get("z-by-address") == "up"), statuses()
        assert "node-uplink" not in statuses()


TIERS = (
    """
apiVersion: v1
kind: Namespace
metadata: {name: app}
---"""
    + OPEN_PROFILE
    + """---
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.gate}
spec:
  tier: security
  order: 1
  selector: app == "server"
  types: [Ingress]
  ingress:
  - {action: Pass, protocol: TCP, source: {selector: app == "client"}, destination: {ports: [8080]}}
  - action: Allow
    protocol: TCP
    source: {selector: app == "client"}
    destination: {ports: [9090]}
"""
)
DEFAULT_TIER = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web}
spec:
  order: 10
  selector: app == "server"
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, source: {selector: app == "FROM"}, destination: {ports: [8080]}}
"""


def test_tiers_pass_and_end_of_tier_drop(tmp_path: Path) -> None:
    """Through the running agent: Pass hands a flow to the next tier, which decides it; a flow
    no rule of a tier matches is dropped at the tier's end, though the profile would allow it."""
    config = MANIFESTS.partition("---")[0]
    server = workload("server", "app", "server", "calisrv", SERVER_IP)
    client = workload("client", "app", "client", "calicli", CLIENT_IP)
    outsider = workload("outsider", "app", "outsider", "calioth", OUTSIDER_IP)
    (tmp_path / "base.yaml").write_text("---".join((config, TIERS, server, client, outsider)))
    (tmp_path / "web.yaml").write_text(DEFAULT_TIER.replace("FROM", "client"))
    with ExitStack() as stack:
        cluster = server_client_outsider(stack, tmp_path)

        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "Pass, then Allow"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 9090), "allowed in the first tier"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 8080), "end of the security tier"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 9090)

        # The default tier now admits nobody: the passed flow meets its end-of-tier drop.
        (tmp_path / "web.yaml").write_text(DEFAULT_TIER.replace("FROM", "nobody"))
        assert seconds_until(lambda: not cluster.connects(CLIENT_IP, SERVER_IP, 8080)) < 1.0
        assert cluster.connects(CLIENT_IP, SERVER_IP, 9090)


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


def test_workload_interface_settings_and_cleanup(tmp_path: Path) -> None:
    """As Felix: proxy ARP and forwarding on a workload's interface and its MAC pinned in the
    node's ARP table; deleting the endpoint removes its route and its chains."""
    mac = "02:00:0a:41:00:02"
    pinned = MANIFESTS.replace("interfaceName: calisrv,", f"interfaceName: calisrv, mac: '{mac}',")
    base, client = pinned.rsplit("---", 1)
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "client.yaml").write_text(client)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080], mac=mac)
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent(log=tmp_path / "agent.log")
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        node = cluster.node
        neighbours = run_in(node, "ip", "neigh", "show", "dev", "calisrv").stdout
        assert f"{SERVER_IP} lladdr {mac} PERMANENT" in neighbours
        for setting in ("proxy_arp", "forwarding"):
            value = run_in(node, "cat", f"/proc/sys/net/ipv4/conf/calisrv/{setting}").stdout
            assert value.strip() == "1", setting

        (tmp_path / "client.yaml").unlink()

        def client_gone() -> bool:
            routes = run_in(node, "ip", "route", "show", "proto", "80").stdout
            saved = run_in(node, "iptables-nft-save", "-t", "filter").stdout
            return f"{CLIENT_IP} dev calicli" not in routes and ":cali-tw-calicli" not in saved

        assert eventually(client_gone, timeout=5)
        assert "cannot remove" not in (tmp_path / "agent.log").read_text()
        assert f"{SERVER_IP} dev calisrv" in run_in(node, "ip", "route").stdout


@pytest.mark.parametrize(("mode", "port_9090"), [("Insert", False), ("Append", True)])
def test_chain_insert_mode(cluster: Cluster, tmp_path: Path, mode: str, port_9090: bool) -> None:
    """ChainInsertMode: Felix's jump goes before the node's own FORWARD rules (Insert, the
    default) or after them (Append), where a rule of the node's accepts before policy runs."""
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
    assert hook == (len(rules) - 1 if mode == "Append" else 0)
    assert cluster.connects(CLIENT_IP, SERVER_IP, 9090) == port_9090


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


SERVER_IP6, CLIENT_IP6 = "fd00:65::2", "fd00:65::3"


def test_dual_stack_workloads(tmp_path: Path) -> None:
    """Workloads with IPv4 and IPv6 addresses: routed and policed in both families (the
    policy's source selector becomes an IPv4 and an IPv6 set), each pod reaching the node as
    Calico wires IPv6 pods (default route via the host interface's link-local address)."""
    dual = MANIFESTS.replace("[10.65.0.2/32]", f"[10.65.0.2/32, '{SERVER_IP6}/128']")
    dual = dual.replace("[10.65.0.3/32]", f"[10.65.0.3/32, '{CLIENT_IP6}/128']")
    (tmp_path / "base.yaml").write_text(dual)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        node = cluster.node
        run_in(node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        run_in(node, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        for interface, address in (("calisrv", SERVER_IP6), ("calicli", CLIENT_IP6)):
            pod = cluster.workloads[SERVER_IP if interface == "calisrv" else CLIENT_IP]
            shown = run_in(node, "ip", "-6", "addr", "show", "dev", interface, "scope", "link")
            gateway = shown.stdout.split("inet6 ")[1].split("/")[0]
            run_in(pod, "ip", "-6", "addr", "add", f"{address}/128", "dev", "eth0", "nodad")
            route = ("default", "via", gateway, "dev", "eth0")
            assert run_in(pod, "ip", "-6", "route", "add", *route).returncode == 0
        cluster.start_agent()

        def client6(port: int) -> bool:
            return connects(cluster.workloads[CLIENT_IP], SERVER_IP6, port)

        assert eventually(lambda: client6(8080)), run_in(node, "ip", "-6", "route").stdout
        assert not client6(9090), "IPv6 policy enforced"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
        routes = run_in(node, "ip", "-6", "route", "show", "proto", "80").stdout
        assert f"{SERVER_IP6} dev calisrv" in routes
        ndp = run_in(node, "cat", "/proc/sys/net/ipv6/conf/calisrv/proxy_ndp").stdout
        assert ndp.strip() == "1"


POOL = """
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 10.65.0.0/16, natOutgoing: NAT}
"""


@pytest.mark.parametrize("nat", [True, False])
def test_nat_outgoing(cluster: Cluster, nat: bool) -> None:
    """A pool with natOutgoing: pods reach a network that has no route back to the pool,
    their traffic masqueraded to the node's address; without it, they cannot."""
    (cluster.manifests / "pool.yaml").write_text(POOL.replace("NAT", str(nat).lower()))
    outside = cluster.demo.outside
    cluster.serve(outside, SERVER, "7777")
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"

    def reaches_outside() -> bool:
        pod = cluster.workloads[CLIENT_IP]
        return connects(pod, "192.0.2.2", 7777)

    if nat:
        assert eventually(reaches_outside)
    else:
        time.sleep(1)
        assert not reaches_outside()


SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec: {type: ClusterIP, clusterIP: 10.96.0.10, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  namespace: app
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.65.0.2]
  conditions: {ready: true}
ports:
- {name: http, protocol: TCP, port: PORT}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: client-to-web, namespace: app}
spec:
  selector: app == "client"
  types: [Egress]
  egress:
  - action: Allow
    protocol: TCP
    destination:
      services: {name: web, namespace: app}
"""


def test_egress_to_a_service(cluster: Cluster) -> None:
    """A rule naming a Kubernetes service matches its endpoints' addresses and ports (from
    EndpointSlices); when the slice's port changes, so does what the rule allows."""
    (cluster.manifests / "service.yaml").write_text(SERVICE.replace("PORT", "8080"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)

    (cluster.manifests / "service.yaml").write_text(SERVICE.replace("PORT", "9090"))
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=5)
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)


FORWARD_POLICY = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: uplink-forward}
spec:
  selector: role == "uplink"
  applyOnForward: true
  types: [Ingress]
  ingress:
  - {action: Deny, protocol: TCP, destination: {ports: [9090]}}
  - {action: Allow}
"""


@pytest.mark.parametrize("pre_dnat", [False, True])
def test_host_endpoint_policy_on_forwarded_traffic(tmp_path: Path, pre_dnat: bool) -> None:
    """An applyOnForward policy (normal, or pre-DNAT in the mangle table) on the uplink's host
    endpoint polices traffic the node forwards from outside to its pods, not only traffic to
    the node itself."""
    policy = FORWARD_POLICY.replace(
        "applyOnForward: true", f"applyOnForward: true\n  preDNAT: {pre_dnat}"
    )
    (tmp_path / "base.yaml").write_text(MANIFESTS + HOST_ENDPOINT + "---" + policy)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        outside = cluster.demo.outside
        run_in(outside, "ip", "route", "add", "10.65.0.0/16", "via", "192.0.2.1")
        cluster.start_agent()

        def from_outside(port: int) -> bool:
            return connects(outside, SERVER_IP, port)

        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        assert eventually(lambda: from_outside(8080))
        assert not from_outside(9090), "denied by the uplink's forward policy"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 9090), "pod to pod is not forwarded via eth0"


UNTRACKED = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: untracked-7777}
spec:
  selector: role == "uplink"
  doNotTrack: true
  applyOnForward: true
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [7777]}}]
  egress: [{action: Allow, protocol: TCP, source: {ports: [7777]}}]
"""


def test_untracked_host_endpoint_policy(tmp_path: Path) -> None:
    """A doNotTrack policy on the uplink admits a service the host endpoint otherwise drops,
    in both directions, without connection tracking (its rules live in the raw table)."""
    (tmp_path / "base.yaml").write_text(MANIFESTS + HOST_ENDPOINT + "---" + UNTRACKED)
    with ExitStack() as stack:
        cluster = host_facing_cluster(stack, tmp_path, "7777", "7778")
        outside = cluster.demo.outside
        cluster.start_agent()
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        assert eventually(lambda: not connects(outside, "192.0.2.1", 7778)), "the HEP drops"
        assert connects(outside, "192.0.2.1", 7777)
        raw = run_in(cluster.node, "iptables-nft-save", "-t", "raw").stdout
        assert "NOTRACK" in raw or "CT --notrack" in raw
