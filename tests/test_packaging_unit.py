"""The systemd unit shipped in the repository: it restarts the agent on exit code 129."""

from __future__ import annotations

import configparser

from tests.conftest import REPO


def test_systemd_unit_restarts_on_129() -> None:
    """systemd treats 129 as a reason to restart, and the agent runs 'pyfelix run'."""
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "examples" / "systemd" / "pyfelix.service")
    service = unit["Service"]
    assert "129" in service["RestartForceExitStatus"].split()
    assert service["Restart"] == "always"
    assert service["ExecStart"].endswith("pyfelix run")
    assert unit["Install"]["WantedBy"] == "multi-user.target"
