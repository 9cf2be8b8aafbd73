"""Two nodes, one agent each, pods talking across a VXLAN overlay the agents built.

Each node is a network namespace (pyfelix.demo's DemoNode) whose pod `pyfelix pods up` wires;
an underlay link joins the nodes. Both agents read one manifest directory (the file datastore),
under their own hostnames, and must create vxlan.calico, the ARP and FDB entries for the other
node's VTEP and the route to its block, so that a TCP connection from one pod to the other
crosses the tunnel and meets the policy on the far side.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import attrs
import pytest

from pyfelix.demo import DemoNode
from pyfelix.errors import RESTART_EXIT_CODE
from pyfelix.pods import connects
from tests.netns import SLOWDOWN, eventually
from tests.two_nodes import (
    block_and_pod,
    ipam_block,
    ipv6_pool,
    node_resource,
    pyfelix_pods,
    two_nodes,
    with_ipv6,
)
from tests.workloads import OPEN_PROFILE

pytestmark = pytest.mark.netns

MANIFESTS = (
    """
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {vxlanEnabled: true, routeRefreshInterval: 1s, iptablesRefreshInterval: 1s}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pods}
spec: {cidr: 10.65.0.0/16, vxlanMode: Always, ipipMode: Never, natOutgoing: false}
---"""
    + OPEN_PROFILE
    + """---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: web-only}
spec:
  selector: app == "server"
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == "client"}
    destination: {ports: [8080]}
"""
)


def node(index: int) -> str:
    ports = """,
   ports: [{name: http, protocol: TCP, port: 8080}, {name: metrics, protocol: TCP, port: 9090}]"""
    tunnel = f"ipv4VXLANTunnelAddr: 10.65.{index}.0"
    return node_resource(index, tunnel) + block_and_pod(index, ports)


def run(ns: str, *argv: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True
    ).stdout


def vxlan_tx_packets(ns: str) -> int:
    stats = run(ns, "cat", "/sys/class/net/vxlan.calico/statistics/tx_packets")
    return int(stats)


@attrs.frozen
class Running:
    nodes: list[DemoNode]
    #: Node 1's pod namespace.
    client: str
    prefix: str


@contextmanager
def agents_on_two_nodes(tmp_path: Path, manifests: str, tag: str) -> Iterator[Running]:
    """``manifests`` in ``tmp_path``, the two nodes with their pods, an agent on each."""
    (tmp_path / "cluster.yaml").write_text(manifests)
    prefix = f"pf{tag}{os.getpid()}-"
    with ExitStack() as stack:
        nodes = two_nodes(stack, tmp_path, prefix, tag)
        for index, demo in enumerate(nodes, start=1):
            demo.start_agent(tmp_path, f"node-{index}", tmp_path / f"agent-{index}.log")
        yield Running(nodes, f"{prefix}app.pod1", prefix)


@pytest.mark.parametrize("nftables_mode", ["Disabled", "Enabled"])
def test_pods_on_two_nodes_talk_through_the_agents_vxlan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nftables_mode: str
) -> None:
    """Also the Vagrant cluster's recipe: `pyfelix pods up` on each node, `pods check`; in
    the iptables mode and the nftables mode."""
    monkeypatch.setenv("FELIX_NFTABLESMODE", nftables_mode)
    with agents_on_two_nodes(tmp_path, MANIFESTS + node(1) + node(2), "vx") as running:
        nodes, client, prefix = running.nodes, running.client, running.prefix

        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), run(
            nodes[0].node, "ip", "route", "show", "proto", "boot"
        )
        check = pyfelix_pods(nodes[0].node, "check", "node-1", tmp_path, prefix)
        assert "app/pod1                 app/pod2                 node-2     tcp/8080  allowed" in (
            check
        )
        assert "app/pod2                 node-2     tcp/9090  denied" in check
        device = run(nodes[0].node, "ip", "-d", "link", "show", "vxlan.calico")
        assert "vxlan id 4096" in device
        assert "local 10.99.0.1 dev ul0" in device
        assert "dstport 4789" in device
        assert "nolearning" in device
        # The host MTU is the node's eth0 (MTUIfacePattern; ul0 does not match), less VXLAN's
        # 50, for the device and, in the mtu file, for the pods.
        assert " mtu 1450 " in device
        assert (Path(os.environ["PYFELIX_STATE_DIR"]) / "mtu").read_text() == "1450"
        assert "10.65.2.0/26 via 10.65.2.0 dev vxlan.calico onlink" in run(
            nodes[0].node, "ip", "route", "show", "proto", "boot"
        )
        before = vxlan_tx_packets(nodes[0].node)
        assert connects(client, "10.65.2.2", 8080)
        assert vxlan_tx_packets(nodes[0].node) > before
        # The endpoint status file Calico's CNI plugin waits for (EndpointStatusPathPrefix).
        status = nodes[0].status_prefix / "endpoint-status" / "k8s app%2Fpod1 eth0"
        assert eventually(status.exists)
        assert json.loads(status.read_text()) == {
            "ifaceName": "cali1",
            "ipv4Nets": ["10.65.1.2/32"],
        }

        # Tampering with the overlay is repaired on the route refresh (1 s here).
        def fdb() -> list[str]:
            shown = run(nodes[0].node, "bridge", "fdb", "show", "dev", "vxlan.calico")
            return [line for line in shown.splitlines() if "dst 10.99.0.2" in line]

        (entry,) = fdb()
        run(nodes[0].node, "bridge", "fdb", "del", entry.split()[0], "dev", "vxlan.calico")
        run(nodes[0].node, "ip", "neigh", "flush", "dev", "vxlan.calico")
        # The tampering breaks the overlay: a connection gets through only once the refresh
        # has put the entry back (which may happen during the attempt).
        assert not connects(client, "10.65.2.2", 8080) or fdb()
        assert eventually(lambda: bool(fdb()))
        assert eventually(lambda: connects(client, "10.65.2.2", 8080))

        pyfelix_pods(nodes[0].node, "down", "node-1", tmp_path, prefix)
        assert client not in run(nodes[0].node, "ip", "netns", "list")


def test_pods_in_a_disabled_pool_keep_the_tunnel_during_a_migration(tmp_path: Path) -> None:
    """Calico's pool migration: a new pool (here unencapsulated) is created and the old VXLAN
    pool disabled while its pods are moved one by one. As in Felix, a disabled pool still
    counts for the encapsulation (disabling only stops IPAM assigning from it), so the pods
    still in it keep talking across the nodes through vxlan.calico."""
    manifests = MANIFESTS.replace("vxlanEnabled: true, ", "").replace(
        "natOutgoing: false}", "natOutgoing: false, disabled: true}"
    )
    manifests += """---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: new-pods}
