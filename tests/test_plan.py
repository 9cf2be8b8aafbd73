"""``pyfelix plan`` on the bundled example: the flows a change flips, each checked by
``explain`` before and after, and the dataplane delta checked against two dry-runs diffed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.rules_harness import REPO

EXAMPLES = str(REPO / "examples")
PROMETHEUS = "monitoring/prometheus-1"
#: frontend-ingress, narrowed to sources labelled app == "checkout".
NARROWED = """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: frontend-ingress, namespace: shop}
spec:
  order: 100
  selector: app == "frontend"
  types: [Ingress]
  ingress:
  - action: Allow
    protocol: TCP
    source: {selector: app == "checkout"}
    destination: {ports: [http, 8443]}
"""


def pyfelix(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", *argv], capture_output=True, text=True, check=False
    )


def _plan(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    done = pyfelix("plan", EXAMPLES, *argv, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_flows_a_change_flips_are_what_explain_says_before_and_after(
    tmp_path: Path,
) -> None:
    change = tmp_path / "change.yaml"
    change.write_text(NARROWED)
    code, plan = _plan(tmp_path, "--change", str(change))
    assert code == 1
    flipped = {
        (f["source"]["label"], f["destination"]["label"], f"{f['protocol']}/{f['port']}")
        for f in plan["flips"]
    }
    assert flipped == {
        ("monitoring/prometheus-1", "shop/frontend-1", "tcp/8080"),
        ("monitoring/prometheus-1", "shop/frontend-1", "tcp/8443"),
    }
    for source, destination, port in flipped:
        before = pyfelix("explain", EXAMPLES, "--from", source, "--to", destination, "--port", port)
        after = pyfelix(
            "explain", str(change), EXAMPLES, "--from", source, "--to", destination, "--port", port
        )
        assert (before.returncode, after.returncode) == (0, 1), (before.stdout, after.stdout)


def _chains(view: dict[str, Any]) -> dict[str, list[str]]:
    """Every chain's rule bodies from a dry-run view, keyed as plan keys them."""
    chains: dict[str, list[str]] = {}
    for version, tables in view["iptables"].items():
        for table, text in tables.items():
            for line in text.splitlines():
                if line.startswith("-A "):
                    name, _, rest = line[3:].partition(" ")
                    body = rest.split('" ', 1)[1] if rest.startswith("-m comment") else rest
                    chains.setdefault(f"{version}/{table}/{name}", []).append(body)
    return chains


def test_the_dataplane_delta_is_two_dry_runs_diffed(tmp_path: Path) -> None:
    change = tmp_path / "change.yaml"
    change.write_text(NARROWED)
    _, plan = _plan(tmp_path, "--change", str(change))
    node_a = next(node for node in plan["nodes"] if node["node"] == "node-a")
    argv = ["dry-run", "--hostname", "node-a", "--format", "json"]
    before = _chains(json.loads(pyfelix(*argv, EXAMPLES).stdout))
    # The input as the change leaves it: a copy with frontend-ingress replaced.
    changed = tmp_path / "changed"
    shutil.copytree(REPO / "examples", changed)
    policies = changed / "cluster" / "50-policies.yaml"
    original = (
        "  ingress:\n  - action: Allow\n    protocol: TCP\n    destination:\n      ports:\n"
        "      - http"
    )
    assert policies.read_text().count(original) == 1
    narrowed = original.replace(
        "protocol: TCP\n", 'protocol: TCP\n    source:\n      selector: app == "checkout"\n'
    )
    policies.write_text(policies.read_text().replace(original, narrowed))
    after = _chains(json.loads(pyfelix(*argv, str(changed)).stdout))
    differing = sorted(name for name in before.keys() & after.keys() if before[name] != after[name])
    assert [c["name"] for c in node_a["chains_changed"]] == differing
    for chain in node_a["chains_changed"]:
        name = chain["name"]
        assert set(chain["added"]) == set(after[name]) - set(before[name])
        assert set(chain["removed"]) == set(before[name]) - set(after[name])
    assert node_a["chains_added"] == sorted(after.keys() - before.keys())
    assert node_a["chains_removed"] == sorted(before.keys() - after.keys())


