"""``pyfelix demo``: the README's main command, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.netns


def demo_namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return sorted(
        line.split()[0] for line in listing.stdout.splitlines() if line.startswith("pfd-")
    )


def test_demo_matrix_matches_explanations() -> None:
    """The agent programs a namespace node from the example; every observed TCP verdict agrees
    with the explanation, and nothing is left behind."""
    before = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "demo", "examples/"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
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
    assert "differs" not in result.stdout
    after = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert after == before
