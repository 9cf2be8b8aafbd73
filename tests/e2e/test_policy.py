"""Policy through the running agent: selectors on namespaces and network sets with live edits,
tiers, services in rules, natOutgoing, dual-stack workloads."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.pods import SERVER, connects
from tests.e2e.cluster import (
    CLIENT_IP,
    CLIENT_IP6,
    DEFAULT_TIER,
    EGRESS,
    MANIFESTS,
    OTHER_NAMESPACE,
    OUTSIDER_IP,
    POLICY,
    POOL,
    SEMANTICS,
    SERVER_IP,
    SERVER_IP6,
    SERVICE,
    TIERS,
    Cluster,
    filter_rules,
    seconds_until,
    server_client_outsider,
    workload,
)
from tests.netns import eventually, run_in

pytestmark = [pytest.mark.netns, pytest.mark.both_modes]


def test_policy_semantics_and_live_edits(tmp_path: Path) -> None:
    """Through the running agent: a global ingress policy on namespace labels, a namespaced
    egress policy on a network set; each edit (policy deleted or re-added, a workload's or
    a namespace's labels changed) takes effect within a second."""
    config = MANIFESTS.partition("---")[0]
    server = workload("server", "app", "server", "calisrv", SERVER_IP)
    outsider = workload("outsider", "other", "client", "calioth", OUTSIDER_IP)
    (tmp_path / "base.yaml").write_text("---".join((config, SEMANTICS, server, outsider)))
    (tmp_path / "client.yaml").write_text(workload("client", "app", "client", "calicli", CLIENT_IP))
    (tmp_path / "other.yaml").write_text(OTHER_NAMESPACE.replace("TEAM", "red"))
    (tmp_path / "egress.yaml").write_text(EGRESS)
    with ExitStack() as stack:
        cluster = server_client_outsider(stack, tmp_path)

        def client(port: int) -> Callable[[], bool]:
            return lambda: cluster.connects(CLIENT_IP, SERVER_IP, port)

        def client_denied(port: int) -> Callable[[], bool]:
            return lambda: not cluster.connects(CLIENT_IP, SERVER_IP, port)

        assert eventually(client(8080)), "never programmed"
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090), "egress deny via network set"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 8080), "namespace not blue"

        def pings(source: str, destination: str) -> bool:
            namespace = cluster.workloads[source]
            return run_in(namespace, "ping", "-c1", "-W1", destination).returncode == 0

        assert not pings(CLIENT_IP, SERVER_IP), "the server's policy admits TCP only"
        # With no types and no egress rules, the policy governs ingress only (as calicoctl
        # defaults it), so the server's egress falls to its open profile.
        assert pings(SERVER_IP, CLIENT_IP)

        (tmp_path / "egress.yaml").unlink()
        assert seconds_until(client(9090)) < 1.0, "deleting the policy restores access"

        (tmp_path / "egress.yaml").write_text(EGRESS)
        assert seconds_until(client_denied(9090)) < 1.0, "re-adding the policy denies again"

        (tmp_path / "client.yaml").write_text(
            workload("client", "app", "batch", "calicli", CLIENT_IP)
        )
        assert seconds_until(client(9090)) < 1.0, "the policy no longer selects the client"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)

        (tmp_path / "other.yaml").write_text(OTHER_NAMESPACE.replace("TEAM", "blue"))
        assert seconds_until(lambda: cluster.connects(OUTSIDER_IP, SERVER_IP, 8080)) < 1.0
        assert cluster.agent is not None
        assert cluster.agent.poll() is None


def test_tiers_pass_and_end_of_tier_drop(tmp_path: Path) -> None:
    """Through the running agent: Pass hands a flow to the next tier, which decides it; a flow
    no rule of a tier matches is dropped at the tier's end, though the profile would allow it."""
    config = MANIFESTS.partition("---")[0]
    server = workload("server", "app", "server", "calisrv", SERVER_IP)
    client = workload("client", "app", "client", "calicli", CLIENT_IP)
    outsider = workload("outsider", "app", "outsider", "calioth", OUTSIDER_IP)
    (tmp_path / "base.yaml").write_text("---".join((config, TIERS, server, client, outsider)))
    (tmp_path / "web.yaml").write_text(DEFAULT_TIER.replace("FROM", "client"))
    with ExitStack() as stack:
        cluster = server_client_outsider(stack, tmp_path)

        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "Pass, then Allow"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 9090), "allowed in the first tier"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 8080), "end of the security tier"
        assert not cluster.connects(OUTSIDER_IP, SERVER_IP, 9090)

        # The default tier now admits nobody: the passed flow meets its end-of-tier drop.
        (tmp_path / "web.yaml").write_text(DEFAULT_TIER.replace("FROM", "nobody"))
        assert seconds_until(lambda: not cluster.connects(CLIENT_IP, SERVER_IP, 8080)) < 1.0
        assert cluster.connects(CLIENT_IP, SERVER_IP, 9090)


