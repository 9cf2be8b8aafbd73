"""A VM with Debian's stock kernel on this machine's own userspace, for what this kernel lacks
(the ipip and wireguard modules) and a second kernel behind the same behaviour.

virtme-ng boots the newest /boot/vmlinuz-*-amd64 under TCG (a nested KVM guest hangs here)
with the host's root filesystem visible read-only and /tmp as a writable overlay, so the same
checkout, venv and tools run inside. The packages come from the Makefile's test packages and
virtme-ng from the test extra; ``install`` adds what a machine is missing (a developer's),
as every test here installs what it uses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Set inside the guest: tests that need the stock kernel run only there.
GUEST_ENV = "PYFELIX_VM_GUEST"
PACKAGES = ("qemu-system-x86", "linux-image-amd64", "busybox-static")
#: The guest's pace against this machine's, for the tests' waits (tests.netns.SLOWDOWN).
GUEST_SLOWDOWN = 20
#: The longest a guest's run may take, against a hang: a boot takes 25-45 s here and guest
#: code runs several times slower than on the host; the in-VM tests took 17-25 minutes.
BOOT_TIMEOUT = 2400


def in_guest() -> bool:
    return bool(os.environ.get(GUEST_ENV))


def kernel_has(kind: str) -> bool:
    """Whether this kernel makes a ``kind`` link (wireguard, ipip), tried in a namespace."""
    name = f"pfprobe-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        made = subprocess.run(
            ["ip", "-n", name, "link", "add", "probe0", "type", kind],
            capture_output=True,
            check=False,
        )
        return made.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def kernel() -> Path | None:
    found = sorted(Path("/boot").glob("vmlinuz-*-amd64"))
    return found[-1] if found else None


def install() -> None:
    """The VM's packages, when this machine lacks them (apt-get, as the Makefile does)."""
    if (
        kernel() is not None
        and shutil.which("qemu-system-x86_64")
        and Path("/bin/busybox").exists()
    ):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
        check=True,
        env=env,
    )


def run(
    command: str, writable: Path, timeout: float = BOOT_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``command`` (a shell line) as root in the guest, with ``writable`` shared read-write
    (results go there: the guest's /tmp is an overlay the host does not see)."""
    install()
    image = kernel()
    assert image is not None, "no /boot/vmlinuz-*-amd64 after installing linux-image-amd64"
    bin_dir = Path(sys.executable).parent
    vng = bin_dir / "vng"
    argv = [
        str(vng),
        "--disable-kvm",
        "--run",
        str(image),
        "--memory",
        "2G",
        "--cpus",
        "2",
        "--rwdir",
        str(writable),
        "--exec",
        f"export {GUEST_ENV}=1 PYFELIX_TEST_SLOWDOWN={GUEST_SLOWDOWN}; {command}",
    ]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