def test_enforcing_the_staged_policies_previews_their_denials(tmp_path: Path) -> None:
    """The example's staged policy locks the frontend's egress down to the checkout; enforced,
    the frontend loses DNS, and its chains appear."""
    code, plan = _plan(tmp_path, "--enforce-staged")
    assert code == 1
    assert {
        (f["destination"]["label"], f["protocol"], f["port"], f["allowed"]) for f in plan["flips"]
    } == {
        ("monitoring/prometheus-1", "tcp", 53, False),
        ("monitoring/prometheus-1", "udp", 53, False),
    }
    node_a = next(node for node in plan["nodes"] if node["node"] == "node-a")
    assert any(name.endswith("cali-po-_En0FT8fNGpG_M4ZhOFn") for name in node_a["chains_added"])


def test_a_change_that_changes_nothing_exits_0(tmp_path: Path) -> None:
    same = (REPO / "examples" / "cluster" / "50-policies.yaml").read_text()
    change = tmp_path / "same.yaml"
    change.write_text(same)
    done = pyfelix("plan", EXAMPLES, "--change", str(change))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "0 flows flip"
    assert "node-a: no dataplane change" in done.stdout


def test_plan_without_a_change_is_a_usage_error() -> None:
    done = pyfelix("plan", EXAMPLES)
    assert done.returncode == 2
    assert "--change" in done.stderr


RELABELLED = """
apiVersion: v1
kind: Namespace
metadata:
  name: monitoring
  labels: {team: nobody, env: prod}
"""
#: node-b's FelixConfiguration as the example has it: a change naming it changes nothing,
#: but makes plan compute the state after afresh (the agent restarts on one).
SAME_CONFIGURATION = """
---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node-b}
spec: {logSeverityScreen: Debug}
"""


def test_a_change_fed_as_updates_plans_as_a_fresh_computation(tmp_path: Path) -> None:
    """The state after a change is the graph's update of the state before (a relabelled
    namespace: a plain document the loader decoded straight to the model, replaced): the
    same plan as computing the changed input afresh."""
    fed, fresh = tmp_path / "fed.yaml", tmp_path / "fresh.yaml"
    fed.write_text(RELABELLED)
    fresh.write_text(RELABELLED + SAME_CONFIGURATION)
    code, by_updates = _plan(tmp_path, "--change", str(fed))
    assert code == 1
    assert _plan(tmp_path, "--change", str(fresh)) == (code, by_updates)
    (flip,) = by_updates["flips"]
    assert flip["source"]["label"] == PROMETHEUS
    members = {node["node"]: node["members"] for node in by_updates["nodes"]}
    assert all(list(sets.values()) == [[[], ["10.65.1.3/32"]]] for sets in members.values())


def test_planning_many_nodes_says_so(tmp_path: Path) -> None:
    """Every node holding workloads is computed: past 20 of them plan says so, and how to
    plan fewer."""
    documents = [
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "WorkloadEndpoint",
            "metadata": {"name": f"node{i}-k8s-pod{i}-eth0", "namespace": "default"},
            "spec": {
                "orchestrator": "k8s",
                "node": f"node{i}",
                "pod": f"pod{i}",
                "endpoint": "eth0",
                "interfaceName": f"cali{i:011x}",
                "ipNetworks": [f"10.1.0.{i + 1}/32"],
            },
        }
        for i in range(21)
    ]
    (tmp_path / "cluster.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
    )
    change = tmp_path / "change.yaml"
    change.write_text(NARROWED)
    done = pyfelix("plan", str(tmp_path / "cluster.json"), "--change", str(change))
    assert done.returncode == 0, done.stderr
    assert "plan: computing 21 nodes, each about as long as its dry-run" in done.stderr


def test_an_input_with_no_valid_resource_is_an_error(tmp_path: Path) -> None:
    """Nothing valid to compute is not an empty cluster: explain, plan and diff say so and
    exit 2 (their 1 is an answer)."""
    (tmp_path / "empty.yaml").write_text("# nothing yet\n")
    change = tmp_path / "change.yaml"
    change.write_text(NARROWED)
    ruleset = tmp_path / "rules"
    ruleset.write_text("*filter\nCOMMIT\n")
    for argv in (
        ("explain", "--from", "10.0.0.1", "--to", "10.0.0.2"),
        ("plan", "--change", str(change)),
        ("diff", "--node", "node-a", "--ruleset", str(ruleset)),
    ):
        done = pyfelix(argv[0], str(tmp_path / "empty.yaml"), *argv[1:])
        assert done.returncode == 2, (argv, done.stderr)
        assert "no resources found in" in done.stderr, argv
