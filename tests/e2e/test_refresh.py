"""Refresh and interfaces: each kernel area on its own interval, an interface that appears later, a
workload's interface settings and their cleanup."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.cluster import (
    CLIENT_IP,
    MANIFESTS,
    SERVER_IP,
    Cluster,
)
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns


def test_each_area_refreshes_on_its_own_interval(tmp_path: Path) -> None:
    """RouteRefreshInterval repairs a deleted route while, with a long IptablesRefreshInterval,
    a flushed chain stays flushed: each area of the kernel is re-read on its own period."""
    (tmp_path / "base.yaml").write_text(
        MANIFESTS.replace("iptablesRefreshInterval: 1s", "iptablesRefreshInterval: 600s")
    )
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent()
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080))
        saved = run_in(cluster.node, "iptables-nft-save", "-t", "filter").stdout
        chain = next(
            line.split()[1] for line in saved.splitlines() if line.startswith("-A cali-tw-calisrv")
        )
        run_in(cluster.node, "iptables-nft", "-F", chain)
        run_in(cluster.node, "ip", "route", "del", f"{SERVER_IP}/32")

        def route_back() -> bool:
            routes = run_in(cluster.node, "ip", "route", "show", "proto", "boot").stdout
            return f"{SERVER_IP} dev calisrv" in routes

        assert eventually(route_back, timeout=5)
        time.sleep(1.5)
        listed = run_in(cluster.node, "iptables-nft", "-S", chain).stdout.splitlines()
        assert listed == [f"-N {chain}"]


def test_interface_appearing_later_is_routed_at_once(tmp_path: Path) -> None:
    """With a long refresh interval, a workload whose interface appears after the agent has
    started is still routed and reachable within seconds: the netlink monitor triggers it."""
    (tmp_path / "base.yaml").write_text(
        MANIFESTS.replace("RefreshInterval: 1s", "RefreshInterval: 600s")
    )
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent()
        time.sleep(1.5)
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080), timeout=5)


def test_workload_interface_settings_and_cleanup(tmp_path: Path) -> None:
    """As Felix: proxy ARP and forwarding on a workload's interface and its MAC pinned in the
    node's ARP table; deleting the endpoint removes its route and its chains."""
    mac = "02:00:0a:41:00:02"
    pinned = MANIFESTS.replace("interfaceName: calisrv,", f"interfaceName: calisrv, mac: '{mac}',")
    base, client = pinned.rsplit("---", 1)
    (tmp_path / "base.yaml").write_text(base)
    (tmp_path / "client.yaml").write_text(client)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        cluster.add_workload("calisrv", SERVER_IP, [8080], mac=mac)
        cluster.add_workload("calicli", CLIENT_IP)
        cluster.start_agent(log=tmp_path / "agent.log")
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        node = cluster.node
        neighbours = run_in(node, "ip", "neigh", "show", "dev", "calisrv").stdout
        assert f"{SERVER_IP} lladdr {mac} PERMANENT" in neighbours
        for setting in ("proxy_arp", "forwarding"):
            value = run_in(node, "cat", f"/proc/sys/net/ipv4/conf/calisrv/{setting}").stdout
            assert value.strip() == "1", setting

        (tmp_path / "client.yaml").unlink()

        def client_gone() -> bool:
            routes = run_in(node, "ip", "route", "show", "proto", "boot").stdout
            saved = run_in(node, "iptables-nft-save", "-t", "filter").stdout
            return f"{CLIENT_IP} dev calicli" not in routes and ":cali-tw-calicli" not in saved

        assert eventually(client_gone, timeout=5)
        assert "cannot remove" not in (tmp_path / "agent.log").read_text()
        assert f"{SERVER_IP} dev calisrv" in run_in(node, "ip", "route").stdout
