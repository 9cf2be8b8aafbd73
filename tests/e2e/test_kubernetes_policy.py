"""Kubernetes NetworkPolicy through the running agent, on the Kubernetes network-policy e2e
model (kubernetes/kubernetes test/e2e/network/netpol): pods a, b and c in namespaces x, y and
z, each serving ports 80 and 81 over TCP and UDP, declared as Pods and Namespaces as kubectl
prints them (so the agent also converts Pods into endpoints). For each case the whole
reachability table (every pod to every other pod, both ports, both protocols) is probed with
real packets and compared with the table the Kubernetes model expects. The cluster-scoped
API (ClusterNetworkPolicy, and the older AdminNetworkPolicy) runs in the same harness, on
that model and on the network-policy-api conformance suite's four namespaces.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import attrs
import pytest

from pyfelix.resources.k8s_conversion import veth_name
from tests.e2e.cluster import Cluster, manifest, program
from tests.e2e.kube import KubeDatastore

pytestmark = [pytest.mark.netns, pytest.mark.both_modes]

PROTOCOLS = ("tcp", "udp")
Pod = tuple[str, str]
Probe = tuple[Pod, Pod, str, int]


@attrs.frozen
class Topology:
    """Namespaces of pods, each pod serving ``ports`` over TCP and UDP."""

    namespaces: tuple[str, ...]
    pods: tuple[str, ...]
    ports: tuple[int, ...]

    def address(self, pod: Pod) -> str:
        return f"10.65.{self.namespaces.index(pod[0]) + 1}.{self.pods.index(pod[1]) + 2}"

    @property
    def all_pods(self) -> list[Pod]:
        return [(ns, name) for ns in self.namespaces for name in self.pods]

    def objects(self) -> str:
        """Namespaces and Pods as the API server would hand them out (status included)."""
        docs = [manifest("base-config.yaml").strip().removesuffix("---")]
        for ns in self.namespaces:
            docs.append(
                f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: "
                f"{{ns: {ns}, kubernetes.io/metadata.name: {ns}}}}}\n"
            )
        for ns, name in self.all_pods:
            ports = ", ".join(
                f"{{name: serve-{p}-{proto}, containerPort: {p}, protocol: {proto.upper()}}}"
                for p in self.ports
                for proto in PROTOCOLS
            )
            address = self.address((ns, name))
            docs.append(
                f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{pod: {name}}}}}
spec:
  nodeName: node
  containers: [{{name: cont, image: agnhost, ports: [{ports}]}}]
status:
  phase: Running
  podIP: {address}
  podIPs: [{{ip: {address}}}]
"""
            )
        return "\n---\n".join(docs)


#: The Kubernetes netpol e2e model.
NETPOL = Topology(("x", "y", "z"), ("a", "b", "c"), (80, 81))


