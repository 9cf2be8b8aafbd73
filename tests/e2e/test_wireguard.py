"""Two nodes, one agent each, pod traffic between them encrypted by the agents' WireGuard.

As in tests/e2e/test_vxlan.py, each node is a network namespace with one pod and an underlay
link joins them, but the pool has no encapsulation: what crosses the underlay must be
WireGuard. This machine's kernel has no WireGuard module, so here the agents run wireguard-go
(in the VM of tests/test_in_vm.py the same test runs the kernel's device); wireguard-go's
control sockets are not per-namespace, so each node names its device differently (a
node-specific FelixConfiguration). With the file datastore nobody publishes the nodes' public
keys, so there the test does what the etcd status updater would: it copies each agent's key
into its Node resource; with etcd the agents do it themselves.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.pods import connects, start_responder
from tests import vm
from tests.capture import captured, packets
from tests.etcd_server import EtcdServer
from tests.netns import eventually, run_in
from tests.two_nodes import ipv6_pool, two_nodes
from tests.wireguard_nodes import (
    CLUSTER,
    device,
    dual_stack_node,
    node,
    public_key,
    stop_agents_and_wireguard_go,
)

pytestmark = pytest.mark.netns


@pytest.mark.parametrize(
    ("datastore", "nftables_mode"),
    [("files", "Disabled"), ("etcd", "Disabled"), ("files", "Enabled")],
)
def test_pods_on_two_nodes_talk_through_wireguard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, datastore: str, nftables_mode: str
) -> None:
    """With etcd (running on node 1, reached over the underlay) the agents publish their keys
    into their Nodes themselves; with files the test copies them there. Also in the
    nftables mode."""
    monkeypatch.setenv("FELIX_NFTABLESMODE", nftables_mode)
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(CLUSTER + node(1) + node(2))
    prefix = f"pfw{os.getpid()}-"
    with ExitStack() as stack:
        agents: list[subprocess.Popen[str]] = []
        nodes = two_nodes(stack, tmp_path, prefix, "wg")
        source = str(tmp_path)
        if datastore == "etcd":
            (tmp_path / "etcd").mkdir()
            etcd = EtcdServer(str(tmp_path / "etcd"), netns=nodes[0].node, host="10.99.0.1")
            etcd.start()
            stack.callback(etcd.stop)
            source = etcd.etcd_url
            apply = ("-m", "pyfelix", "datastore", "--datastore", source, "apply", "-f")
            loaded = run_in(nodes[0].node, sys.executable, *apply, str(manifests))
            assert loaded.returncode == 0, loaded.stderr
        for index, demo in enumerate(nodes, start=1):
            log = tmp_path / f"a{index}.log"
            agents.append(demo.start_agent(source, f"node-{index}", log))

        stack.callback(stop_agents_and_wireguard_go, nodes)

        def key(index: int) -> str:
            return public_key(nodes[index - 1].node, device(index))

        def logs() -> str:
            return "\n".join(p.read_text() for p in sorted(tmp_path.glob("a*.log")))

        assert eventually(lambda: bool(key(1) and key(2)), timeout=15), logs()
        keys = [key(1), key(2)]
        if datastore == "files":
            # What the status updater does with etcd: each node's key into its Node resource.
            manifests.write_text(CLUSTER + node(1, keys[0]) + node(2, keys[1]))

        client = f"{prefix}app.pod1"
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15), (
            logs() + run_in(nodes[0].node, "wg", "show").stdout
        )
        shown = run_in(nodes[0].node, "wg", "show", device(1)).stdout
        assert f"peer: {keys[1]}" in shown
        assert "endpoint: 10.99.0.2:51820" in shown
        assert "latest handshake" in shown
        assert "10.65.2.0/26" in shown
        assert "persistent keepalive: every 25 seconds" in shown
        # The kernel's device where the module exists (in the VM, tests/test_in_vm.py), else
        # wireguard-go's.
        details = run_in(nodes[0].node, "ip", "-d", "link", "show", device(1)).stdout
        assert (" wireguard " in details) == vm.kernel_has("wireguard"), details
        # The first table of RouteTableRanges, as Felix's allocator hands it to WireGuard.
        rules = run_in(nodes[0].node, "ip", "rule").stdout
        assert "99:\tnot from all fwmark 0x200000/0x200000 lookup 42" in rules
        assert (
            f"10.65.2.0/26 dev {device(1)}"
            in run_in(nodes[0].node, "ip", "route", "show", "table", "42").stdout
        )
        # The node's eth0 (1500) less WireGuard's 60, for the device and the pods.
        assert " mtu 1440 " in run_in(nodes[0].node, "ip", "link", "show", device(1)).stdout
        assert (Path(os.environ["PYFELIX_STATE_DIR"]) / "mtu").read_text() == "1440"

        # An agent restart keeps the node's key (the device holds it) and the tunnel.
        agents[0].terminate()
        assert agents[0].wait(timeout=10) == 0
        nodes[0].start_agent(source, "node-1", tmp_path / "a1-again.log")
        assert eventually(lambda: "apply 1:" in (tmp_path / "a1-again.log").read_text()), logs()
        assert key(1) == keys[0]
        assert connects(client, "10.65.2.2", 8080)


def test_dual_stack_pods_talk_through_both_wireguard_devices(tmp_path: Path) -> None:
    """WireguardEnabledV6: a second device for IPv6 (its own port, 51821, and the second
    table of RouteTableRanges) with the other node as peer at its IPv6 address; both
    agents publish both keys into their Nodes (etcd); IPv4 and IPv6 pod traffic cross,
    each through its own device."""
    cluster = CLUSTER.replace(
        "wireguardEnabled: true", "wireguardEnabled: true\n  wireguardEnabledV6: true"
    )
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(cluster + ipv6_pool() + dual_stack_node(1) + dual_stack_node(2))
    prefix = f"pfw6{os.getpid()}-"
    with ExitStack() as stack:
        nodes = two_nodes(stack, tmp_path, prefix, "w6")
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=nodes[0].node, host="10.99.0.1")
        etcd.start()
        stack.callback(etcd.stop)
        apply = ("-m", "pyfelix", "datastore", "--datastore", etcd.etcd_url, "apply", "-f")
        loaded = run_in(nodes[0].node, sys.executable, *apply, str(manifests))
        assert loaded.returncode == 0, loaded.stderr
        for index, demo in enumerate(nodes, start=1):
            demo.start_agent(etcd.etcd_url, f"node-{index}", tmp_path / f"a{index}.log")
        stack.callback(stop_agents_and_wireguard_go, nodes)

        def logs() -> str:
            return "\n".join(p.read_text() for p in sorted(tmp_path.glob("a*.log")))

        client = f"{prefix}app.pod1"
        assert eventually(lambda: connects(client, "fd65:0:0:2::2", 8080), timeout=20), (
            logs() + run_in(nodes[0].node, "wg", "show").stdout
        )
        # Each family's device handshakes on its own: the IPv4 one may be a moment behind.
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=20), (
            logs() + run_in(nodes[0].node, "wg", "show").stdout
        )
        shown = run_in(nodes[0].node, "wg", "show", device(1, 6)).stdout
        assert "listening port: 51821" in shown
        assert "endpoint: [fd99::2]:51821" in shown
        assert "allowed ips: fd65:0:0:2::/122, fd66::2/128" in shown
        assert "10.65.2.0/26" not in shown, "IPv4 blocks belong to the IPv4 device"
        assert "fd65" not in run_in(nodes[0].node, "wg", "show", device(1)).stdout
        rules = run_in(nodes[0].node, "ip", "-6", "rule").stdout
        assert "99:\tnot from all fwmark 0x200000/0x200000 lookup 43" in rules
        table = run_in(nodes[0].node, "ip", "-6", "route", "show", "table", "43").stdout
        assert f"fd65:0:0:2::/122 dev {device(1, 6)}" in table
        # The node's eth0 (1500) less IPv6 WireGuard's 80; the pods get the smaller MTU.
        assert " mtu 1420 " in run_in(nodes[0].node, "ip", "link", "show", device(1, 6)).stdout
        assert (Path(os.environ["PYFELIX_STATE_DIR"]) / "mtu").read_text() == "1420"
        dumped = run_in(
            nodes[0].node,
            sys.executable,
            "-m",
            "pyfelix",
            "datastore",
            "--datastore",
            etcd.etcd_url,
            "get",
            "Node",
            "node-2",
            "-o",
            "json",
        )
        key6 = run_in(nodes[1].node, "wg", "show", device(2, 6), "public-key").stdout.strip()
        assert key6
        assert key6 in dumped.stdout, dumped.stdout + dumped.stderr


def test_host_encryption_carries_the_nodes_own_traffic_through_wireguard(tmp_path: Path) -> None:
    """WireguardHostEncryptionEnabled: the other node's own address is routed through the
    device and allowed on its peer, so traffic between the nodes themselves crosses the
    underlay as WireGuard's UDP only; with strict reverse-path filtering on the nodes, the
    raw table's incoming mark (and src_valid_mark) keep the encrypted packets from failing
    the check against WireGuard's table."""
    cluster = CLUSTER.replace(
        "wireguardEnabled: true", "wireguardEnabled: true\n  wireguardHostEncryptionEnabled: true"
    )
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(cluster + node(1) + node(2))
    with ExitStack() as stack:
        nodes = two_nodes(stack, tmp_path, f"pfwh{os.getpid()}-", "wh")
        for demo in nodes:
            for sysctl in ("all", "ul0"):
                run_in(demo.node, "sysctl", "-qw", f"net.ipv4.conf.{sysctl}.rp_filter=1")
        for index, demo in enumerate(nodes, start=1):
            demo.start_agent(tmp_path, f"node-{index}", tmp_path / f"a{index}.log")
        stack.callback(stop_agents_and_wireguard_go, nodes)

        def key(index: int) -> str:
            return public_key(nodes[index - 1].node, device(index))

        assert eventually(lambda: bool(key(1) and key(2)), timeout=15)
        manifests.write_text(cluster + node(1, key(1)) + node(2, key(2)))
        client = f"pfwh{os.getpid()}-app.pod1"
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15)
        server = start_responder(nodes[1].node, [7777])
        stack.callback(server.terminate)
        node1 = nodes[0].node
        shown = run_in(node1, "wg", "show", device(1)).stdout
        assert "allowed ips: 10.65.2.0/26, 10.66.2.1/32, 10.99.0.2/32" in shown
        table = run_in(node1, "ip", "route", "show", "table", "42").stdout
        assert f"10.99.0.2 dev {device(1)}" in table
        assert run_in(node1, "cat", "/proc/sys/net/ipv4/conf/all/src_valid_mark").stdout == "1\n"
        with captured(node1, tmp_path / "hosts.pcap"):
            assert eventually(lambda: connects(node1, "10.99.0.2", 7777))
        assert packets(tmp_path / "hosts.pcap", "udp port 51820"), (
            run_in(node1, "ip", "route", "get", "10.99.0.2").stdout
            + run_in(node1, "ip", "-s", "link").stdout
            + run_in(node1, "wg", "show").stdout
            + run_in(node1, "ip", "rule").stdout
        )
        assert not packets(tmp_path / "hosts.pcap", "tcp port 7777"), "host TCP in the clear"


