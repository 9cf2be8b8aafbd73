"""kube-proxy's IPVS mode, on Debian's stock kernel (this machine's has no ip_vs): a service
address on kube-ipvs0, forwarded by IPVS to the server pod as kube-proxy sets it up, is
policed by the server's ingress policy as Felix polices it.

IPVS forwards inside INPUT and OUTPUT: without Felix's IPVS chains the packet reaches the pod
through OUTPUT, where traffic to workloads returns unpoliced, and the policy that denies the
client directly would let it in through the service."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.pods import connects
from tests.e2e.cluster import CLIENT_IP, MANIFESTS, POLICY, SERVER_IP, Cluster
from tests.netns import eventually, run_in

pytestmark = [pytest.mark.netns, pytest.mark.stock_kernel]

SERVICE_IP, SERVICE_PORT = "10.96.0.10", 80


def must(node: str, *argv: str) -> str:
    done = run_in(node, *argv)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


def ipvs_service(node: str, backend: str, port: int) -> None:
    """What kube-proxy's IPVS mode makes for a ClusterIP service: its address on the dummy
    kube-ipvs0, a virtual server NATing to the pod, and conntrack for IPVS's connections."""
    service = f"{SERVICE_IP}:{SERVICE_PORT}"
    must(node, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
    must(node, "ip", "addr", "add", f"{SERVICE_IP}/32", "dev", "kube-ipvs0")
    must(node, "ipvsadm", "-A", "-t", service, "-s", "rr")
    must(node, "ipvsadm", "-a", "-t", service, "-r", f"{backend}:{port}", "-m")
    must(node, "sysctl", "-qw", "net.ipv4.vs.conntrack=1")


def forwarded(node: str, backend: str) -> int:
    """How many connections IPVS has sent to ``backend`` (host:port)."""
    for line in must(node, "ipvsadm", "-L", "-n", "--stats").splitlines():
        fields = line.split()
        if fields[:2] == ["->", backend]:
            return int(fields[2])
    return 0


@pytest.mark.parametrize(("allowed_port", "reachable"), [(9090, False), (8080, True)])
def test_service_traffic_through_ipvs_meets_the_server_s_ingress_policy(
    tmp_path: Path, allowed_port: int, reachable: bool
) -> None:
    """The server admits the client on ``allowed_port`` only; the service forwards to 8080.
    Through the service, the client gets what it gets directly."""
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", str(allowed_port)))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        client = cluster.workloads[CLIENT_IP]
        ipvs_service(cluster.node, SERVER_IP, 8080)
        cluster.start_agent()

        def programmed() -> bool:
            rules = must(cluster.node, "iptables-save", "-t", "filter")
            return "-A cali-INPUT" in rules and "-j cali-forward-check" in rules

        # The first apply writes every table at once: the IPVS chains with the policy.
        assert eventually(programmed)
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, allowed_port))
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080) is reachable
        if reachable:
            assert eventually(lambda: connects(client, SERVICE_IP, SERVICE_PORT))
        else:
            assert not any(connects(client, SERVICE_IP, SERVICE_PORT) for _ in range(3))
        # Either way IPVS forwarded the client's connections: the policy decided. (Its
        # counters are summed by a timer, every 2 s.)
        assert eventually(lambda: forwarded(cluster.node, f"{SERVER_IP}:8080") > 0)
