"""Two agents on Debian's stock kernel (in the VM of tests/test_in_vm.py): the overlays this
machine's kernel cannot build, judged by the pods' traffic and by what crosses the underlay.

Each test makes two node namespaces on one underlay with a pod each (tests/two_nodes.py), an
agent per node reading one manifest directory, and captures the underlay with tcpdump while
the client pod talks to the server pod: IPIP must carry the pods' TCP inside protocol 4
(CrossSubnet: plainly, nodes sharing a subnet), WireGuard (with host encryption, the nodes'
own traffic too) must show nothing but its UDP.
An encapsulation change restarts both agents (exit 129, as Felix) and they converge on the
new overlay when started again, as systemd would start them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from pyfelix.demo import DemoNode
from pyfelix.errors import RESTART_EXIT_CODE
from pyfelix.pods import connects, start_responder
from tests.capture import captured, packets
from tests.netns import SLOWDOWN, eventually, run_in
from tests.two_nodes import block_and_pod, ipv6_pool, node_resource, two_nodes
from tests.wireguard_nodes import CLUSTER as WIREGUARD_CLUSTER
from tests.wireguard_nodes import (
    device,
    dual_stack_node,
    public_key,
    stop_agents_and_wireguard_go,
)
from tests.workloads import OPEN_PROFILE

pytestmark = [pytest.mark.netns, pytest.mark.stock_kernel]

IPIP_CLUSTER = (
    """
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {routeRefreshInterval: 5s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 10.65.0.0/16, ipipMode: MODE, vxlanMode: Never, natOutgoing: false}
---"""
    + OPEN_PROFILE
)


def ipip_node(index: int) -> str:
    tunnel = f"bgp: {{ipv4Address: 10.99.0.{index}/24, ipv4IPIPTunnelAddr: 10.65.{index}.1}}"
    return node_resource(index, "").replace(
        f"bgp: {{ipv4Address: 10.99.0.{index}/24}}", tunnel
    ) + block_and_pod(index)


def vxlan_node(index: int) -> str:
    return node_resource(index, f"ipv4VXLANTunnelAddr: 10.65.{index}.0") + block_and_pod(index)


@contextmanager
def cluster(tmp_path: Path, manifests: str, tag: str) -> Iterator[list[DemoNode]]:
    (tmp_path / "cluster.yaml").write_text(manifests)
    with ExitStack() as stack:
        nodes = two_nodes(stack, tmp_path, f"pf{tag}{os.getpid()}-", tag)
        for index, node in enumerate(nodes, start=1):
            node.start_agent(tmp_path, f"node-{index}", tmp_path / f"a{index}.log")
        stack.callback(stop_agents_and_wireguard_go, nodes)
        yield nodes


def logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("a*.log")))


def client(tag: str) -> str:
    return f"pf{tag}{os.getpid()}-app.pod1"


def test_ipip_then_vxlan_after_the_encapsulation_changes(tmp_path: Path) -> None:
    """IPIP Always: the pods' TCP crosses the underlay inside IPIP, routed onlink via the
    other node's address out of tunl0. Then the pool turns to VXLAN: both agents exit 129,
    and started again they carry the pods over vxlan.calico instead, tunl0's route gone."""
    nodes_ipip = ipip_node(1) + ipip_node(2)
    with cluster(tmp_path, IPIP_CLUSTER.replace("MODE", "Always") + nodes_ipip, "ii") as nodes:
        node1, pod = nodes[0].node, client("ii")
        assert eventually(lambda: connects(pod, "10.65.2.2", 8080, timeout=5), timeout=15), (
            logs(tmp_path) + run_in(node1, "ip", "route").stdout
        )
        routes = run_in(node1, "ip", "route", "show", "10.65.2.0/26").stdout
        assert "via 10.99.0.2 dev tunl0 onlink" in routes
        assert "inet 10.65.1.1/32" in run_in(node1, "ip", "addr", "show", "tunl0").stdout
        with captured(node1, tmp_path / "ipip.pcap"):
            assert connects(pod, "10.65.2.2", 8080, timeout=5)
        assert packets(tmp_path / "ipip.pcap", "ip proto 4"), "no IPIP on the underlay"
        assert not packets(tmp_path / "ipip.pcap", "tcp port 8080"), "TCP outside the tunnel"

        vxlan = IPIP_CLUSTER.replace("ipipMode: MODE, vxlanMode: Never", "vxlanMode: Always")
        (tmp_path / "cluster.yaml").write_text(vxlan + vxlan_node(1) + vxlan_node(2))
        for node in nodes:
            assert node.processes[-1].wait(timeout=60 * SLOWDOWN) == RESTART_EXIT_CODE
        for index, node in enumerate(nodes, start=1):
            node.start_agent(tmp_path, f"node-{index}", tmp_path / f"a{index}-again.log")

        def over_vxlan() -> bool:
            shown = run_in(node1, "ip", "route", "show", "10.65.2.0/26").stdout
            return "dev vxlan.calico" in shown

        assert eventually(over_vxlan, timeout=15), logs(tmp_path)
        assert eventually(lambda: connects(pod, "10.65.2.2", 8080, timeout=5), timeout=15)
        assert "tunl0" not in run_in(node1, "ip", "route").stdout


