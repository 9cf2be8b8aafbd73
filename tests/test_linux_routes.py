"""The route writer against the kernel, in a namespace: it makes the main table's proto-80
routes (IPv4 and IPv6) exactly the desired ones and leaves every other route alone: other
protocols' routes, and proto-80 routes in other tables. Its dumps are filtered by the kernel
where it can, which must not change what counts as ours."""

from __future__ import annotations

import pytest

from pyfelix_dataplane.linux.routes import RouteTarget, sync_routes
from tests.netns import in_netns, run_in


def sync(desired: dict[str, str]) -> dict[str, str]:
    """Routes to ``dst`` through interface ``name``, made so; runs inside the namespace."""
    return sync_routes({dst: RouteTarget(name) for dst, name in desired.items()})


def ip(ns: str, *argv: str) -> str:
    result = run_in(ns, "ip", *argv)
    assert result.returncode == 0, result.stderr
    return result.stdout


def routes(ns: str, family: str, *selector: str) -> list[str]:
    """Destinations of the routes ``ip route show`` lists for ``selector``."""
    listing = ip(ns, family, "route", "show", *selector)
    return sorted(line.split()[0] for line in listing.splitlines())


@pytest.mark.netns
def test_routes_made_equal_to_desired_and_others_left_alone(netns: str) -> None:
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    ip(netns, "link", "set", "pod0", "up")
    dev = ("dev", "cali0123456789")
    # Left by an earlier run: ours, no longer wanted.
    ip(netns, "-4", "route", "add", "10.65.0.9/32", *dev, "proto", "80", "scope", "link")
    ip(netns, "-6", "route", "add", "fd00::9/128", *dev, "proto", "80")
    # Someone else's.
    ip(netns, "-4", "route", "add", "10.66.0.0/24", *dev, "proto", "static")
    ip(netns, "-4", "route", "add", "10.65.0.8/32", *dev, "proto", "80", "table", "100")
    ip(netns, "-6", "route", "add", "fd00::8/128", *dev, "proto", "80", "table", "100")

    desired = {"10.65.0.5/32": "cali0123456789", "fd00::5/128": "cali0123456789"}
    assert in_netns(netns, sync, desired) == {
        "10.65.0.5/32": "added",
        "fd00::5/128": "added",
        "10.65.0.9/32": "removed",
        "fd00::9/128": "removed",
    }
    assert routes(netns, "-4", "proto", "80") == ["10.65.0.5"]
    assert routes(netns, "-6", "proto", "80") == ["fd00::5"]
    assert routes(netns, "-4", "proto", "static") == ["10.66.0.0/24"]
    assert routes(netns, "-4", "table", "100") == ["10.65.0.8"]
    assert routes(netns, "-6", "table", "100") == ["fd00::8"]

    assert in_netns(netns, sync, desired) == dict.fromkeys(desired, "kept")
