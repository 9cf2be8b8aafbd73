"""A Calico-style node in network namespaces: a host namespace and workload namespaces joined
by veth pairs (``cali...`` on the host side, ``eth0`` inside), routed as Calico routes them
(a /32 per workload, a link-local gateway), plus tiny TCP servers and clients to probe what
the rules let through."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import attrs

from pyfelix.demo import CLIENT, GATEWAY, SERVER
from tests.netns import run_in, temporary_netns


def ip(ns: str, *args: str) -> None:
    result = run_in(ns, "ip", *args)
    assert result.returncode == 0, f"ip {' '.join(args)}: {result.stderr}"


@attrs.define
class Node:
    host: str
    stack: ExitStack
    workloads: dict[str, str] = attrs.Factory(dict)
    servers: list[subprocess.Popen[str]] = attrs.Factory(list)

    def add_workload(self, interface: str, address: str) -> str:
        """A workload namespace behind host interface ``interface`` with ``address``/32."""
        ns = self.stack.enter_context(temporary_netns("wl"))
        subprocess.run(
            [
                "ip",
                "link",
                "add",
                interface,
                "netns",
                self.host,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            ],
            check=True,
        )
        ip(ns, "addr", "add", f"{address}/32", "dev", "eth0")
        ip(ns, "link", "set", "eth0", "up")
        ip(ns, "route", "add", GATEWAY, "dev", "eth0", "scope", "link")
        ip(ns, "route", "add", "default", "via", GATEWAY, "dev", "eth0")
        # Calico answers the workload's ARP for its fake gateway with proxy ARP; a namespace
        # without a default route cannot, so the host side simply owns the gateway address.
        ip(self.host, "addr", "add", f"{GATEWAY}/32", "dev", interface)
        ip(self.host, "link", "set", interface, "up")
        ip(self.host, "route", "add", f"{address}/32", "dev", interface)
        self.workloads[address] = ns
        return ns

    def serve(self, address: str, ports: Sequence[int]) -> None:
        process = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.workloads[address],
                sys.executable,
                "-c",
                SERVER,
                *map(str, ports),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        self.servers.append(process)

    def connects(self, source: str, destination: str, port: int, timeout: float = 1.0) -> bool:
        result = run_in(
            self.workloads[source],
            sys.executable,
            "-c",
            CLIENT,
            destination,
            str(port),
            str(timeout),
        )
        return result.stdout.strip() == "ok"

    def pings(self, source: str, destination: str) -> bool:
        result = run_in(self.workloads[source], "ping", "-c", "1", "-W", "1", destination)
        return result.returncode == 0

    def load(self, ipset_script: str, tables: dict[str, str], backend: str = "legacy") -> None:
        """Replace the host's rules with the rendered scripts (ipsets first)."""
        run_in(self.host, f"iptables-{backend}", "-F")
        for table in ("filter", "nat", "mangle", "raw"):
            run_in(self.host, f"iptables-{backend}", "-t", table, "-F")
            run_in(self.host, f"iptables-{backend}", "-t", table, "-X")
        run_in(self.host, "ipset", "destroy")
        result = run_in(self.host, "ipset", "restore", input_text=ipset_script)
        assert result.returncode == 0, result.stderr
        for table, text in tables.items():
            result = run_in(self.host, f"iptables-{backend}-restore", input_text=text)
            assert result.returncode == 0, f"{table}: {result.stderr}"


@contextmanager
def calico_node() -> Iterator[Node]:
    with ExitStack() as stack:
        host = stack.enter_context(temporary_netns("host"))
        run_in(host, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        node = Node(host, stack)
        try:
            yield node
        finally:
            for server in node.servers:
                server.kill()
                server.wait()
            time.sleep(0)
