"""``pyfelix validate`` as a user runs it: a real process, real files, exit codes and output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO


def pyfelix(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )


def test_bundled_example_is_valid() -> None:
    """The example cluster validates, and the summary counts what was loaded."""
    result = pyfelix("validate", "examples/")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("valid: ")
    assert "4 WorkloadEndpoint" in line
    assert "3 Tier" in line


def test_invalid_input_lists_every_problem(tmp_path: Path) -> None:
    """Problems print as file:line: Kind/namespace/name: field: message, and exit code is 1."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        """\
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata:
  name: web
  namespace: prod
spec:
  selector: app = "web"
  ingress:
  - action: Allow
    destination:
      ports: [80]
---
apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: ops
spec:
  order: first
"""
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    result = pyfelix("validate", str(tmp_path))
    assert result.returncode == 1
    *located, parse_error = result.stdout.splitlines()
    assert parse_error.startswith(f"{broken}:2: cannot parse YAML: ")
    assert located == [
        f"{bad}:7: NetworkPolicy/prod/web: spec.selector: invalid selector 'app = \"web\"': "
        "expected == at position 4",
        f"{bad}:11: NetworkPolicy/prod/web: spec.ingress[0].destination.ports: "
        "rules with numeric ports or port ranges must set protocol to TCP, UDP or SCTP",
        f"{bad}:18: Tier/ops: spec.order: expected a number, got string 'first'",
    ]
    assert "4 problem(s) found" in result.stderr


def test_usage_errors() -> None:
    """No command, or validate without paths, is a usage error (exit 2)."""
    assert pyfelix().returncode == 2
    assert pyfelix("validate").returncode == 2
    version = pyfelix("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("pyfelix ")


def test_run_on_the_kubernetes_datastore_without_a_kubeconfig_says_what_to_set() -> None:
    """FELIX_DATASTORETYPE kubernetes (calico-node's KDD) with no kubeconfig and no service
    account: one line naming what to set, exit 1, nothing read from anywhere else."""
    env = {**os.environ, "FELIX_DATASTORETYPE": "kubernetes"}
    for name in ("ETCD_ENDPOINTS", "KUBECONFIG", "FELIX_KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "run", "--dry-run", "--hostname", "n"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "no Kubernetes API configured: set FELIX_KUBECONFIG or KUBECONFIG to a kubeconfig"
        " file, or run in a pod with a service account"
    )


def test_bpf_enabled_is_refused_by_run_and_named_by_validate(tmp_path: Path) -> None:
    """bpfEnabled: true would leave a node without kube-proxy with no service load balancing
    if it were accepted and ignored: validate says so (the input is still valid Calico),
    and the agent refuses to start in one line."""
    shutil.copytree(REPO / "examples" / "cluster", tmp_path / "c")
    config = tmp_path / "c" / "00-cluster.yaml"
    config.write_text(
        config.read_text().replace(
            "  logSeverityScreen: Info\n", "  logSeverityScreen: Info\n  bpfEnabled: true\n", 1
        )
    )
    validated = subprocess.run(
        [sys.executable, "-m", "pyfelix", "validate", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert validated.returncode == 0
    assert "FelixConfiguration/default: BPFEnabled true is not supported" in validated.stderr
    assert "pyfelix run refuses this configuration" in validated.stderr
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyfelix",
            "run",
            "--dry-run",
            "--hostname",
            "node-a",
            "--datastore",
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert ran.returncode == 1
    refusals = [line for line in ran.stderr.splitlines() if "refusing this configuration" in line]
    assert len(refusals) == 1
    assert "BPFEnabled true is not supported" in refusals[0]
    assert "InSync" not in ran.stdout


POLICY = """apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: from-stdin}
spec: {selector: all(), types: [Ingress], ingress: [{action: Deny}]}
"""


def test_a_dash_reads_standard_input() -> None:
    """`kubectl get ... -o yaml | pyfelix validate -` and `| pyfelix dry-run -`; a problem
    there is located in ``-``."""
    checked = pyfelix("validate", "-", stdin=POLICY)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "valid: 1 resources in 1 file(s) (1 GlobalNetworkPolicy)" in checked.stdout
    shown = pyfelix("dry-run", "--hostname", "node-a", "-", stdin=POLICY)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Dataplane of node-a")
    assert "no resources found" not in shown.stderr
    broken = pyfelix("validate", "-", stdin=POLICY.replace("all()", "all("))
    assert broken.returncode == 1
    assert broken.stdout.startswith("-:4: GlobalNetworkPolicy/from-stdin: spec.selector")


def test_an_input_without_resources_is_refused(tmp_path: Path) -> None:
    """An empty directory, file or List is most likely a mistake (a wrong path, a query that
    matched nothing): validate and dry-run say so and exit 1, rather than call it valid."""
    (tmp_path / "empty.yaml").write_text("apiVersion: v1\nkind: List\nitems: []\n")
    for args in (("validate",), ("dry-run", "--hostname", "node-a")):
        done = pyfelix(*args, str(tmp_path))
        assert done.returncode == 1, done
        assert done.stderr.strip().endswith(f"no resources found in {tmp_path}")
    assert pyfelix("validate", "-", stdin="").stderr.strip() == "no resources found in -"


def test_each_problem_is_printed_once(tmp_path: Path) -> None:
    """A bad port is found by two checks, and a dry-run as the agent would validate twice:
    each problem is still said once, with its file and line."""
    (tmp_path / "p.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: x}\n"
        "spec:\n  selector: all()\n"
        "  ingress: [{action: Allow, protocol: TCP, destination: {ports: [http, 99999]}}]\n"
    )
    checked = pyfelix("validate", str(tmp_path))
    assert checked.stdout.count("port 99999 invalid") == 1, checked.stdout
    shown = pyfelix("dry-run", "--skip-invalid", "--hostname", "a", str(tmp_path))
    assert shown.stderr.count("port 99999 invalid") == 1, shown.stderr
    assert shown.stderr.count("treated as absent") == 1


def test_help_gives_examples_the_environment_and_exit_codes() -> None:
    shown = pyfelix("--help")
    assert shown.returncode == 0
    for words in ("examples:", "| pyfelix dry-run", "FELIX_<PARAMETER>", "exit codes:", "129"):
        assert words in shown.stdout, words


def test_a_policy_in_a_tier_that_does_not_exist_is_warned_about(tmp_path: Path) -> None:
    """Valid for Felix (programmed in a tier ordered last), refused by Calico's API server:
    validate and dry-run say so on stderr, and still succeed. Calico's own tiers need none."""
    (tmp_path / "p.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\n"
        "metadata: {name: ghost.deny}\nspec: {tier: ghost, selector: all()}\n---\n"
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\n"
        "metadata: {name: kube-admin.x}\nspec: {tier: kube-admin, selector: all()}\n"
    )
    for args in (("validate",), ("dry-run", "--hostname", "node-a")):
        done = pyfelix(*args, str(tmp_path))
        assert done.returncode == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if "does not exist" in line]
        assert warned == [
            "GlobalNetworkPolicy/ghost.deny: tier ghost does not exist: Calico's API server"
            " would refuse this policy; Felix (and pyfelix) programs it in a tier ordered"
            " after every other, whose default action is Deny"
        ], args


