"""The interface monitor against the kernel, in a namespace: a link created, changed and
removed, and an address added and removed, each reach the driver's callback by the
interface's name; a burst larger than the socket's buffer still reports every interface."""

from __future__ import annotations

import subprocess

import pytest
import trio

from pyfelix_dataplane.linux.monitor import watch_interfaces
from tests.netns import in_netns

STEPS = [
    ["ip", "link", "add", "cali0mon", "type", "veth", "peer", "name", "pod0mon"],
    ["ip", "link", "set", "cali0mon", "up"],
    ["ip", "address", "add", "192.0.2.1/32", "dev", "cali0mon"],
    ["ip", "-6", "address", "add", "2001:db8::1/128", "dev", "cali0mon", "nodad"],
    ["ip", "address", "del", "192.0.2.1/32", "dev", "cali0mon"],
    ["ip", "link", "del", "cali0mon"],
]


def watch_steps() -> list[list[str]]:
    """The interface names reported after each step; runs inside the namespace."""

    async def main() -> list[list[str]]:
        seen: list[str] = []
        reports: list[list[str]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_interfaces, seen.append)
            await trio.sleep(0.2)
            for step in STEPS:
                await trio.run_process(step)
                await trio.sleep(0.2)
                reports.append(sorted(set(seen)))
                seen.clear()
            nursery.cancel_scope.cancel()
        return reports

    return trio.run(main)


@pytest.mark.netns
def test_link_and_address_events_reach_the_driver_by_name(netns: str) -> None:
    reports = in_netns(netns, watch_steps)
    assert reports[0] == ["cali0mon", "pod0mon"]
    for report in reports[1:]:
        assert "cali0mon" in report, reports


def watch_burst(count: int) -> set[str]:
    """The names reported while ``count`` veth pairs are created at once, with the socket's
    receive buffer at its smallest; runs inside the namespace."""

    async def main() -> set[str]:
        seen: set[str] = set()
        batch = "".join(f"link add cali{i}b type veth peer name pod{i}b\n" for i in range(count))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_interfaces, seen.add)
            await trio.sleep(0.2)
            # The watcher does not run while the burst is made: its socket overflows.
            subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True)  # noqa: ASYNC221
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()
        return seen

    return trio.run(main)


@pytest.mark.netns
def test_a_burst_that_overflows_the_socket_reports_every_interface(netns: str) -> None:
    seen = in_netns(netns, watch_burst, 2000)
    assert {f"cali{i}b" for i in range(2000)} <= seen