spec: {cidr: 10.70.0.0/16, vxlanMode: Never, ipipMode: Never}
"""
    with agents_on_two_nodes(tmp_path, manifests + node(1) + node(2), "vm") as running:
        nodes, client = running.nodes, running.client
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), run(
            nodes[0].node, "ip", "route", "show", "proto", "boot"
        )
        assert "10.65.2.0/26 via 10.65.2.0 dev vxlan.calico onlink" in run(
            nodes[0].node, "ip", "route", "show", "proto", "boot"
        )
        before = vxlan_tx_packets(nodes[0].node)
        assert connects(client, "10.65.2.2", 8080)
        assert vxlan_tx_packets(nodes[0].node) > before


def test_an_unencapsulated_pool_is_routed_with_program_cluster_routes(tmp_path: Path) -> None:
    """ProgramClusterRoutes Enabled: the agents route each other's blocks of an
    unencapsulated pool straight to the node (no BIRD here), and the pods talk without a
    tunnel."""
    manifests = MANIFESTS.replace(
        "vxlanEnabled: true, ", "programClusterRoutes: Enabled, "
    ).replace("vxlanMode: Always", "vxlanMode: Never")
    with agents_on_two_nodes(tmp_path, manifests + node(1) + node(2), "ve") as running:
        nodes, client = running.nodes, running.client
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), run(
            nodes[0].node, "ip", "route"
        )
        assert "via 10.99.0.2 dev ul0" in run(nodes[0].node, "ip", "route", "show", "10.65.2.0/26")
        links = run(nodes[0].node, "ip", "-o", "link", "show")
        assert "vxlan.calico" not in links


def borrowing_cluster() -> str:
    """Both pods' addresses from one block affine to node-1 (10.65.0.0/22): node-2's pod
    (10.65.2.2) has an address node-1's block allocated to node-2."""
    allocations: list[int | None] = [None] * 1024
    allocations[258], allocations[514] = 0, 1  # 10.65.1.2 and 10.65.2.2
    attributes = [
        {"handle_id": "k8s-pod-network.pod1", "secondary": {"node": "node-1"}},
        {"handle_id": "k8s-pod-network.pod2", "secondary": {"node": "node-2"}},
    ]
    block = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "IPAMBlock",
        "metadata": {"name": "10-65-0-0-22"},
        "spec": {
            "cidr": "10.65.0.0/22",
            "affinity": "host:node-1",
            "allocations": allocations,
            "attributes": attributes,
            "unallocated": [],
        },
    }
    pods = block_and_pod(1, block=False) + block_and_pod(2, block=False)
    nodes = "".join(node_resource(i, f"ipv4VXLANTunnelAddr: 10.67.{i}.0") for i in (1, 2))
    return MANIFESTS + nodes + "\n---\n" + json.dumps(block) + "\n" + pods