def test_a_named_port_of_an_admin_policy_is_warned_about(tmp_path: Path) -> None:
    """Calico read an AdminNetworkPolicy's namedPort as every protocol and port, and so does
    pyfelix; validate and dry-run say so, naming the field, and still succeed."""
    (tmp_path / "anp.yaml").write_text(
        "apiVersion: policy.networking.k8s.io/v1alpha1\nkind: AdminNetworkPolicy\n"
        "metadata: {name: guard}\nspec:\n  priority: 7\n"
        "  subject: {namespaces: {}}\n  ingress:\n  - action: Allow\n"
        "    from: [{namespaces: {}}]\n    ports: [{portNumber: {port: 80}}, {namedPort: web}]\n"
    )
    for args in (("validate",), ("dry-run", "--hostname", "node-a")):
        done = pyfelix(*args, str(tmp_path))
        assert done.returncode == 0, done.stderr
        warned = [line for line in done.stderr.splitlines() if "namedPort" in line]
        assert warned == [
            "AdminNetworkPolicy.policy.networking.k8s.io/guard: spec.ingress[0].ports[1].namedPort"
            " web: Calico never"
            " supported named ports in this kind and matches every protocol and port instead"
            " (so does pyfelix); name the port's number or range to narrow the rule"
        ], (args, done.stderr)


def test_a_problem_names_the_line_of_its_field(tmp_path: Path) -> None:
    """The line of the offending field (the key, or the list item), not the document's
    first line; in a List's items too."""
    (tmp_path / "a.yaml").write_text(
        "# a comment\n"
        "apiVersion: projectcalico.org/v3\n"
        "kind: GlobalNetworkPolicy\n"
        "metadata:\n"
        "  name: x\n"
        "spec:\n"
        "  selector: all()\n"
        "  ingress:\n"
        "  - action: Allow\n"
        "    protocol: TCP\n"
        "    destination:\n"
        "      ports:\n"
        "      - http\n"
        "      - 99999\n"
        "---\n"
        "apiVersion: v1\n"
        "kind: List\n"
        "items:\n"
        "- apiVersion: projectcalico.org/v3\n"
        "  kind: GlobalNetworkPolicy\n"
        "  metadata: {name: y}\n"
        "  spec:\n"
        "    selector: all(\n"
    )
    done = pyfelix("validate", str(tmp_path))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'a.yaml'}:14: GlobalNetworkPolicy/x: spec.ingress")
    assert lines[1].startswith(f"{tmp_path / 'a.yaml'}:23: GlobalNetworkPolicy/y: spec.selector")


def test_a_problem_in_a_json_list_names_its_own_item_s_line(tmp_path: Path) -> None:
    """``kubectl get -o json`` prints one List whose items all count from the file's first
    line: each problem is on the line of its own item's field, not on the List's (which has
    a metadata of its own, as kubectl prints it)."""

    def pod(name: str, labels: dict[str, str], port: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "prod", "labels": labels},
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "app", "ports": [{"containerPort": 80, "name": port}]}],
            },
            "status": {"podIP": "10.0.0.1"},
        }

    items = [pod("a", {"app": "web"}, "http"), pod("b", {"bad key!": "x"}, "http")]
    items.append(pod("c", {"app": "web"}, "Bad_Port"))
    dump = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
    text = json.dumps(dump, indent=4)
    (tmp_path / "pods.json").write_text(text)
    lines = text.splitlines()
    bad_key = next(n for n, line in enumerate(lines, 1) if '"bad key!"' in line)
    bad_port = next(n for n, line in enumerate(lines, 1) if '"Bad_Port"' in line)
    done = pyfelix("validate", str(tmp_path))
    assert done.returncode == 1
    found = done.stdout.splitlines()
    assert found[0].startswith(f"{tmp_path / 'pods.json'}:{bad_key}: Pod/prod/b: metadata.labels")
    assert found[1].startswith(f"{tmp_path / 'pods.json'}:{bad_port}: Pod/prod/c: spec.containers")