class Model:
    """The pods wired into one demo node, the agent running over the manifests in ``root``."""

    def __init__(
        self,
        stack: ExitStack,
        root: Path,
        topology: Topology = NETPOL,
        api: KubeDatastore | None = None,
    ) -> None:
        self.topology = topology
        self.root = root
        #: The objects go through this API server instead of files, when given.
        self.api = api
        self.write("cluster", topology.objects())
        self.cluster = Cluster(stack, root)
        for pod in topology.all_pods:
            self.cluster.add_workload(veth_name(*pod), topology.address(pod))
        ports = [str(p) for p in topology.ports]
        for pod in topology.all_pods:
            namespace = self.cluster.workloads[topology.address(pod)]
            self.cluster.serve(namespace, program("netpol_server.py"), *ports)
        # The agent's log goes beside the datastore (a line written into it would wake the
        # file syncer), and into the message of a case that never converges.
        self.log = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "agent.log"
        datastore = "" if api is None else api.datastore(stack, self.cluster.node)
        self.cluster.start_agent(datastore, log=self.log)

    def write(self, name: str, text: str) -> None:
        """Replace what was written under ``name`` with the objects of ``text``."""
        if self.api is None:
            (self.root / f"{name}.yaml").write_text(text)
        else:
            self.api.replace(name, text)

    def probes(self) -> list[Probe]:
        pods = self.topology.all_pods
        return [
            (src, dst, proto, port)
            for src in pods
            for dst in pods
            if src != dst
            for port in self.topology.ports
            for proto in PROTOCOLS
        ]

    def probe_all(self) -> dict[Probe, bool]:
        """Every pod to every other pod, all ports and protocols, sources side by side."""
        address = self.topology.address
        running = {}
        for source in self.topology.all_pods:
            targets = [
                f"{proto}:{address(dst)}:{port}"
                for s, dst, proto, port in self.probes()
                if s == source
            ]
            namespace = self.cluster.workloads[address(source)]
            running[source] = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    namespace,
                    sys.executable,
                    program("netpol_probe.py"),
                    *targets,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        by_address = {address(pod): pod for pod in self.topology.all_pods}
        table: dict[Probe, bool] = {}
        for source, process in running.items():
            out, _ = process.communicate()
            for line in out.splitlines():
                target, answer = line.split()
                proto, ip, port = target.split(":")
                table[(source, by_address[ip], proto, int(port))] = answer == "yes"
        return table

    def expect(
        self, policies: str, allowed: Callable[[Probe], bool], timeout: float = 10.0
    ) -> None:
        """Apply ``policies`` (replacing the previous case's) and wait for the table."""
        self.write("policy", policies)
        expected = {probe: allowed(probe) for probe in self.probes()}
        deadline = time.monotonic() + timeout
        while True:
            table = self.probe_all()
            if table == expected:
                return
            if time.monotonic() > deadline:
                wrong = sorted(k for k in expected if table.get(k) != expected[k])
                tail = "\n".join(self.log.read_text().splitlines()[-40:])
                raise AssertionError(
                    f"{len(wrong)} probes differ, e.g. {wrong[:6]}; the agent's log ends:\n{tail}"
                )
            time.sleep(0.2)


def policy(namespace: str, name: str, spec: str) -> str:
    return (
        f"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{spec}\n---\n"
    )


def test_kubernetes_network_policy_model(tmp_path: Path) -> None:
    with ExitStack() as stack:
        netpol_cases(Model(stack, tmp_path))


