"""``pyfelix demo``: the README's main command, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.netns import SLOWDOWN

pytestmark = pytest.mark.netns


def demo_namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return sorted(
        line.split()[0] for line in listing.stdout.splitlines() if line.startswith("pfd-")
    )


def demo(source: str) -> list[str]:
    """``pyfelix demo SOURCE`` as a user runs it; its lines, once it exited 0."""
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "demo", "--timeout", str(20 * SLOWDOWN), source],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120 * SLOWDOWN,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_demo_matrix_matches_explanations() -> None:
    """The agent programs a namespace node from the example; every observed TCP verdict agrees
    with the explanation, and nothing is left behind."""
    before = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    lines = demo("examples/")
    assert any(
        line.startswith("checkout-1")
        and "payments-1" in line
        and " allowed " in line
        and "checkout-to-payments" in line
        for line in lines
    )
    assert any(
        line.startswith("prometheus-1")
        and "(metrics)" in line
        and " allowed " in line
        and "platform.allow-dns-and-metrics" in line
        for line in lines
    )
    assert any(line.startswith("payments-1") and " denied " in line for line in lines)
    assert not any("differs" in line for line in lines)
    after = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before


FRONTEND_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: frontend, namespace: default, labels: {role: frontend}}
spec: {nodeName: node-1, containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]}
status: {phase: Running, podIPs: [{ip: 10.65.0.6}]}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: default}
spec: {nodeName: node-1, containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]}
status: {phase: Running, podIPs: [{ip: 10.65.0.7}]}
"""


def test_demo_of_a_kubectl_dump(tmp_path: Path) -> None:
    """Pods and a NetworkPolicy as kubectl prints them: the demo wires the pods, and the
    verdicts name the Kubernetes NetworkPolicy, or its isolation."""
    (tmp_path / "dump.yaml").write_text(
        (REPO / "tests" / "golden" / "kubectl-dump.yaml").read_text()
    )
    (tmp_path / "frontend.yaml").write_text(FRONTEND_PODS)
    lines = demo(str(tmp_path))
    assert any(
        line.startswith("frontend")
        and "nginx-7c5ddbdf54-abcde" in line
        and " allowed " in line
        and "Kubernetes NetworkPolicy default/web-from-frontend" in line
        for line in lines
    )
    assert any(
        line.startswith("other")
        and "nginx" in line
        and " denied " in line
        and "selected by Kubernetes NetworkPolicy default/web-from-frontend" in line
        for line in lines
    )