def test_dual_stack_workloads(tmp_path: Path) -> None:
    """Workloads with IPv4 and IPv6 addresses: routed and policed in both families (the
    policy's source selector becomes an IPv4 and an IPv6 set), each pod reaching the node as
    Calico wires IPv6 pods (default route via the host interface's link-local address)."""
    dual = MANIFESTS.replace("[10.65.0.2/32]", f"[10.65.0.2/32, '{SERVER_IP6}/128']")
    dual = dual.replace("[10.65.0.3/32]", f"[10.65.0.3/32, '{CLIENT_IP6}/128']")
    (tmp_path / "base.yaml").write_text(dual)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        node = cluster.node
        run_in(node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        run_in(node, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        for interface, address in (("calisrv", SERVER_IP6), ("calicli", CLIENT_IP6)):
            pod = cluster.workloads[SERVER_IP if interface == "calisrv" else CLIENT_IP]
            shown = run_in(node, "ip", "-6", "addr", "show", "dev", interface, "scope", "link")
            gateway = shown.stdout.split("inet6 ")[1].split("/")[0]
            run_in(pod, "ip", "-6", "addr", "add", f"{address}/128", "dev", "eth0", "nodad")
            route = ("default", "via", gateway, "dev", "eth0")
            assert run_in(pod, "ip", "-6", "route", "add", *route).returncode == 0
        cluster.start_agent()

        def client6(port: int) -> bool:
            return connects(cluster.workloads[CLIENT_IP], SERVER_IP6, port)

        assert eventually(lambda: client6(8080)), run_in(node, "ip", "-6", "route").stdout
        assert not client6(9090), "IPv6 policy enforced"
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
        routes = run_in(node, "ip", "-6", "route", "show", "proto", "boot").stdout
        assert f"{SERVER_IP6} dev calisrv" in routes
        ndp = run_in(node, "cat", "/proc/sys/net/ipv6/conf/calisrv/proxy_ndp").stdout
        assert ndp.strip() == "1"


@pytest.mark.parametrize("nat", [True, False])
def test_nat_outgoing(cluster: Cluster, nat: bool) -> None:
    """A pool with natOutgoing: pods reach a network that has no route back to the pool,
    their traffic masqueraded to the node's address; without it, they cannot."""
    (cluster.manifests / "pool.yaml").write_text(POOL.replace("NAT", str(nat).lower()))
    outside = cluster.demo.outside
    cluster.serve(outside, SERVER, "7777")
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"

    def reaches_outside() -> bool:
        pod = cluster.workloads[CLIENT_IP]
        return connects(pod, "192.0.2.2", 7777)

    if nat:
        assert eventually(reaches_outside)
    else:
        time.sleep(1)
        assert not reaches_outside()


def test_egress_to_a_service(cluster: Cluster) -> None:
    """A rule naming a Kubernetes service matches its endpoints' addresses and ports (from
    EndpointSlices); when the slice's port changes, so does what the rule allows."""
    (cluster.manifests / "service.yaml").write_text(SERVICE.replace("PORT", "8080"))
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)

    (cluster.manifests / "service.yaml").write_text(SERVICE.replace("PORT", "9090"))
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=5)
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)


def group_policy(index: int, rule: str) -> str:
    return (
        "---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\n"
        f"metadata: {{name: grouped-{index}, namespace: app}}\n"
        f'spec: {{order: {index}, selector: app == "server", types: [Ingress],'
        f" ingress: [{rule}]}}\n"
    )


def test_policies_sharing_a_selector_decide_through_their_group_chain(
    cluster: Cluster, dataplane_mode: str
) -> None:
    """Seven policies with one selector, as Felix groups them: the endpoint jumps once into a
    cali-gi- chain, which jumps to each policy until one decides, with a return on a verdict
    every fifth jump. The third denies 9090, the seventh allows everything: 9090 is refused,
    8080 gets through the return after the fifth."""
    rules = ["{action: Allow, protocol: UDP}"] * 7
    rules[2] = "{action: Deny, protocol: TCP, destination: {ports: [9090]}}"
    rules[6] = "{action: Allow}"
    (cluster.manifests / "grouped.yaml").write_text(
        "".join(group_policy(i + 1, rule) for i, rule in enumerate(rules))
    )
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
    chains = filter_rules(cluster.node, dataplane_mode)
    groups = [name for name in chains if name.startswith("cali-gi-")]
    assert len(groups) == 1
    (group,) = groups
    endpoint = chains["cali-tw-calisrv"]
    assert sum(f"{group} " in f"{line} " for line in endpoint) == 1
    assert not any("cali-pi-np/app/grouped" in line for line in endpoint)
    assert len(chains[group]) == 7 + 1, "seven jumps and one return"


REFUSED_PROBE = """
import socket, sys, time
started = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except ConnectionRefusedError:
    print(f"refused {time.monotonic() - started:.2f}")
except OSError as exc:
    print(f"failed {type(exc).__name__}")
"""


