"""Real packets through rendered rules: workloads in their own namespaces behind veth pairs,
the node's rules loaded from the dry-run output, TCP and ICMP deciding what gets through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources import Resource, load_text
from tests.workloads import OPEN_PROFILE, Node, calico_node

pytestmark = pytest.mark.netns

SERVER, CLIENT = "10.65.0.2", "10.65.0.3"
BASE = (
    OPEN_PROFILE
    + """---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node-k8s-server-eth0
  namespace: app
  labels: {app: server}
spec:
  orchestrator: k8s
  node: node
  pod: server
  endpoint: eth0
  interfaceName: calisrv
  ipNetworks: [10.65.0.2/32]
  profiles: [open]
  ports:
  - {name: http, protocol: TCP, port: 8080, hostPort: 0, hostIP: ""}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node-k8s-client-eth0
  namespace: app
  labels: {app: client}
spec:
  orchestrator: k8s
  node: node
  pod: client
  endpoint: eth0
  interfaceName: calicli
  ipNetworks: [10.65.0.3/32]
  profiles: [open]
"""
)


def resources(extra: str) -> list[Resource]:
    result = load_text(BASE + "---\n" + extra)
    assert result.ok, result.problems
    return [item.resource for item in result.resources]


@pytest.fixture
def node() -> Iterator[Node]:
    with calico_node() as node:
        node.add_workload("calisrv", SERVER, [8080, 9090])
        node.add_workload("calicli", CLIENT)
        yield node


def program(node: Node, policies: str) -> None:
    view, _ = compute(resources(policies), "node")
    node.load(view["ipset_restore"], view["iptables"]["ipv4"])


def test_profiles_alone_allow(node: Node) -> None:
    """With only the allow-all profile, traffic flows (the harness itself works)."""
    program(node, "")
    assert node.connects(CLIENT, SERVER, 8080)
    assert node.connects(CLIENT, SERVER, 9090)
    assert node.pings(CLIENT, SERVER)


def test_named_port_admits_only_that_port(node: Node) -> None:
    """A rule allowing the named port "http" opens 8080 and nothing else."""
    program(
        node,
        """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: app}
spec:
  selector: app == "server"
  ingress:
  - action: Allow
    protocol: TCP
    destination: {ports: [http]}
""",
    )
    assert node.connects(CLIENT, SERVER, 8080)
    assert not node.connects(CLIENT, SERVER, 9090)


@pytest.mark.parametrize(
    ("excluded", "allowed"), [("10.65.0.3/32", False), ("10.65.0.99/32", True)]
)
def test_not_nets(node: Node, excluded: str, allowed: bool) -> None:
    """notNets carves an exception out of nets."""
    program(
        node,
        f"""
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {{name: nets, namespace: app}}
spec:
  selector: app == "server"
  ingress:
  - action: Allow
    protocol: TCP
    source: {{nets: [10.0.0.0/8], notNets: ["{excluded}"]}}
""",
    )
    assert node.connects(CLIENT, SERVER, 8080) is allowed


TIERS = """
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: first}
spec: {order: 10}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: first.pass-web}
spec:
  tier: first
  selector: app == "server"
  ingress:
  - action: Pass
    protocol: TCP
    destination: {ports: [8080]}
"""


def test_pass_goes_to_next_tier_and_end_of_tier_drops(node: Node) -> None:
    """Pass hands 8080 to the next tier, which allows it; 9090 matches nothing in the first
    tier and is dropped at its end, never reaching the allow-all of the next tier."""
    program(
        node,
        TIERS
        + """
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: allow-all, namespace: app}
spec:
  selector: app == "server"
  ingress: [{action: Allow}]
""",
    )
    assert node.connects(CLIENT, SERVER, 8080)
    assert not node.connects(CLIENT, SERVER, 9090)


def test_pass_tier_default_action(node: Node) -> None:
    """A tier whose default action is Pass lets unmatched traffic on to the next tier."""
    program(node, TIERS.replace("spec: {order: 10}", "spec: {order: 10, defaultAction: Pass}"))
    assert node.connects(CLIENT, SERVER, 9090)


@pytest.mark.parametrize(("icmp_type", "answered"), [(8, True), (13, False)])
def test_icmp_type(node: Node, icmp_type: int, answered: bool) -> None:
    """Only the ICMP type the rule names gets through: echo request (8) or timestamp (13)."""
    program(
        node,
        f"""
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {{name: icmp, namespace: app}}
spec:
  selector: app == "server"
  ingress:
  - action: Allow
    protocol: ICMP
    icmp: {{type: {icmp_type}}}
""",
    )
    assert node.pings(CLIENT, SERVER) is answered
    assert not node.connects(CLIENT, SERVER, 8080)
