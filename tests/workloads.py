"""The demo's namespace node (pyfelix.demo.DemoNode), wired by hand instead of by the agent:
tests that load rendered rules themselves add the workload routes and proxy ARP that the Linux
driver would, then probe what the rules let through with real TCP and ICMP."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import attrs

from pyfelix.demo import DemoNode, Workload
from tests.netns import run_in

#: The allow-all profile that test workloads start from (policies then restrict them).
OPEN_PROFILE = """
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: open}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
"""


def ip(ns: str, *args: str) -> None:
    result = run_in(ns, "ip", *args)
    assert result.returncode == 0, f"ip {' '.join(args)}: {result.stderr}"


@attrs.define
class Node:
    demo: DemoNode
    workloads: dict[str, Workload] = attrs.Factory(dict)

    @property
    def host(self) -> str:
        return self.demo.node

    def add_workload(self, interface: str, address: str, ports: Sequence[int] = ()) -> None:
        """A workload behind ``interface``, routed as Felix routes it (a /32, proxy ARP)."""
        workload = self.demo.add_workload(interface, interface, address, dict.fromkeys(ports, ""))
        ip(self.host, "route", "add", f"{address}/32", "dev", interface)
        run_in(self.host, "sysctl", "-qw", f"net.ipv4.conf.{interface}.proxy_arp=1")
        run_in(self.host, "sysctl", "-qw", f"net.ipv4.neigh.{interface}.proxy_delay=0")
        self.workloads[address] = workload

    def connects(self, source: str, destination: str, port: int) -> bool:
        return self.demo.connects(self.workloads[source], self.workloads[destination], port)

    def pings(self, source: str, destination: str) -> bool:
        namespace = self.workloads[source].namespace
        return run_in(namespace, "ping", "-c", "1", "-W", "1", destination).returncode == 0

    def load(self, ipset_script: str, tables: dict[str, str], backend: str = "legacy") -> None:
        """Replace the host's rules with the rendered scripts (ipsets first)."""
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
        yield Node(DemoNode(stack, tag=f"pk-{os.getpid()}"))
