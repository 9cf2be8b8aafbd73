"""Process status from both drivers, as Felix reports it: every ReportingIntervalSecs, the
first at start, none at all with 0. The printing driver (``pyfelix run --dry-run``) used to
report every 30 s whatever the setting said."""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.driver import LinuxDriver
from pyfelix_dataplane.printing import PrintingDriver


def _reports(channel: trio.MemoryReceiveChannel[Any]) -> int:
    count = 0
    while True:
        try:
            message = channel.receive_nowait()
        except trio.WouldBlock:
            return count
        count += isinstance(message, m.ProcessStatusUpdate)


@pytest.mark.parametrize("driver", ["printing", "linux"])
@pytest.mark.parametrize(("interval", "expected"), [("5", 6), ("0", 0)])
async def test_reports_follow_reporting_interval_secs(
    autojump_clock: trio.testing.MockClock, driver: str, interval: str, expected: int
) -> None:
    send, receive = trio.open_memory_channel[Any](100)
    made = PrintingDriver(io.StringIO(), send) if driver == "printing" else LinuxDriver(send)
    async with trio.open_nursery() as nursery:
        await nursery.start(made.run)
        await trio.sleep(0.5)
        assert _reports(receive) == 1  # at start, before the configuration has come
        await made.apply(m.ConfigUpdate(FrozenMap({"ReportingIntervalSecs": interval})))
        await trio.sleep(29.9)
        assert _reports(receive) == expected
        nursery.cancel_scope.cancel()