def test_a_borrowed_address_is_routed_to_the_node_that_has_it(tmp_path: Path) -> None:
    """As Felix: an address of node-1's block allocated to node-2 gets its own /32 route to
    node-2 (node-1 would otherwise keep it for its own block), so pod1 reaches pod2."""
    with agents_on_two_nodes(tmp_path, borrowing_cluster(), "vb") as running:
        nodes, client = running.nodes, running.client
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), run(
            nodes[0].node, "ip", "route", "show", "proto", "boot"
        )
        routes = run(nodes[0].node, "ip", "route", "show", "proto", "boot")
        assert "10.65.2.2 via 10.67.2.0 dev vxlan.calico onlink" in routes
        assert "10.65.0.0/22 via 10.67.1.0 dev vxlan.calico" in run(
            nodes[1].node, "ip", "route", "show", "proto", "boot"
        )


def test_cross_subnet_pool_routes_same_subnet_nodes_without_the_tunnel(tmp_path: Path) -> None:
    """As Felix: with vxlanMode CrossSubnet, a node in the same subnet (both underlay
    addresses in 10.99.0.0/24) is routed to directly via its address, not through
    vxlan.calico, and the pods still talk."""
    manifests = MANIFESTS.replace("vxlanMode: Always", "vxlanMode: CrossSubnet")
    with agents_on_two_nodes(tmp_path, manifests + node(1) + node(2), "vc") as running:
        nodes, client = running.nodes, running.client

        def direct() -> bool:
            return "via 10.99.0.2 dev ul0" in run(
                nodes[0].node, "ip", "route", "show", "10.65.2.0/26"
            )

        assert eventually(direct, timeout=15), run(nodes[0].node, "ip", "route")
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15)
        before = vxlan_tx_packets(nodes[0].node)
        assert connects(client, "10.65.2.2", 8080)
        assert vxlan_tx_packets(nodes[0].node) == before, "the packets took the tunnel"


def dual_stack_node(index: int, *, ipv4: bool = True) -> str:
    """Node ``index`` with IPv6 underlay and VXLAN addresses, its IPv6 block and a pod with an
    IPv6 address (fd65:0:0:<index>::2) after its IPv4 one (only the IPv6 one unless
    ``ipv4``)."""
    tunnel = f"ipv6VXLANTunnelAddr: 'fd65:0:0:{index}::'"
    if ipv4:
        tunnel += f"\n  ipv4VXLANTunnelAddr: 10.65.{index}.0"
    node = node_resource(index, tunnel) + block_and_pod(index, block=ipv4)
    return with_ipv6(index, node, ipv4=ipv4)


