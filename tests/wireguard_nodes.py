"""Two WireGuard nodes' manifests for the WireGuard tests (tests/e2e/test_wireguard.py on this
machine with wireguard-go, tests/e2e/test_overlays.py with the kernel's devices): a pool
without encapsulation, each node's WireGuard address and device names (wireguard-go's control
sockets are not per-namespace, so each node names its devices differently)."""

from __future__ import annotations

import os

from pyfelix.demo import DemoNode
from pyfelix.pods import stop_processes
from tests.netns import run_in
from tests.two_nodes import block_and_pod, node_resource, with_ipv6
from tests.workloads import OPEN_PROFILE

CLUSTER = (
    """
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec:
  wireguardEnabled: true
  routeRefreshInterval: 1s
  wireguardKeepAlive: 25s
  routeTableRanges: [{min: 42, max: 50}]
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 10.65.0.0/16, vxlanMode: Never, ipipMode: Never, natOutgoing: false}
---"""
    + OPEN_PROFILE
)


def node(index: int, public_key: str = "") -> str:
    status = f"\nstatus: {{wireguardPublicKey: '{public_key}'}}" if public_key else ""
    config = f"""
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {{name: node.node-{index}}}
spec: {{wireguardInterfaceName: {device(index)}, wireguardInterfaceNameV6: {device(index, 6)}}}"""
    wireguard = f"wireguard: {{interfaceIPv4Address: 10.66.{index}.1}}{status}\n"
    return config + node_resource(index, wireguard) + block_and_pod(index)


def dual_stack_node(index: int, keys: tuple[str, str] = ("", "")) -> str:
    """Node ``index`` with an IPv6 underlay address and WireGuard address (fd66::<index>),
    its IPv6 block and a pod with fd65:0:0:<index>::2 beside its IPv4 address; ``keys``
    (IPv4's, IPv6's) in its status when given."""
    text = node(index).replace(
        f"interfaceIPv4Address: 10.66.{index}.1}}",
        f"interfaceIPv4Address: 10.66.{index}.1, interfaceIPv6Address: 'fd66::{index}'}}",
    )
    if any(keys):
        status = f"wireguardPublicKey: '{keys[0]}', wireguardPublicKeyV6: '{keys[1]}'"
        text = text.replace(
            f"interfaceIPv6Address: 'fd66::{index}'}}",
            f"interfaceIPv6Address: 'fd66::{index}'}}\nstatus: {{{status}}}",
        )
    return with_ipv6(index, text)


def device(index: int, version: int = 4) -> str:
    return f"wg{'6' if version == 6 else ''}-pft{index}-{os.getpid() % 10000}"


def stop_agents_and_wireguard_go(nodes: list[DemoNode]) -> None:
    """Agents first (one mid-refresh would recreate a device it saw vanish), then what they
    leave running on purpose: wireguard-go, which keeps the node's key."""
    for demo in nodes:
        for process in demo.processes:
            process.terminate()
            process.wait(timeout=10)
    for demo in nodes:
        stop_processes(demo.node)


def public_key(ns: str, name: str) -> str:
    """Device ``name``'s key in namespace ``ns`` once it has one ("" before: `wg` prints
    "(none)", or fails while there is no device)."""
    shown = run_in(ns, "wg", "show", name, "public-key")
    key = shown.stdout.strip() if shown.returncode == 0 else ""
    return "" if key == "(none)" else key