def netpol_cases(model: Model) -> None:
    """The Kubernetes netpol e2e cases, one after another, on ``model``."""
    # No policy: everything reaches everything.
    model.expect("", lambda probe: True)
    # default-deny-ingress in x: nothing reaches x's pods, x's pods reach the rest.
    model.expect(
        policy("x", "deny-ingress", "  podSelector: {}\n  policyTypes: [Ingress]"),
        lambda p: p[1][0] != "x",
    )
    # From one pod of another namespace only (podSelector and namespaceSelector in one
    # peer), on TCP 80 only.
    model.expect(
        policy(
            "x",
            "allow-y-b",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}},"
            " podSelector: {matchLabels: {pod: b}}}], ports: [{port: 80}]}]",
        ),
        lambda p: p[1] != ("x", "a") or (p[0] == ("y", "b") and p[2:] == ("tcp", 80)),
    )
    # A named port (the pods' serve-81-tcp) from everywhere.
    model.expect(
        policy(
            "x",
            "named",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  policyTypes: [Ingress]\n"
            "  ingress: [{ports: [{port: serve-81-tcp}]}]",
        ),
        lambda p: p[1] != ("x", "a") or p[2:] == ("tcp", 81),
    )
    # A range with endPort, UDP only, from pods of namespaces labelled ns in (y, z).
    model.expect(
        policy(
            "x",
            "udp-range",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: ns,"
            " operator: In, values: [y, z]}]}}],"
            " ports: [{protocol: UDP, port: 80, endPort: 81}]}]",
        ),
        lambda p: p[1] != ("x", "a") or (p[0][0] != "x" and p[2] == "udp"),
    )
    # A podSelector peer without a namespaceSelector means the policy's own namespace.
    model.expect(
        policy("x", "same-ns", "  podSelector: {}\n  ingress: [{from: [{podSelector: {}}]}]"),
        lambda p: p[1][0] != "x" or p[0][0] == "x",
    )
    # Stacked policies on one pod add up (a union of what each allows).
    model.expect(
        policy(
            "x",
            "from-y-80",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}],"
            " ports: [{port: 80}]}]",
        )
        + policy(
            "x",
            "from-z-81",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: z}}}],"
            " ports: [{port: 81}]}]",
        ),
        lambda p: (
            p[1] != ("x", "a")
            or (p[0][0] == "y" and p[2:] == ("tcp", 80))
            or (p[0][0] == "z" and p[2:] == ("tcp", 81))
        ),
    )
    # Egress on one named port (the destination pods' serve-80-udp), and ingress and
    # egress in one policy.
    model.expect(
        policy(
            "x",
            "egress-named",
            "  podSelector: {matchLabels: {pod: a}}\n"
            "  policyTypes: [Egress]\n"
            "  egress: [{ports: [{protocol: UDP, port: serve-80-udp}]}]",
        )
        + policy(
            "y",
            "both",
            "  podSelector: {matchLabels: {pod: b}}\n"
            "  policyTypes: [Ingress, Egress]\n"
            "  ingress: [{from: [{podSelector: {matchLabels: {pod: c}}}]}]\n"
            "  egress: [{to: [{namespaceSelector: {matchLabels: {ns: z}}}]}]",
        ),
        lambda p: (
            (p[0] != ("x", "a") or p[2:] == ("udp", 80))
            and (p[1] != ("y", "b") or p[0] == ("y", "c"))
            and (p[0] != ("y", "b") or p[1][0] == "z")
        ),
    )
    # default-deny-egress in x, and egress from z/c by ipBlock with an exception.
    model.expect(
        policy("x", "deny-egress", "  podSelector: {}\n  policyTypes: [Egress]")
        + policy(
            "z",
            "egress-cidr",
            "  podSelector: {matchLabels: {pod: c}}\n"
            "  policyTypes: [Egress]\n"
            "  egress: [{to: [{ipBlock: {cidr: 10.65.0.0/16, except: [10.65.2.0/24]}}]}]",
        ),
        lambda p: p[0][0] != "x" and not (p[0] == ("z", "c") and p[1][0] == "y"),
    )


def cluster_policy(name: str, tier: str, priority: int, spec: str) -> str:
    return (
        f"apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n"
        f"metadata: {{name: {name}}}\nspec:\n  tier: {tier}\n  priority: {priority}\n"
        f"{spec}\n---\n"
    )


