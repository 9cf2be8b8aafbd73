"""``pyfelix demo``: the agent for real, on a node made of network namespaces.

Builds a "node" namespace (with an uplink and a default route, like a real host) and one
namespace per workload endpoint in the manifests, wired as Calico's CNI plugin wires pods (a
veth pair named as the endpoint says, the workload's address, a link-local gateway), starts
``pyfelix run`` inside the node namespace, waits until it has programmed the kernel, then tries
every workload against every other on each of its ports over real TCP and prints the matrix,
with the policy that explains each verdict. Everything is torn down afterwards; the host's own
namespace is never touched. Every workload is treated as local to the demo node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TextIO

import attrs
import yaml

from pyfelix.dryrun import compute
from pyfelix.explain import Explainer, Flow
from pyfelix.pods import connects, run_in, start_responder, wire_pod
from pyfelix.resources import Pod, Resource, WorkloadEndpoint
from pyfelix.resources.k8s_conversion import workload_endpoint

DEMO_NODE = "demo-node"
PREFIX = "pfd-"
#: How long the demo waits for the agent to program the node, unless told (``--timeout``).
READY_TIMEOUT = 20.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _in(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_in(ns, *argv)


@contextmanager
def namespace(name: str) -> Iterator[str]:
    _ip("netns", "add", name)
    try:
        _in(name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@attrs.define
class Workload:
    name: str
    namespace: str
    interface: str
    address: str
    ports: dict[int, str]


@attrs.define(eq=False)
class DemoNode:
    """A node namespace with an uplink, and workloads behind veth pairs."""

    stack: ExitStack
    tag: str = attrs.field(factory=lambda: str(os.getpid()))
    node: str = ""
    outside: str = ""
    workloads: list[Workload] = attrs.Factory(list)
    processes: list[subprocess.Popen[str]] = attrs.Factory(list)
    #: The node's EndpointStatusPathPrefix: its agent's endpoint status files go here, never
    #: to this machine's /var/run/calico (a real CNI plugin may read that).
    status_prefix: Path = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.status_prefix = Path(self.stack.enter_context(tempfile.TemporaryDirectory()))
        self.node = self.stack.enter_context(namespace(f"{PREFIX}node-{self.tag}"))
        outside = self.stack.enter_context(namespace(f"{PREFIX}up-{self.tag}"))
        _in(self.node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _ip(
            "link",
            "add",
            "eth0",
            "netns",
            self.node,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            outside,
        )
        _in(self.node, "ip", "addr", "add", "192.0.2.1/24", "dev", "eth0")
        _in(self.node, "ip", "link", "set", "eth0", "up")
        _in(self.node, "ip", "route", "add", "default", "via", "192.0.2.2")
        # The far end of the uplink stands for "the rest of the network".
        self.outside = outside
        _in(outside, "ip", "addr", "add", "192.0.2.2/24", "dev", "eth0")
        _in(outside, "ip", "link", "set", "eth0", "up")
        self.stack.callback(self._stop_processes)

    def add_workload(
        self, name: str, interface: str, address: str, ports: dict[int, str], mac: str = ""
    ) -> Workload:
        ns = self.stack.enter_context(namespace(f"{PREFIX}{len(self.workloads)}-{self.tag}"))
        wire_pod(self.node, ns, interface, address, mac)
        workload = Workload(name, ns, interface, address, ports)
        self.workloads.append(workload)
        if ports:
            self.processes.append(start_responder(ns, list(ports)))
        return workload

    def start_agent(
        self, datastore: Path | str, hostname: str, log: Path | None = None
    ) -> subprocess.Popen[str]:
        """``pyfelix run`` in the node namespace; its log goes to ``log`` if given."""
        stderr = self.stack.enter_context(log.open("w")) if log else subprocess.DEVNULL
        agent = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.node,
                sys.executable,
                "-m",
                "pyfelix",
                "run",
                "--hostname",
                hostname,
                "--datastore",
                str(datastore),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "FELIX_ENDPOINTSTATUSPATHPREFIX": str(self.status_prefix),
            },
        )
        self.processes.append(agent)
        return agent

    def programmed(self) -> bool:
        routes = _in(self.node, "ip", "route", "show").stdout
        return all(f"{w.address} dev {w.interface}" in routes for w in self.workloads)

    def connects(self, source: Workload, destination: Workload, port: int) -> bool:
        return connects(source.namespace, destination.address, port)

    def _stop_processes(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _localise(resources: Sequence[Resource], hostname: str) -> list[Resource]:
    """Every workload (a WorkloadEndpoint, or a Pod as kubectl prints it) on the demo node."""
    local: list[Resource] = []
    for resource in resources:
        if isinstance(resource, WorkloadEndpoint):
            spec = attrs.evolve(resource.spec, node=hostname)
            local.append(attrs.evolve(resource, spec=spec))
        elif isinstance(resource, Pod) and resource.spec.node_name:
            pod_spec = attrs.evolve(resource.spec, node_name=hostname)
            local.append(attrs.evolve(resource, spec=pod_spec))
        else:
            local.append(resource)
    return local


def _endpoints(resources: Sequence[Resource]) -> list[WorkloadEndpoint]:
    """The workloads to wire: the endpoints, and what Calico makes of the pods."""
    endpoints = []
    for r in resources:
        wep = workload_endpoint(r) if isinstance(r, Pod) else r
        if isinstance(wep, WorkloadEndpoint) and wep.spec.ip_networks:
            endpoints.append(wep)
    return endpoints


def run_demo(
    resources: Sequence[Resource],
    out: TextIO = sys.stdout,
    ready_timeout: float = READY_TIMEOUT,
) -> int:
    """Build the node, run the agent, print the connectivity matrix; 0 if all as explained.

    ``ready_timeout`` bounds the wait for the agent to program the node (a slow machine, or a
    VM under emulation, needs longer than the default)."""
    local = _localise(resources, DEMO_NODE)

    def print_(text: str) -> None:
        print(text, file=out, flush=True)

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="pyfelix-demo-") as tmp:
        manifests = Path(tmp)
        (manifests / "cluster.yaml").write_text(
            yaml.safe_dump_all([r.to_manifest() for r in local], sort_keys=False)
        )
        node = DemoNode(stack)
        endpoints = _endpoints(local)
        for wep in endpoints:
            ports = {p.port: p.name for p in wep.spec.ports} or {8080: ""}
            address = wep.spec.ip_networks[0].split("/")[0]
            node.add_workload(
                wep.spec.pod or wep.name, wep.spec.interface_name, address, ports, wep.spec.mac
            )
        agent = node.start_agent(manifests, DEMO_NODE)
        print_(f"node {node.node}: {len(endpoints)} workloads, agent pid {agent.pid}")
        deadline = time.monotonic() + ready_timeout
        while not node.programmed() and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.2)
        if not node.programmed():
            state = "exited" if agent.poll() is not None else "still running"
            print_(
                f"the agent did not program the node within {ready_timeout:g} s ({state});"
                " --timeout waits longer"
            )
            return 1
        time.sleep(0.5)
        view, dataplane = compute(local, DEMO_NODE)
        del view
        explainer = Explainer(dataplane)
        mismatches = 0
        print_(f"{'from':<14} {'to':<14} {'port':<18} {'result':<8} why")
        for source in node.workloads:
            for destination in node.workloads:
                if source is destination:
                    continue
                for port, name in sorted(destination.ports.items()):
                    seen = node.connects(source, destination, port)
                    verdict = explainer.explain(
                        Flow(source.address, destination.address, "tcp", port)
                    )
                    flag = "" if seen == verdict.allowed else "  (!! differs from the explanation)"
                    mismatches += seen != verdict.allowed
                    label = f"tcp/{port}" + (f" ({name})" if name else "")
                    result = "allowed" if seen else "denied"
                    columns = f"{source.name:<14} {destination.name:<14} {label:<18} {result:<8}"
                    print_(f"{columns} {verdict.reason}{flag}")
        return 1 if mismatches else 0
