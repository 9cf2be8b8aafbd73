"""The route writer against the kernel, in a namespace: it makes the main table's routes that
are Felix's (IPv4 and IPv6) exactly the desired ones, written and owned as Felix's main route
table: device routes with DeviceRouteProtocol (boot), ours being proto-80 routes, routes on
workload interfaces (all of them under RemoveExternalRoutes) and nothing else; other tables
are left alone."""

from __future__ import annotations

import errno

import pytest

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.routes import RoutesManager
from pyfelix_dataplane.linux.routes import (
    RTPROT_BOOT,
    RouteOwnership,
    RouteTarget,
    RouteWriter,
    direct_route,
    sync_routes,
)
from pyfelix_dataplane.linux.rtnl import Rtnl
from pyfelix_dataplane.state import NodeState
from tests.netns import in_netns, run_in


def sync(desired: dict[str, str], ownership: RouteOwnership | None = None) -> dict[str, str]:
    """Routes to ``dst`` through interface ``name``, made so; runs inside the namespace."""
    return sync_routes({dst: RouteTarget(name) for dst, name in desired.items()}, ownership)


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
    ip(netns, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
    ip(netns, "link", "set", "eth9", "up")
    dev = ("dev", "cali0123456789")
    # Left by an earlier run: ours, no longer wanted.
    ip(netns, "-4", "route", "add", "10.65.0.9/32", *dev, "proto", "80", "scope", "link")
    ip(netns, "-6", "route", "add", "fd00::9/128", *dev, "proto", "80")
    # Someone else's on a workload interface: RemoveExternalRoutes (the default) removes it.
    ip(netns, "-4", "route", "add", "10.66.0.0/24", *dev, "proto", "static")
    # Someone else's elsewhere, even of Felix's device protocol (boot is everybody's).
    ip(netns, "-4", "route", "add", "10.67.0.0/24", "dev", "eth9", "proto", "boot")
    ip(netns, "-4", "route", "add", "10.65.0.8/32", *dev, "proto", "80", "table", "100")
    ip(netns, "-6", "route", "add", "fd00::8/128", *dev, "proto", "80", "table", "100")

    desired = {"10.65.0.5/32": "cali0123456789", "fd00::5/128": "cali0123456789"}
    assert in_netns(netns, sync, desired) == {
        "10.65.0.5/32": "added",
        "fd00::5/128": "added",
        "10.65.0.9/32": "removed",
        "fd00::9/128": "removed",
        "10.66.0.0/24": "removed",
    }
    assert routes(netns, "-4", "proto", "boot") == ["10.65.0.5", "10.67.0.0/24"]
    assert routes(netns, "-6", "proto", "boot") == ["fd00::5"]
    assert routes(netns, "-4", "proto", "80") == []
    assert routes(netns, "-4", "table", "100") == ["10.65.0.8"]
    assert routes(netns, "-6", "table", "100") == ["fd00::8"]

    assert in_netns(netns, sync, desired) == dict.fromkeys(desired, "kept")


@pytest.mark.netns
def test_device_route_protocol_and_keeping_external_routes(netns: str) -> None:
    """DeviceRouteProtocol 99: routes written with it, and it alone marks ours (an old proto-80
    route on another interface is no longer ours). RemoveExternalRoutes false: another tool's
    route on a workload interface stays."""
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    ip(netns, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
    ip(netns, "link", "set", "eth9", "up")
    dev = ("dev", "cali0123456789")
    ip(netns, "-4", "route", "add", "10.66.0.0/24", *dev, "proto", "static")
    ip(netns, "-4", "route", "add", "10.67.0.0/24", "dev", "eth9", "proto", "80")
    ownership = RouteOwnership(device_proto=99, remove_external=False)
    desired = {"10.65.0.5/32": "cali0123456789"}
    assert in_netns(netns, sync, desired, ownership) == {"10.65.0.5/32": "added"}
    assert routes(netns, "-4", "proto", "99") == ["10.65.0.5"]
    assert routes(netns, "-4", "proto", "static") == ["10.66.0.0/24"]
    assert routes(netns, "-4", "proto", "80") == ["10.67.0.0/24"]
    assert in_netns(netns, sync, {}, ownership) == {"10.65.0.5/32": "removed"}
    assert routes(netns, "-4", "proto", "static") == ["10.66.0.0/24"]


@pytest.mark.netns
def test_device_route_source_address(netns: str) -> None:
    """DeviceRouteSourceAddress(IPv6): the workload routes carry that src, and a route
    without it (or with another) is replaced."""
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    ip(netns, "link", "add", "eth9", "type", "veth", "peer", "name", "eth9p")
    ip(netns, "link", "set", "eth9", "up")
    ip(netns, "addr", "add", "192.0.2.9/24", "dev", "eth9")
    ip(netns, "-6", "addr", "add", "2001:db8::9/64", "dev", "eth9", "nodad")
    desired = {"10.65.0.5/32": "cali0123456789", "fd00::5/128": "cali0123456789"}
    assert set(in_netns(netns, sync, desired).values()) == {"added"}
    ownership = RouteOwnership(source_v4="192.0.2.9", source_v6="2001:db8::9")
    assert in_netns(netns, sync, desired, ownership) == dict.fromkeys(desired, "added")
    assert "src 192.0.2.9" in ip(netns, "-4", "route", "show", "10.65.0.5")
    assert "src 2001:db8::9" in ip(netns, "-6", "route", "show", "fd00::5")
    assert in_netns(netns, sync, desired, ownership) == dict.fromkeys(desired, "kept")


def sync_spoofing(desired: dict[str, tuple[str, bool]]) -> dict[str, str]:
    targets = {dst: RouteTarget(name, spoofing=spoof) for dst, (name, spoof) in desired.items()}
    return sync_routes(targets)


@pytest.mark.netns
def test_workload_interfaces_get_the_default_rp_filter_or_none_when_spoofing(netns: str) -> None:
    """As Felix: a workload interface gets the namespace's default rp_filter (here loose, 2),
    or 0 where the workload may spoof its source; the setting follows the endpoint."""
    for name in ("cali0000000001", "cali0000000002"):
        ip(netns, "link", "add", name, "type", "veth", "peer", "name", f"p{name[-1]}")
        ip(netns, "link", "set", name, "up")
    assert run_in(netns, "sysctl", "-qw", "net.ipv4.conf.default.rp_filter=2").returncode == 0

    def rp_filter(name: str) -> str:
        return run_in(netns, "sysctl", "-n", f"net.ipv4.conf.{name}.rp_filter").stdout.strip()

    desired = {
        "10.65.0.1/32": ("cali0000000001", False),
        "10.65.0.2/32": ("cali0000000002", True),
    }
    in_netns(netns, sync_spoofing, desired)
    assert (rp_filter("cali0000000001"), rp_filter("cali0000000002")) == ("2", "0")
    desired["10.65.0.2/32"] = ("cali0000000002", False)
    in_netns(netns, sync_spoofing, desired)
    assert rp_filter("cali0000000002") == "2"


def sync_disabled(desired: dict[str, str]) -> dict[str, str]:
    targets = {dst: RouteTarget(name) for dst, name in desired.items()}
    return sync_routes(targets, RouteOwnership(sync=False))


@pytest.mark.netns
def test_route_sync_disabled_touches_no_route(netns: str) -> None:
    """RouteSyncDisabled: no route is added, and none of ours removed; the workload interface
    is still configured (proxy ARP), and one that is missing still reads "waiting"."""
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    dev = ("dev", "cali0123456789")
    ip(netns, "-4", "route", "add", "10.65.0.9/32", *dev, "proto", "80", "scope", "link")
    desired = {"10.65.0.5/32": "cali0123456789", "10.65.0.6/32": "cali0000000000"}
    assert in_netns(netns, sync_disabled, desired) == {
        "10.65.0.5/32": "unmanaged",
        "10.65.0.6/32": "waiting",
    }
    assert routes(netns, "-4", "dev", "cali0123456789") == ["10.65.0.9"]
    proxy_arp = run_in(netns, "sysctl", "-n", "net.ipv4.conf.cali0123456789.proxy_arp")
    assert proxy_arp.stdout.strip() == "1"


def sync_priority(desired: dict[str, str]) -> dict[str, str]:
    targets = {dst: RouteTarget(name, priority=1024) for dst, name in desired.items()}
    return sync_routes(targets)


@pytest.mark.netns
def test_workload_routes_at_felix_normal_priority(netns: str) -> None:
    """As Felix: workload routes carry IPv4/IPv6NormalRoutePriority (1024) as their metric; an
    older route of another metric is replaced (not left beside the new one)."""
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    dev = ("dev", "cali0123456789")
    ip(netns, "-4", "route", "add", "10.65.0.5/32", *dev, "proto", "boot", "scope", "link")
    desired = {"10.65.0.5/32": "cali0123456789", "fd00::5/128": "cali0123456789"}
    assert in_netns(netns, sync_priority, desired) == dict.fromkeys(desired, "added")
    (route,) = ip(netns, "-4", "route", "show", "10.65.0.5").splitlines()
    assert "dev cali0123456789 scope link metric 1024" in route
    assert "metric 1024" in ip(netns, "-6", "route", "show", "fd00::5")
    assert in_netns(netns, sync_priority, desired) == dict.fromkeys(desired, "kept")


def test_floating_ips_are_routed_to_their_workload() -> None:
    """As Felix: a workload's floating IPs (ipNATs external addresses) are routed to its
    interface like its own addresses, at the normal priority."""
    state = NodeState()
    nat = (model.IPNAT("10.65.0.5", "172.16.0.9"),)
    endpoint = model.WorkloadEndpoint(
        "active", "cali1", "", (), ("10.65.0.5/32",), (), FrozenMap(), ipv4_nat=nat
    )
    key = model.WorkloadEndpointKey("node", "k8s", "ns/pod", "eth0")
    state.apply(m.WorkloadEndpointUpdate(key, endpoint, ()))
    manager = RoutesManager(state, RouteWriter(), "node")
    assert manager.desired() == {
        "10.65.0.5/32": RouteTarget("cali1", priority=1024),
        "172.16.0.9/32": RouteTarget("cali1", priority=1024),
    }


def _batch_with_a_refusal(index: int) -> list[int]:
    """Three routes in one batch, the middle one out of an interface that does not exist."""
    with Rtnl() as nl:
        return nl.request(
            [
                direct_route("10.70.0.1/32", index, proto=RTPROT_BOOT),
                direct_route("10.70.0.2/32", 999_999, proto=RTPROT_BOOT),
                direct_route("fd70::3/128", index, proto=RTPROT_BOOT, priority=1024),
            ]
        )


@pytest.mark.netns
def test_a_batch_answers_each_route_and_keeps_the_others(netns: str) -> None:
    """The route writer's batch (one send, rtnetlink on its own socket): the kernel's
    answer for each request in order, and one refused request leaves the others written."""
    ip(netns, "link", "add", "cali0123456789", "type", "veth", "peer", "name", "pod0")
    ip(netns, "link", "set", "cali0123456789", "up")
    index = int(ip(netns, "-o", "link", "show", "cali0123456789").split(":")[0])
    errors = in_netns(netns, _batch_with_a_refusal, index)
    assert errors == [0, errno.ENODEV, 0]
    assert routes(netns, "-4", "proto", "boot") == ["10.70.0.1"]
    assert routes(netns, "-6", "proto", "boot") == ["fd70::3"]