def test_filter_deny_action_reject(tmp_path: Path, dataplane_mode: str) -> None:
    """IptablesFilterDenyAction (NftablesFilterDenyAction in the nftables mode) Reject: a
    connection no policy allows is refused at once (the client learns it is not allowed)
    instead of timing out."""
    prefix = "nftables" if dataplane_mode == "nftables" else "iptables"
    config = MANIFESTS.partition("---")[0].replace(
        "spec:\n", f"spec:\n  {prefix}FilterDenyAction: Reject\n", 1
    )
    (tmp_path / "base.yaml").write_text("---".join((config, *MANIFESTS.split("---")[1:])))
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    with ExitStack() as stack:
        cluster = server_client_outsider(stack, tmp_path)
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        client = cluster.workloads[CLIENT_IP]

        def probe() -> str:
            argv = [sys.executable, "-c", REFUSED_PROBE, SERVER_IP, "9090"]
            return run_in(client, *argv).stdout.strip()

        assert eventually(lambda: probe().startswith("refused")), probe()
        assert float(probe().split()[1]) < 1.0


PEER_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(16)
print("ready", flush=True)
while True:
    c, peer = s.accept(); c.sendall(f"{peer[0]}:{peer[1]}".encode()); c.close()
"""
PEER_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
print(c.recv(64).decode())
"""


def test_nat_outgoing_address_and_port_range(cluster: Cluster) -> None:
    """NATOutgoingAddress and NATPortRange: the far end sees the pod's connection come from
    that address (not the node's uplink address) and from a port in that range."""
    config = (cluster.manifests / "base.yaml").read_text()
    config = config.replace(
        "spec:\n", "spec:\n  natOutgoingAddress: 192.0.2.77\n  natPortRange: 40000:40010\n", 1
    )
    (cluster.manifests / "base.yaml").write_text(config)
    (cluster.manifests / "pool.yaml").write_text(POOL.replace("NAT", "true"))
    run_in(cluster.node, "ip", "addr", "add", "192.0.2.77/24", "dev", "eth0")
    cluster.serve(cluster.demo.outside, PEER_SERVER, "7777")
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    pod = cluster.workloads[CLIENT_IP]

    def seen_from() -> str:
        return run_in(pod, sys.executable, "-c", PEER_CLIENT, "192.0.2.2", "7777").stdout.strip()

    assert eventually(lambda: seen_from().startswith("192.0.2.77:")), seen_from()
    _, port = seen_from().split(":")
    assert 40000 <= int(port) <= 40010


SERVICE_CIDRS = """
apiVersion: projectcalico.org/v3
kind: BGPConfiguration
metadata: {name: default}
spec:
  serviceClusterIPs: [{cidr: 10.96.0.0/12}]
"""


@pytest.mark.parametrize("prevention", ["Drop", "Disabled"])
def test_service_loop_prevention(cluster: Cluster, prevention: str) -> None:
    """ServiceLoopPrevention: forwarded traffic to a service CIDR address no kube-proxy
    translated (here, one the upstream network answers on) is dropped; Disabled lets it out."""
    config = (cluster.manifests / "base.yaml").read_text()
    config = config.replace("spec:\n", f"spec:\n  serviceLoopPrevention: {prevention}\n", 1)
    (cluster.manifests / "base.yaml").write_text(config)
    (cluster.manifests / "pool.yaml").write_text(POOL.replace("NAT", "true"))
    (cluster.manifests / "bgp.yaml").write_text(SERVICE_CIDRS)
    outside = cluster.demo.outside
    run_in(outside, "ip", "addr", "add", "10.96.0.99/32", "dev", "eth0")
    cluster.serve(outside, SERVER, "7777")
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    pod = cluster.workloads[CLIENT_IP]
    assert eventually(lambda: connects(pod, "192.0.2.2", 7777)), "NAT outgoing works"
    if prevention == "Drop":
        time.sleep(1)
        assert not connects(pod, "10.96.0.99", 7777)
    else:
        assert eventually(lambda: connects(pod, "10.96.0.99", 7777))


@pytest.mark.parametrize("floating", ["Enabled", "Disabled"])
def test_floating_ips(cluster: Cluster, floating: str) -> None:
    """FloatingIPs Enabled: a workload's ipNAT external address (held by the node) reaches
    the workload from outside; Disabled, it does not."""
    base = (cluster.manifests / "base.yaml").read_text()
    base = base.replace("spec:\n", f"spec:\n  floatingIPs: {floating}\n", 1).replace(
        "ipNetworks: [10.65.0.2/32],",
        "ipNetworks: [10.65.0.2/32], ipNATs: [{internalIP: 10.65.0.2, externalIP: 192.0.2.100}],",
    )
    (cluster.manifests / "base.yaml").write_text(base)
    run_in(cluster.node, "ip", "addr", "add", "192.0.2.100/24", "dev", "eth0")
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    outside = cluster.demo.outside
    if floating == "Enabled":
        assert eventually(lambda: connects(outside, "192.0.2.100", 8080))
    else:
        time.sleep(1)
        assert not connects(outside, "192.0.2.100", 8080)
