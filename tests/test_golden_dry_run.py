"""The dry-run of examples/ and of the clusters the tests use is byte-for-byte what it was when
these files were written (by the code before the restructuring of issue 12).

Refactoring must not change what a node is programmed with; a change that means to (a new rule,
a Felix fidelity fix) regenerates the files in the same commit, so the difference is reviewed:
``pyfelix dry-run --hostname NODE --format FMT SOURCES > tests/golden/NAME.FMT`` with the
sources and node of each case below.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyfelix import cli, dryrun
from pyfelix.validation import loading

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


@pytest.mark.parametrize("name", sorted(CASES))
def test_nftables_dry_run_output_is_unchanged(name: str) -> None:
    """The same in NFTablesMode: the tables as ``nft -f`` takes them. Written by the code
    before rules became typed data (issue 39), when nft.py still translated iptables text;
    regenerate as above with ``FELIX_NFTABLESMODE=Enabled`` into ``NAME.nft.text``."""
    node, sources = CASES[name]
    command = ["dry-run", "--hostname", node, "--format", "text", *map(str, sources)]
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix.cli", *command],
        capture_output=True,
        check=False,
        env={**os.environ, "FELIX_NFTABLESMODE": "Enabled"},
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"table ip calico {" in result.stdout
    assert result.stdout == (GOLDEN / f"{name}.nft.text").read_bytes()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_streamed_dry_run_prints_the_same(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Big inputs are parsed and checked by a child that hands each file on as the dry-run
    computes it: forced on for these small ones, the output is the same, byte for byte."""
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    streamed: list[object] = []
    compute_files = dryrun.compute_files

    def counted(*args: Any, **kwargs: Any) -> Any:
        streamed.append(args)
        return compute_files(*args, **kwargs)

    monkeypatch.setattr(dryrun, "compute_files", counted)
    node, sources = CASES[name]
    command = ["dry-run", "--hostname", node, "--format", "json", *map(str, sources)]
    assert cli.main(command) == 0
    assert capsys.readouterr().out == (GOLDEN / f"{name}.json").read_text()
    assert len(streamed) == 1
