"""Two simulated nodes for multi-node tests: node namespaces (pyfelix.demo's DemoNode) joined by
an underlay link (10.99.0.1 and 10.99.0.2 on ``ul0``, and fd99::1 and fd99::2 for IPv6), each
with one pod wired by `pyfelix pods up` from the shared manifest directory, and the manifests
for those pods."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from pyfelix.demo import DemoNode
from pyfelix.pods import stop_processes


def node_resource(index: int, spec: str) -> str:
    """Node ``index`` with its underlay address (10.99.0.<index>) and more ``spec`` lines."""
    return f"""
---
apiVersion: projectcalico.org/v3
kind: Node
metadata: {{name: node-{index}}}
spec:
  bgp: {{ipv4Address: 10.99.0.{index}/24}}
  {spec}"""


def ipam_block(index: int) -> str:
    """Node ``index``'s IPAM block, 10.65.<index>.0/26."""
    return f"""
---
apiVersion: projectcalico.org/v3
kind: IPAMBlock
metadata: {{name: 10-65-{index}-0-26}}
spec: {{cidr: 10.65.{index}.0/26, affinity: "host:node-{index}"}}"""


def block_and_pod(index: int, extra: str = "", *, block: bool = True) -> str:
    """Node ``index``'s IPAM block (10.65.<index>.0/26; unless not ``block``) and its pod
    (10.65.<index>.2 on cali<index>, labelled client on node 1 and server on node 2);
    ``extra`` goes into the endpoint's spec."""
    app = "client" if index == 1 else "server"
    return (
        (ipam_block(index) if block else "")
        + f"""
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node--{index}-k8s-pod{index}-eth0
  namespace: app
  labels: {{app: {app}}}
spec:
  {{orchestrator: k8s, node: node-{index}, pod: pod{index}, endpoint: eth0,
   interfaceName: cali{index}, ipNetworks: [10.65.{index}.2/32], profiles: [open]{extra}}}
"""
    )


def ipv6_pool(vxlan_mode: str = "Never") -> str:
    """The pods' IPv6 pool, fd65::/48 in /122 blocks."""
    return f"""
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {{name: pods-v6}}
spec: {{cidr: 'fd65::/48', blockSize: 122, vxlanMode: {vxlan_mode}, natOutgoing: false}}
"""


def with_ipv6(index: int, manifests: str, *, ipv4: bool = True) -> str:
    """Node ``index``'s ``manifests`` (its Node, pod and blocks) made dual-stack: the Node's
    IPv6 underlay address fd99::<index>/64, its IPv6 block fd65:0:0:<index>::/122, and the
    pod's fd65:0:0:<index>::2 after its IPv4 address (instead of it unless ``ipv4``)."""
    v6 = f"'fd65:0:0:{index}::2/128'"
    text = manifests.replace(
        f"ipv4Address: 10.99.0.{index}/24",
        f"ipv4Address: 10.99.0.{index}/24, ipv6Address: 'fd99::{index}/64'",
    ).replace(
        f"ipNetworks: [10.65.{index}.2/32]",
        f"ipNetworks: [10.65.{index}.2/32, {v6}]" if ipv4 else f"ipNetworks: [{v6}]",
    )
    return (
        text
        + f"""
---
apiVersion: projectcalico.org/v3
kind: IPAMBlock
metadata: {{name: fd65-0-0-{index}---122}}
spec: {{cidr: 'fd65:0:0:{index}::/122', affinity: "host:node-{index}"}}
"""
    )


def pyfelix_pods(ns: str, action: str, hostname: str, manifests: Path, prefix: str) -> str:
    """`pyfelix pods` as on a node: nsenter, not `ip netns exec`, whose private mount namespace
    would hide the pod namespaces that `pods up` mounts under /run/netns."""
    argv = ("-m", "pyfelix", "pods", action, "--hostname", hostname, "--prefix", prefix)
    return subprocess.run(
        ["nsenter", f"--net=/run/netns/{ns}", sys.executable, *argv, str(manifests)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def remove_namespaces(prefix: str) -> None:
    """Whatever `pods down` left behind (after a failure) under this prefix."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listing.stdout.splitlines():
        if line.startswith(prefix):
            stop_processes(line.split()[0])
            subprocess.run(["ip", "netns", "del", line.split()[0]], check=False)


def two_nodes(stack: ExitStack, manifests: Path, prefix: str, tag: str) -> list[DemoNode]:
    """The two nodes with their pods up (``pods up`` output checked); torn down with
    ``stack``. Agents are the caller's to start. The underlay has its IPv6 addresses too
    (without duplicate detection, so they work at once)."""
    nodes = [DemoNode(stack, tag=f"{tag}{i}-{os.getpid()}") for i in (1, 2)]
    underlay = ("ul0", "netns", nodes[0].node, "type", "veth", "peer", "name", "ul0")
    subprocess.run(["ip", "link", "add", *underlay, "netns", nodes[1].node], check=True)
    for index, demo in enumerate(nodes, start=1):
        for command in (
            ("addr", "add", f"10.99.0.{index}/24", "dev", "ul0"),
            ("-6", "addr", "add", f"fd99::{index}/64", "dev", "ul0", "nodad"),
            ("link", "set", "ul0", "up"),
        ):
            subprocess.run(["ip", "-n", demo.node, *command], check=True)
        stack.callback(remove_namespaces, prefix)
        stack.callback(pyfelix_pods, demo.node, "down", f"node-{index}", manifests, prefix)
        up = pyfelix_pods(demo.node, "up", f"node-{index}", manifests, prefix)
        assert f"cali{index} -> " in up, up
    return nodes
