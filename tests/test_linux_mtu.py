"""MTU detection against the real kernel: the interfaces Felix would look at, in a namespace."""

from __future__ import annotations

import pytest

from pyfelix_dataplane.linux.mtu import FALLBACK_HOST_MTU, host_mtu, read_links
from tests.netns import in_netns, run_in

PATTERN = "^((en|wl|ww|sl|ib)[Pcopsvx].*|(eth|wlan|wwan).*)"


def _ip(netns: str, *argv: str) -> None:
    done = run_in(netns, "ip", *argv)
    assert done.returncode == 0, done.stderr


@pytest.mark.netns
def test_the_host_mtu_is_the_smallest_running_matching_interface(netns: str) -> None:
    """Felix's default pattern: eth7 (1234, running) counts; eth8 (1000) is up but has no
    carrier (its peer is down), so it is not running; cali0 (900) does not match."""
    for name, mtu, peer_up in (("eth7", 1234, True), ("eth8", 1000, False), ("cali0", 900, True)):
        _ip(netns, "link", "add", name, "mtu", str(mtu), "type", "veth", "peer", "name", f"p{name}")
        _ip(netns, "link", "set", name, "up")
        if peer_up:
            _ip(netns, "link", "set", f"p{name}", "up")
    links = in_netns(netns, read_links)
    assert ("eth8", 1000, False) in links
    assert ("eth7", 1234, True) in links
    assert host_mtu(links, PATTERN) == 1234
    assert host_mtu(links, "^cali") == 900
    assert host_mtu(links, "^nothing$") == FALLBACK_HOST_MTU
