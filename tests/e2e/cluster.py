"""What the end-to-end tests share: a node namespace with workloads (pyfelix.demo), the
agent, the manifests (tests/e2e/manifests) and the small programs run in namespaces
(tests/e2e/programs)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from pyfelix.demo import DemoNode, Workload
from pyfelix.pods import SERVER
from tests.netns import run_in
from tests.workloads import OPEN_PROFILE

HERE = Path(__file__).parent
#: The logs of the agents the running test started: tests/e2e/conftest.py shows their ends
#: when it fails.
AGENT_LOGS: list[Path] = []
_AGENTS = itertools.count()


def manifest(name: str) -> str:
    return (HERE / "manifests" / name).read_text()


def program(name: str) -> str:
    """The path of a program under tests/e2e/programs (run with sys.executable)."""
    return str(HERE / "programs" / name)


SERVER_IP, CLIENT_IP = "10.65.0.2", "10.65.0.3"


MANIFESTS = manifest("base-config.yaml") + OPEN_PROFILE + manifest("base-workloads.yaml")


POLICY = manifest("policy.yaml")


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
        """``pyfelix run`` on the node; its log in ``log``, by default beside the manifests
        (not among them: each line would wake the file syncer), shown if the test fails."""
        if log is None:
            log = self.manifests.parent / f"{self.manifests.name}-agent-{next(_AGENTS)}.log"
        AGENT_LOGS.append(log)
        self.agent = self.demo.start_agent(datastore or self.manifests, "node", log)

    def serve(self, namespace: str, code: str, *args: str) -> subprocess.Popen[str]:
        """Run a Python listener in ``namespace`` (its code, or a program's path ending in
        .py); return once it prints "ready"."""
        source = [code] if code.endswith(".py") else ["-c", code]
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, *source, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.servers.append(server)
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        return server


def filter_rules(node: str, mode: str) -> dict[str, list[str]]:
    """Each chain of the filter table as the kernel lists it (iptables-save's rules; in the
    nftables mode nft's, the chains named without their ``filter-`` prefix)."""
    chains: dict[str, list[str]] = {}
    if mode != "nftables":
        for line in run_in(node, "iptables-nft-save", "-t", "filter").stdout.splitlines():
            if line.startswith("-A "):
                chains.setdefault(line.split()[1], []).append(line)
        return chains
    current = ""
    for line in run_in(node, "nft", "list", "table", "ip", "calico").stdout.splitlines():
        text = line.strip()
        if text.startswith("chain filter-"):
            current = text.split()[1].removeprefix("filter-")
            chains[current] = []
        elif text == "}" or text.startswith("chain "):
            current = ""
        elif current and not text.startswith("type "):
            chains[current].append(text)
    return chains


def fetch(cluster: Cluster, url: str) -> str:
    return run_in(cluster.node, sys.executable, program("fetch.py"), url).stdout


def metrics(cluster: Cluster) -> dict[str, float]:
    """The agent's Prometheus metrics (felix_*), by name; empty while it does not answer."""
    text = fetch(cluster, "http://127.0.0.1:9091/metrics")
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("felix_")
    }


def host_facing_cluster(stack: ExitStack, manifests: Path, *node_ports: str) -> Cluster:
    """A server workload (8080) and a client, and listeners on the node itself on
    ``node_ports``: what the tests of traffic to the host start from."""
    cluster = Cluster(stack, manifests)
    cluster.add_workload("calisrv", SERVER_IP, [8080])
    cluster.add_workload("calicli", CLIENT_IP)
    cluster.serve(cluster.node, SERVER, *node_ports)
    return cluster


HOST_ENDPOINT = manifest("host-endpoint.yaml")


OUTSIDER_IP = "10.65.0.4"


SEMANTICS = OPEN_PROFILE + manifest("semantics.yaml")


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


OTHER_NAMESPACE = manifest("other-namespace.yaml")


EGRESS = manifest("egress.yaml")


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


TIERS = manifest("tiers-namespace.yaml") + OPEN_PROFILE + manifest("tiers.yaml")


DEFAULT_TIER = manifest("default-tier.yaml")


SERVER_IP6, CLIENT_IP6 = "fd00:65::2", "fd00:65::3"


POOL = manifest("pool.yaml")


SERVICE = manifest("service.yaml")


FORWARD_POLICY = manifest("forward-policy.yaml")


UNTRACKED = manifest("untracked.yaml")
