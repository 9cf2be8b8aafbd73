"""The dry-run of examples/ and of the clusters the tests use is byte-for-byte what it was when
these files were written (by the code before the restructuring of issue 12).

Refactoring must not change what a node is programmed with; a change that means to (a new rule,
a Felix fidelity fix) regenerates the files in the same commit, so the difference is reviewed:
``pyfelix dry-run --hostname NODE --format FMT SOURCES > tests/golden/NAME.FMT`` with the
sources and node of each case below.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


CLUSTERS = GOLDEN / "clusters"
EXAMPLES = GOLDEN.parent.parent / "examples"
CASES = {
    "examples-node-a": ("node-a", [EXAMPLES]),
    "examples-node-b": ("node-b", [EXAMPLES]),
    "e2e-policy": ("node", [CLUSTERS / "e2e-policy"]),
    "e2e-semantics": ("node", [CLUSTERS / "e2e-semantics"]),
    "e2e-tiers": ("node", [CLUSTERS / "e2e-tiers"]),
    "e2e-host-endpoints": ("node", [CLUSTERS / "e2e-host-endpoints"]),
    "render-every-feature": ("node-a", [EXAMPLES, CLUSTERS / "render-every-feature"]),
    "render-host-policies": ("node-a", [EXAMPLES, CLUSTERS / "render-host-policies"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_dry_run_output_is_unchanged(name: str, fmt: str) -> None:
    node, sources = CASES[name]
    command = ["dry-run", "--hostname", node, "--format", fmt, *map(str, sources)]
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix.cli", *command], capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == (GOLDEN / f"{name}.{fmt}").read_bytes()