def test_a_node_without_wireguard_is_reached_unencrypted(tmp_path: Path) -> None:
    """A mixed cluster, as Felix arranges it: VXLAN everywhere, WireGuard on node 1 only.
    Node 1 has no peer for node 2 (no key), so node 2's block is a throw route in the
    WireGuard table and the pods talk over VXLAN, unencrypted."""
    vxlan_cluster = CLUSTER.replace("vxlanMode: Never", "vxlanMode: Always")
    off = "spec: {wireguardInterfaceName: "
    nodes_text = node(1) + node(2).replace(off, "spec: {wireguardEnabled: false, " + off[7:], 1)

    def with_vxlan(text: str) -> str:
        for index in (1, 2):
            text = text.replace(
                f"wireguard: {{interfaceIPv4Address: 10.66.{index}.1}}",
                f"ipv4VXLANTunnelAddr: 10.67.{index}.0\n  "
                f"wireguard: {{interfaceIPv4Address: 10.66.{index}.1}}",
            )
        return text

    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(vxlan_cluster + with_vxlan(nodes_text))
    with ExitStack() as stack:
        nodes = two_nodes(stack, tmp_path, f"pfwm{os.getpid()}-", "wm")
        for index, demo in enumerate(nodes, start=1):
            demo.start_agent(tmp_path, f"node-{index}", tmp_path / f"a{index}.log")
        stack.callback(stop_agents_and_wireguard_go, nodes)
        client = f"pfwm{os.getpid()}-app.pod1"
        node1 = nodes[0].node
        assert eventually(lambda: connects(client, "10.65.2.2", 8080), timeout=15)
        assert public_key(node1, device(1))
        assert not public_key(nodes[1].node, device(2)), "WireGuard is off on node 2"
        table = run_in(node1, "ip", "route", "show", "table", "42").stdout
        assert "throw 10.65.2.0/26" in table
        with captured(node1, tmp_path / "mixed.pcap"):
            assert connects(client, "10.65.2.2", 8080)
        assert packets(tmp_path / "mixed.pcap", "udp port 4789"), "over VXLAN"
        assert not packets(tmp_path / "mixed.pcap", "udp port 51820")
