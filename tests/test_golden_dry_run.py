"""The dry-run of examples/ is byte-for-byte what it was when these files were written.

Refactoring must not change what a node is programmed with; a change that means to (a new rule,
a Felix fidelity fix) regenerates the files in the same commit, so the difference is reviewed:

    for node in node-a node-b; do for fmt in text json; do
      pyfelix dry-run --hostname $node --format $fmt examples/ > tests/golden/examples-$node.$fmt
    done; done
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("node", ["node-a", "node-b"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_dry_run_output_is_unchanged(examples_dir: Path, node: str, fmt: str) -> None:
    command = ["dry-run", "--hostname", node, "--format", fmt, str(examples_dir)]
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix.cli", *command], capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == (GOLDEN / f"examples-{node}.{fmt}").read_bytes()