def test_cluster_network_policy_tiers(tmp_path: Path) -> None:
    """ClusterNetworkPolicy around NetworkPolicy, as Calico orders them: Admin (kube-admin)
    first, where Accept and Deny are final and Pass hands over to the namespaces'
    NetworkPolicies; Baseline (kube-baseline) last, for what no NetworkPolicy selected."""
    with ExitStack() as stack:
        model = Model(stack, tmp_path)
        model.expect("", lambda probe: True)
        # An Admin Deny cannot be overridden by a NetworkPolicy allowing everything.
        model.expect(
            cluster_policy(
                "deny-y-to-x",
                "Admin",
                10,
                "  subject: {namespaces: {matchLabels: {ns: x}}}\n"
                "  ingress: [{name: no-y, action: Deny,"
                " from: [{namespaces: {matchLabels: {ns: y}}}]}]",
            )
            + policy("x", "allow-all", "  podSelector: {}\n  ingress: [{}]"),
            lambda p: not (p[0][0] == "y" and p[1][0] == "x"),
        )
        # Accept from z on TCP 80 is final; Pass for y reaches x's default-deny NetworkPolicy.
        model.expect(
            cluster_policy(
                "admin",
                "Admin",
                20,
                "  subject: {namespaces: {matchLabels: {ns: x}}}\n"
                "  ingress:\n"
                "  - {action: Accept, from: [{namespaces: {matchLabels: {ns: z}}}],"
                " protocols: [{tcp: {destinationPort: {number: 80}}}]}\n"
                "  - {action: Pass, from: [{namespaces: {matchLabels: {ns: y}}}]}",
            )
            + policy("x", "deny-ingress", "  podSelector: {}\n  policyTypes: [Ingress]"),
            lambda p: p[1][0] != "x" or (p[0][0] == "z" and p[2:] == ("tcp", 80)),
        )
        # Two Admin policies disagree: the lower priority number is evaluated first, as the
        # network-policy-api conformance cases require (Accept at 5 beats Deny at 50).
        model.expect(
            cluster_policy(
                "deny-y",
                "Admin",
                50,
                "  subject: {namespaces: {matchLabels: {ns: x}}}\n"
                "  ingress: [{action: Deny, from: [{namespaces: {matchLabels: {ns: y}}}]}]",
            )
            + cluster_policy(
                "accept-y-b",
                "Admin",
                5,
                "  subject: {pods: {namespaceSelector: {matchLabels: {ns: x}},"
                " podSelector: {matchLabels: {pod: a}}}}\n"
                "  ingress: [{action: Accept, from: [{pods: {namespaceSelector: {matchLabels:"
                " {ns: y}}, podSelector: {matchLabels: {pod: b}}}}]}]",
            ),
            lambda p: not (p[0][0] == "y" and p[1][0] == "x") or p[:2] == (("y", "b"), ("x", "a")),
        )
        # Baseline denies z's ingress from everywhere; x's NetworkPolicy decides for x first.
        model.expect(
            cluster_policy(
                "baseline",
                "Baseline",
                1,
                "  subject: {namespaces: {}}\n"
                "  ingress: [{action: Deny, from: [{namespaces: {}}]}]",
            )
            + policy(
                "x",
                "from-y-81",
                "  podSelector: {}\n"
                "  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}],"
                " ports: [{port: 81}]}]",
            )
            + policy("y", "open", "  podSelector: {}\n  ingress: [{}]"),
            lambda p: (
                (p[1][0] == "x" and p[0][0] == "y" and p[2:] == ("tcp", 81)) or p[1][0] == "y"
            ),
        )


def admin_policy(kind: str, name: str, spec: str) -> str:
    return (
        f"apiVersion: policy.networking.k8s.io/v1alpha1\nkind: {kind}\n"
        f"metadata: {{name: {name}}}\nspec:\n{spec}\n---\n"
    )


def test_admin_network_policy_v1alpha1(tmp_path: Path) -> None:
    """The older AdminNetworkPolicy and BaselineAdminNetworkPolicy, as Calico 3.29-3.31 ran
    them: an Admin Deny final, an Admin Pass down to the NetworkPolicies, the baseline for
    what no NetworkPolicy selected."""
    with ExitStack() as stack:
        model = Model(stack, tmp_path)
        model.expect(
            admin_policy(
                "AdminNetworkPolicy",
                "guard",
                "  priority: 10\n"
                "  subject: {namespaces: {matchLabels: {ns: x}}}\n"
                "  ingress:\n"
                "  - {action: Deny, from: [{namespaces: {matchLabels: {ns: y}}}],"
                " ports: [{portNumber: {port: 80}}]}\n"
                "  - {action: Pass, from: [{namespaces: {matchLabels: {ns: z}}}]}",
            )
            + admin_policy(
                "BaselineAdminNetworkPolicy",
                "default",
                "  subject: {namespaces: {}}\n"
                "  ingress: [{action: Deny, from: [{namespaces: {matchLabels: {ns: z}}}]}]",
            )
            + policy("y", "open", "  podSelector: {}\n  ingress: [{}]"),
            lambda p: (
                not (
                    (p[0][0] == "y" and p[1][0] == "x" and p[2:] == ("tcp", 80))
                    or (p[0][0] == "z" and p[1][0] in ("x", "z"))
                )
            ),
        )


