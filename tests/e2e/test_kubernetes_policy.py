"""Kubernetes NetworkPolicy through the running agent, on the Kubernetes network-policy e2e
model (kubernetes/kubernetes test/e2e/network/netpol): pods a, b and c in namespaces x, y and
z, each serving ports 80 and 81 over TCP and UDP, declared as Pods and Namespaces as kubectl
prints them (so the agent also converts Pods into endpoints). For each case the whole
reachability table (every pod to every other pod, both ports, both protocols) is probed with
real packets and compared with the table the Kubernetes model expects.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.resources.k8s_conversion import veth_name
from tests.e2e.cluster import Cluster, manifest, program

pytestmark = pytest.mark.netns

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")
PORTS = (80, 81)
PROTOCOLS = ("tcp", "udp")
Pod = tuple[str, str]
Probe = tuple[Pod, Pod, str, int]


def address(pod: Pod) -> str:
    return f"10.65.{NAMESPACES.index(pod[0]) + 1}.{PODS.index(pod[1]) + 2}"


ALL_PODS = [(ns, name) for ns in NAMESPACES for name in PODS]


def objects() -> str:
    """Namespaces and Pods as the API server would hand them out (status included)."""
    docs = [manifest("base-config.yaml").strip().removesuffix("---")]
    for ns in NAMESPACES:
        docs.append(
            f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: "
            f"{{ns: {ns}, kubernetes.io/metadata.name: {ns}}}}}\n"
        )
    for ns, name in ALL_PODS:
        ports = ", ".join(
            f"{{name: serve-{p}-{proto}, containerPort: {p}, protocol: {proto.upper()}}}"
            for p in PORTS
            for proto in PROTOCOLS
        )
        docs.append(
            f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}, labels: {{pod: {name}}}}}
spec:
  nodeName: node
  containers: [{{name: cont, image: agnhost, ports: [{ports}]}}]
status:
  phase: Running
  podIP: {address((ns, name))}
  podIPs: [{{ip: {address((ns, name))}}}]
"""
        )
    return "\n---\n".join(docs)


class Model:
    """The pods wired into one demo node, the agent running over the manifests in ``root``."""

    def __init__(self, stack: ExitStack, root: Path) -> None:
        (root / "cluster.yaml").write_text(objects())
        self.root = root
        self.cluster = Cluster(stack, root)
        for pod in ALL_PODS:
            self.cluster.add_workload(veth_name(*pod), address(pod))
        for pod in ALL_PODS:
            self.cluster.serve(
                self.cluster.workloads[address(pod)], program("netpol_server.py"), "80", "81"
            )
        self.cluster.start_agent()

    def probe_all(self) -> dict[Probe, bool]:
        """Every pod to every other pod, both ports and protocols, sources side by side."""
        running = {}
        for source in ALL_PODS:
            targets = [
                f"{proto}:{address(dst)}:{port}"
                for dst in ALL_PODS
                if dst != source
                for port in PORTS
                for proto in PROTOCOLS
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
        by_address = {address(pod): pod for pod in ALL_PODS}
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
        (self.root / "policy.yaml").write_text(policies)
        expected = {
            (src, dst, proto, port): allowed((src, dst, proto, port))
            for src in ALL_PODS
            for dst in ALL_PODS
            if src != dst
            for port in PORTS
            for proto in PROTOCOLS
        }
        deadline = time.monotonic() + timeout
        while True:
            table = self.probe_all()
            if table == expected:
                return
            if time.monotonic() > deadline:
                wrong = sorted(k for k in expected if table.get(k) != expected[k])
                raise AssertionError(f"{len(wrong)} probes differ, e.g. {wrong[:6]}")
            time.sleep(0.2)


def policy(namespace: str, name: str, spec: str) -> str:
    return (
        f"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n"
        f"metadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{spec}\n---\n"
    )


def test_kubernetes_network_policy_model(tmp_path: Path) -> None:
    with ExitStack() as stack:
        model = Model(stack, tmp_path)
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
