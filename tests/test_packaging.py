"""The installed layout: both packages import and the console script exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyfelix
import pyfelix_dataplane


def test_packages_import_from_their_folders() -> None:
    """pyfelix comes from src/, the Linux driver package from dataplane/."""
    assert pyfelix.__file__ is not None
    assert pyfelix_dataplane.__file__ is not None
    assert "/src/pyfelix/" in pyfelix.__file__
    assert "/dataplane/pyfelix_dataplane/" in pyfelix_dataplane.__file__


def test_console_script() -> None:
    """`pyfelix` is installed beside the interpreter that runs the suite."""
    script = Path(sys.executable).parent / "pyfelix"
    assert script.exists()
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pyfelix {pyfelix.__version__}"