#: The network-policy-api conformance suite's layout (kubernetes-sigs/network-policy-api
#: conformance/base/manifests.yaml): four namespaces of two pods, servers on 80 and 8080.
HOUSES = Topology(("gryffindor", "slytherin", "hufflepuff", "ravenclaw"), ("p0", "p1"), (80, 8080))


def from_house(house: str) -> str:
    return f"[{{namespaces: {{matchLabels: {{kubernetes.io/metadata.name: {house}}}}}}}]"


TCP_80 = ", protocols: [{tcp: {destinationPort: {number: 80}}}]"


def ingress_tcp_rules(order: list[int], tier: str = "Admin") -> str:
    """The conformance suite's ingress-TCP cases (CNPAdminTierIngressTCP and its Baseline
    counterpart) on gryffindor, with its rules in ``order`` (the suite reorders them)."""
    rules = [
        f"{{name: allow-ravenclaw, action: Accept, from: {from_house('ravenclaw')}}}",
        f"{{name: deny-ravenclaw, action: Deny, from: {from_house('ravenclaw')}}}",
        f"{{name: pass-ravenclaw, action: Pass, from: {from_house('ravenclaw')}}}",
        f"{{name: deny-slytherin-80, action: Deny, from: {from_house('slytherin')}{TCP_80}}}",
        f"{{name: pass-slytherin-80, action: Pass, from: {from_house('slytherin')}{TCP_80}}}",
        f"{{name: allow-hufflepuff-80, action: Accept, from: {from_house('hufflepuff')}{TCP_80}}}",
        f"{{name: deny-hufflepuff, action: Deny, from: {from_house('hufflepuff')}}}",
    ]
    if tier == "Baseline":
        rules = [rules[i] for i in (0, 1, 3, 5, 6)]
    body = "\n".join(f"  - {rules[i]}" for i in order)
    return cluster_policy(
        "ingress-tcp",
        tier,
        3,
        "  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: gryffindor}}}\n"
        f"  ingress:\n{body}",
    )


def test_network_policy_api_conformance_ingress_tcp(tmp_path: Path) -> None:
    """CNPAdminTierIngressTCP's steps (first matching rule decides, in order; Pass falls
    through to the absent NetworkPolicies, so it allows; egress is untouched), then the
    Baseline tier's counterpart."""
    with ExitStack() as stack:
        model = Model(stack, tmp_path, HOUSES)

        def to_gryffindor(allowed: Callable[[str, str, int], bool]) -> Callable[[Probe], bool]:
            return lambda p: p[1][0] != "gryffindor" or allowed(p[0][0], p[2], p[3])

        def declared(house: str, proto: str, port: int) -> bool:
            if house == "slytherin":
                return (proto, port) != ("tcp", 80)
            if house == "hufflepuff":
                return (proto, port) == ("tcp", 80)
            return True

        model.expect(ingress_tcp_rules([0, 1, 2, 3, 4, 5, 6]), to_gryffindor(declared))
        # Deny before Accept for ravenclaw: denied.
        model.expect(
            ingress_tcp_rules([1, 0, 2, 3, 4, 5, 6]),
            to_gryffindor(lambda h, pr, po: h != "ravenclaw" and declared(h, pr, po)),
        )
        # Pass first for ravenclaw, and for slytherin on TCP 80: both go through.
        model.expect(
            ingress_tcp_rules([2, 0, 1, 4, 3, 5, 6]),
            to_gryffindor(lambda h, pr, po: h != "hufflepuff" or (pr, po) == ("tcp", 80)),
        )
        # The Baseline tier: the same first-match rules, after (absent) NetworkPolicies.
        model.expect(ingress_tcp_rules([0, 1, 2, 3, 4], "Baseline"), to_gryffindor(declared))
