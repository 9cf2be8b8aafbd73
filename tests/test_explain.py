"""``pyfelix explain`` on the bundled example: what decides each flow, on each side, read
off the rules the nodes would program (the demo proves those verdicts with real traffic)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rules_harness import REPO


def explain(*argv: str, source: Path = REPO / "examples") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", "explain", str(source), *argv],
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_flow_across_nodes_is_explained_on_both_sides() -> None:
    done = explain("--from", "shop/checkout-1", "--to", "shop/payments-1", "--port", "tcp/8080")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "shop/checkout-1 (10.65.0.3) -> shop/payments-1 (10.65.1.2) tcp/8080",
        "  at node-a: allowed: egress allowed by default/shop/checkout-to-payments, rule 2",
        "    matched IP set cali40svc:0GNnzK3sCoBNdyRhbc-qR (service shop/payments): it holds"
        " 10.65.1.2",
        "  at node-b: allowed: ingress allowed by default/shop/checkout-to-payments, rule 1",
        "    matched IP set cali40s:BdQp6BHrX8O2UN3mKxmI0Ki (selector (projectcalico.org/namespace"
        ' == "shop" && app == "checkout")): it holds 10.65.0.3',
        "verdict: allowed",
    ]


@pytest.mark.parametrize(
    ("source", "destination", "port", "reason"),
    [
        ("shop/frontend-1", "shop/checkout-1", "tcp/80", "ingress dropped at the end of tier"),
        (
            "198.51.100.7",
            "shop/frontend-1",
            "tcp/8080",
            "ingress denied by security/security.block-bad-actors, rule 1",
        ),
    ],
)
def test_denials_name_what_denies_and_exit_1(
    source: str, destination: str, port: str, reason: str
) -> None:
    done = explain("--from", source, "--to", destination, "--port", port)
    assert done.returncode == 1, done.stderr
    assert reason in done.stdout
    assert done.stdout.endswith("verdict: denied\n")


def test_json_holds_the_rules_the_packet_matched() -> None:
    done = explain(
        "--from",
        "monitoring/prometheus-1",
        "--to",
        "10.65.0.2",
        "--port",
        "9100",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["allowed"] is True
    assert [side["node"] for side in report["sides"]] == ["node-b", "node-a"]
    ingress = report["sides"][1]
    assert ingress["reason"] == "ingress allowed by platform/platform.allow-dns-and-metrics, rule 1"
    assert {s["source"] for s in ingress["ip_sets"]} >= {
        "named_port metrics, protocol tcp, selector all()"
    }
    chains = [rule["chain"] for rule in ingress["rules"]]
    assert chains[0] == "FORWARD"
    # The policy's chain (its name shortened with Felix's hash) decided.
    assert any(chain.startswith("cali-pi-") for chain in chains)
    # Accepted by the rule Felix appends to FORWARD, for what policy accepted.
    assert ingress["rules"][-1]["rule"].endswith("--jump ACCEPT")
    assert chains[-1] == "FORWARD"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--from", "shop/nobody", "--to", "shop/frontend-1"], "shop/nobody is no workload"),
        (["--from", "shop/frontend-1", "--to", "shop/checkout-1", "--port", "tcp/x"], "--port"),
        (["--from", "192.0.2.1", "--to", "192.0.2.2"], "no end of the flow is a workload"),
    ],
)
def test_a_question_naming_nothing_is_a_usage_error(argv: list[str], said: str) -> None:
    done = explain(*argv)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stdout == ""


def test_the_matrix_agrees_with_each_flow_explained_alone() -> None:
    selector = "projectcalico.org/namespace in {'shop', 'monitoring'}"
    done = explain("--matrix", selector, "--port", "tcp/8080")
    assert done.returncode == 1  # some flows are denied
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    names = [row[1] for row in rows]
    assert names == [
        "monitoring/prometheus-1",
        "shop/checkout-1",
        "shop/frontend-1",
        "shop/payments-1",
    ]
    for row in rows:
        for column, cell in enumerate(row[2:]):
            if cell == "-":
                continue
            alone = explain("--from", row[1], "--to", names[column], "--port", "tcp/8080")
            assert alone.returncode == (0 if cell == "." else 1), (row[1], names[column])


@pytest.mark.parametrize(
    ("source", "destination", "port", "said"),
    [
        # Into the host from its workload: INPUT, the workload's egress, then Felix's
        # DefaultEndpointToHostAction (Drop unless configured).
        (
            "shop/frontend-1",
            "node-a-eth1",
            "tcp/22",
            "denied: dropped by cali-wl-to-host, rule 2 (Configured DefaultEndpointToHostAction)",
        ),
        # From the host to its own workloads: OUTPUT returns before any policy.
        ("node-a-eth1", "shop/frontend-1", "tcp/80", "allowed: the host reaches its own"),
        # Into the host from the network: the failsafe ports come before the host's policy.
        ("192.168.56.50", "node-a-eth1", "tcp/22", "allowed: allowed by the failsafe rules"),
        ("192.168.56.50", "node-a-eth1", "tcp/80", "ingress dropped at the end of tier default"),
        # Out of the host to another node's pod: the host endpoint's profile, then the pod's.
        ("node-a-eth1", "shop/payments-1", "tcp/8080", "egress allowed by profile legacy-vms"),
    ],
)
def test_a_host_endpoint_is_an_end_of_a_flow(
    source: str, destination: str, port: str, said: str
) -> None:
    done = explain("--from", source, "--to", destination, "--port", port)
    assert said in done.stdout, done.stdout + done.stderr
    assert done.returncode == (0 if done.stdout.endswith("verdict: allowed\n") else 1)


def test_a_host_endpoints_policy_is_named(manifests: Path) -> None:
    (manifests / "99-host-admin.yaml").write_text(
        "apiVersion: projectcalico.org/v3\n"
        "kind: GlobalNetworkPolicy\n"
        "metadata: {name: host-admin}\n"
        "spec:\n"
        "  order: 5\n"
        "  selector: has(host-endpoint)\n"
        "  types: [Ingress]\n"
        "  ingress:\n"
        "  - action: Allow\n"
        "    protocol: TCP\n"
        "    source: {nets: [192.168.56.0/24]}\n"
        "    destination: {ports: [9000]}\n"
    )
    done = explain(
        "--from", "192.168.56.50", "--to", "node-a-eth1", "--port", "tcp/9000", source=manifests
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "at node-a: allowed: ingress allowed by default/host-admin, rule 1" in done.stdout