def test_ipip_cross_subnet_goes_direct_between_nodes_of_one_subnet(tmp_path: Path) -> None:
    """IPIP CrossSubnet with both nodes in 10.99.0.0/24: the block is routed straight to the
    other node and the pods' TCP crosses the underlay as it is, no IPIP."""
    manifests = IPIP_CLUSTER.replace("MODE", "CrossSubnet") + ipip_node(1) + ipip_node(2)
    with cluster(tmp_path, manifests, "ic") as nodes:
        node1, pod = nodes[0].node, client("ic")
        assert eventually(lambda: connects(pod, "10.65.2.2", 8080, timeout=5), timeout=15), (
            logs(tmp_path) + run_in(node1, "ip", "route").stdout
        )
        assert (
            "via 10.99.0.2 dev ul0" in run_in(node1, "ip", "route", "show", "10.65.2.0/26").stdout
        )
        with captured(node1, tmp_path / "direct.pcap"):
            assert connects(pod, "10.65.2.2", 8080, timeout=5)
        assert packets(tmp_path / "direct.pcap", "tcp port 8080")
        assert not packets(tmp_path / "direct.pcap", "ip proto 4")


def test_kernel_wireguard_in_both_families_shows_only_its_udp(tmp_path: Path) -> None:
    """The kernel's WireGuard devices, IPv4 and IPv6, with host encryption: the pods talk in
    both families, and so do the nodes themselves, and the underlay carries only WireGuard's
    UDP (51820, 51821), never their TCP."""
    config = WIREGUARD_CLUSTER.replace(
        "wireguardEnabled: true",
        "wireguardEnabled: true\n  wireguardEnabledV6: true"
        "\n  wireguardHostEncryptionEnabled: true",
    )
    with cluster(
        tmp_path, config + ipv6_pool() + dual_stack_node(1) + dual_stack_node(2), "wk"
    ) as nodes:
        node1, pod = nodes[0].node, client("wk")

        def keys() -> list[str]:
            return [
                public_key(node.node, device(index, version))
                for index, node in enumerate(nodes, start=1)
                for version in (4, 6)
            ]

        assert eventually(lambda: all(keys()), timeout=15)
        k1, k1v6, k2, k2v6 = keys()
        # What the etcd status updater does: each node's keys into its Node.
        published = config + ipv6_pool()
        published += dual_stack_node(1, (k1, k1v6)) + dual_stack_node(2, (k2, k2v6))
        (tmp_path / "cluster.yaml").write_text(published)
        assert eventually(lambda: connects(pod, "fd65:0:0:2::2", 8080, timeout=5), timeout=15), (
            logs(tmp_path) + run_in(node1, "wg", "show").stdout
        )
        details = run_in(node1, "ip", "-d", "link", "show", device(1, 6)).stdout
        assert " wireguard " in details, "the kernel's device"
        # Each family's device is its own write: the IPv4 peer may follow the IPv6 one.
        assert eventually(
            lambda: "10.99.0.2/32" in run_in(node1, "wg", "show", device(1)).stdout, timeout=15
        ), logs(tmp_path) + run_in(node1, "wg", "show").stdout
        server = start_responder(nodes[1].node, [7777])
        try:
            with captured(node1, tmp_path / "wg.pcap"):
                assert connects(pod, "10.65.2.2", 8080, timeout=5)
                assert connects(pod, "fd65:0:0:2::2", 8080, timeout=5)
                assert connects(node1, "10.99.0.2", 7777, timeout=5)
        finally:
            server.terminate()
        assert packets(tmp_path / "wg.pcap", "udp port 51820")
        assert packets(tmp_path / "wg.pcap", "udp port 51821")
        assert not packets(tmp_path / "wg.pcap", "tcp port 8080"), "pod TCP in the clear"
        assert not packets(tmp_path / "wg.pcap", "tcp port 7777"), "host TCP in the clear"
