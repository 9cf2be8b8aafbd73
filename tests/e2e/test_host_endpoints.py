"""Traffic to and through the node: DefaultEndpointToHostAction, host endpoints with failsafe
ports, applyOnForward and pre-DNAT policy on forwarded traffic, untracked policy."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.pods import SERVER, connects
from tests.e2e.cluster import (
    CLIENT_IP,
    FORWARD_POLICY,
    HOST_ENDPOINT,
    MANIFESTS,
    SERVER_IP,
    UNTRACKED,
    Cluster,
    host_facing_cluster,
)
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns


@pytest.mark.both_modes
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


@pytest.mark.both_modes
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


@pytest.mark.both_modes
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


EGRESS_POLICY = """
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: uplink-egress}
spec:
  selector: role == "uplink"
  types: [Egress]
  egress:
  - {action: Deny, protocol: TCP, destination: {ports: [7001]}}
  - {action: Allow}
"""


def test_host_endpoint_egress_policy_applies_to_dnatted_host_traffic(tmp_path: Path) -> None:
    """As Felix: the node's own traffic that nat OUTPUT DNATs (a service address, say) gets
    the host endpoint's egress policy in mangle POSTROUTING, where the kernel has re-routed it
    (filter OUTPUT still sees the old route); before, such traffic skipped that policy."""
    (tmp_path / "base.yaml").write_text(MANIFESTS + HOST_ENDPOINT + EGRESS_POLICY)
    with ExitStack() as stack:
        cluster = host_facing_cluster(stack, tmp_path, "7777")
        outside = cluster.demo.outside
        cluster.serve(outside, SERVER, "7000", "7001")
        node = cluster.node
        # A "service" address, DNAT'd in the node's nat OUTPUT to the outside's ports.
        assert (
            run_in(node, "ip", "route", "add", "198.51.100.10/32", "via", "192.0.2.2").returncode
            == 0
        )
        for port, target in (("80", "7001"), ("81", "7000")):
            dnat = ["-t", "nat", "-A", "OUTPUT", "-d", "198.51.100.10", "-p", "tcp"]
            dnat += ["--dport", port, "-j", "DNAT", "--to-destination", f"192.0.2.2:{target}"]
            assert run_in(node, "iptables-nft", *dnat).returncode == 0
        assert connects(node, "198.51.100.10", 80), "the DNAT works before the agent runs"
        cluster.start_agent()
        assert eventually(lambda: not connects(node, "192.0.2.2", 7001)), "never programmed"
        assert connects(node, "192.0.2.2", 7000)
        assert not connects(node, "198.51.100.10", 80), "DNAT'd to 7001: the egress policy denies"
        assert connects(node, "198.51.100.10", 81), "DNAT'd to 7000: allowed"
        mangle = run_in(node, "iptables-nft-save", "-t", "mangle").stdout
        assert "--ctstate DNAT -j cali-to-host-endpoint" in mangle
