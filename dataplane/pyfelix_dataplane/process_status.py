"""Process status, as Felix's dataplane reports it: a ProcessStatusUpdate (time and uptime)
every ReportingIntervalSecs (0: never), the first at start. Shared by the Linux and the
printing drivers; what the connector does with it (the datastore's status keys) is its own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import trio

from pyfelix import messages as m
from pyfelix_dataplane.state import NodeState

#: Felix's ReportingIntervalSecs default, while the configuration has not arrived.
DEFAULT_INTERVAL = 30.0


async def report_process_status(state: NodeState, to_calc: Any, started: float) -> None:
    """Report until cancelled. The first report goes out at start, before the configuration
    has arrived, so the interval is re-read at least every second."""
    while True:
        if state.config_text is not None and state.config.reporting_interval <= 0:
            await trio.sleep(1.0)
            continue
        sent_at = trio.current_time()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        await to_calc.send(m.ProcessStatusUpdate(stamp, sent_at - started))
        while True:
            interval = state.config.reporting_interval or DEFAULT_INTERVAL
            remaining = sent_at + interval - trio.current_time()
            if remaining <= 0:
                break
            await trio.sleep(min(remaining, 1.0))
