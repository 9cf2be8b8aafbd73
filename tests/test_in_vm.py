"""One boot of Debian's stock kernel (tests/vm.py) runs what this machine's kernel cannot: IPIP
(tunl0 and its routes, with a ping across the tunnel) and the kernel's WireGuard device
through pyfelix's writers (here WireGuard is wireguard-go's), two agents over IPIP, IPIP
CrossSubnet and the kernel's WireGuard in both families, with an encapsulation change
(tests/e2e/test_overlays.py), service traffic through kube-proxy's IPVS mode
(tests/e2e/test_ipvs.py), and on a second kernel (6.1) the kernel writers again (VXLAN,
MTU detection) and the single-node end-to-end test (`pyfelix demo`).

Each guest test's outcome is read back from the guest's JUnit report: every one must pass,
none may be skipped, and the report must hold the tests asked for. The guest imports this
checkout's code (PYTHONPATH), whichever checkout the venv was installed from. Under TCG a
Python start takes 12-27 s in the guest (bench/RESULTS.md); the guest stretches the tests'
waits (PYFELIX_TEST_SLOWDOWN).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests import vm

pytestmark = [pytest.mark.netns, pytest.mark.vm]

REPO = Path(__file__).resolve().parent.parent
GUEST_TESTS = (
    "tests/test_linux_ipip.py",
    "tests/test_linux_wireguard.py",
    "tests/test_linux_vxlan.py",
    "tests/test_linux_mtu.py",
    "tests/e2e/test_overlays.py",
    # kube-proxy's IPVS mode (ip_vs) and Felix's chains for it, with real service traffic.
    "tests/e2e/test_ipvs.py",
    # The single-node end-to-end test, on the second kernel: the README's demo.
    "tests/test_demo.py::test_demo_matrix_matches_explanations",
)


def test_the_stock_kernel_runs_the_kernel_writers(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    command = (
        f"cd {REPO} && PYTHONPATH={REPO}/src:{REPO}/dataplane"
        f" {sys.executable} -m pytest -p no:cacheprovider -q -x"
        f" --junitxml={report} {' '.join(GUEST_TESTS)} > {tmp_path}/guest.log 2>&1"
    )
    booted = vm.run(command, tmp_path)
    log = (tmp_path / "guest.log").read_text() if (tmp_path / "guest.log").exists() else ""
    assert booted.returncode == 0, (
        f"{booted.stdout[-3000:]}\n{booted.stderr[-3000:]}\n{log[-6000:]}"
    )
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes = {
        f"{case.get('classname')}.{case.get('name')}": [child.tag for child in case]
        for case in cases
    }
    assert outcomes, log[-3000:]
    assert all(not tags for tags in outcomes.values()), outcomes
    ran = {name.split(".")[-2] for name in outcomes}
    assert ran >= {Path(test.partition("::")[0]).stem for test in GUEST_TESTS}, ran