def test_dual_stack_pods_talk_over_both_vxlan_devices(tmp_path: Path) -> None:
    """An IPv4 and an IPv6 VXLAN pool: each agent builds vxlan.calico and vxlan-v6.calico
    (over the node's IPv6 underlay address, MTU the host's less 70), the IPv6 block goes
    through the other node's IPv6 VTEP, and both families cross with the policy applied on
    the far side."""
    manifests = MANIFESTS + ipv6_pool("Always") + dual_stack_node(1) + dual_stack_node(2)
    with agents_on_two_nodes(tmp_path, manifests, "vd") as running:
        nodes, client = running.nodes, running.client
        assert eventually(lambda: connects(client, "fd65:0:0:2::2", 8080), timeout=15), run(
            nodes[0].node, "ip", "-6", "route"
        )
        assert connects(client, "10.65.2.2", 8080)
        assert not connects(client, "fd65:0:0:2::2", 9090), "policy in IPv6 too"
        device = run(nodes[0].node, "ip", "-d", "link", "show", "vxlan-v6.calico")
        assert "vxlan id 4096 local fd99::1 dev ul0" in device
        assert " mtu 1430 " in device
        # The pods get the smaller MTU of the two tunnels that are on.
        assert (Path(os.environ["PYFELIX_STATE_DIR"]) / "mtu").read_text() == "1430"
        routes = run(nodes[0].node, "ip", "-6", "route", "show", "proto", "boot")
        assert "fd65:0:0:2::/122 via fd65:0:0:2:: dev vxlan-v6.calico" in routes
        before = int(
            run(nodes[0].node, "cat", "/sys/class/net/vxlan-v6.calico/statistics/tx_packets")
        )
        assert connects(client, "fd65:0:0:2::2", 8080)
        after = int(
            run(nodes[0].node, "cat", "/sys/class/net/vxlan-v6.calico/statistics/tx_packets")
        )
        assert after > before
        check = pyfelix_pods(nodes[0].node, "check", "node-1", tmp_path, running.prefix)
        assert "app/pod2 fd65:0:0:2::2   node-2     tcp/8080  allowed" in check


def test_ipv6_only_pods_talk_over_ipv6_vxlan(tmp_path: Path) -> None:
    """IPv6 alone (no IPv4 VXLAN address, pods with only an IPv6 address): there is no
    vxlan.calico, and the pods reach each other through vxlan-v6.calico."""
    manifests = MANIFESTS.replace(
        "spec: {cidr: 10.65.0.0/16, vxlanMode: Always",
        "spec: {cidr: 10.65.0.0/16, vxlanMode: Never",
    ).replace("vxlanEnabled: true, ", "")
    manifests += (
        ipv6_pool("Always") + dual_stack_node(1, ipv4=False) + dual_stack_node(2, ipv4=False)
    )
    with agents_on_two_nodes(tmp_path, manifests, "v6") as running:
        nodes, client = running.nodes, running.client
        assert eventually(lambda: connects(client, "fd65:0:0:2::2", 8080), timeout=15), run(
            nodes[0].node, "ip", "-6", "route"
        )
        assert "vxlan.calico" not in run(nodes[0].node, "ip", "link", "show")
        assert not connects(client, "fd65:0:0:2::2", 9090)


def test_a_node_joins_and_leaves(tmp_path: Path) -> None:
    """Node 2's Node and block arrive after the agents started (a node joining): node 1 gets
    its VTEP (ARP and FDB entries) and the route to its block, node 2's agent restarts for
    its own new tunnel address, and the pods talk; when they go (the node leaving), node 1
    removes all three and keeps nothing pointing at it."""
    pods = block_and_pod(1) + block_and_pod(2, block=False)
    node_1 = node_resource(1, "ipv4VXLANTunnelAddr: 10.65.1.0")
    joining = node_resource(2, "ipv4VXLANTunnelAddr: 10.65.2.0") + ipam_block(2)
    with agents_on_two_nodes(tmp_path, MANIFESTS + node_1 + pods, "vj") as running:
        nodes, client = running.nodes, running.client
        node1 = nodes[0].node

        def overlay() -> str:
            return (
                run(node1, "ip", "route", "show", "proto", "boot")
                + run(node1, "bridge", "fdb", "show", "dev", "vxlan.calico")
                + run(node1, "ip", "neigh", "show", "dev", "vxlan.calico")
            )

        assert eventually(lambda: "vxlan.calico" in run(node1, "ip", "link"), timeout=15)
        assert not connects(client, "10.65.2.2", 8080)
        (tmp_path / "node-2.yaml").write_text(joining)
        # As Felix: its own tunnel address arriving restarts node 2's agent (systemd starts
        # it again; here the test does).
        assert nodes[1].processes[-1].wait(timeout=30 * SLOWDOWN) == RESTART_EXIT_CODE
        nodes[1].start_agent(tmp_path, "node-2")
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), overlay()
        shown = overlay()
        assert "10.65.2.0/26 via 10.65.2.0 dev vxlan.calico onlink" in shown
        assert "dst 10.99.0.2" in shown
        assert "10.65.2.0 lladdr" in shown
        (tmp_path / "node-2.yaml").unlink()
        assert eventually(lambda: "10.65.2.0" not in overlay(), timeout=15), overlay()
        assert "10.99.0.2" not in overlay()
        assert not connects(client, "10.65.2.2", 8080)
