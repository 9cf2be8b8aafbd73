"""``pyfelix explain`` on the bundled example: what decides each flow, on each side, read
off the rules the nodes would program (the demo proves those verdicts with real traffic)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.rules_harness import REPO


def explain(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", "explain", str(REPO / "examples"), *argv],
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
