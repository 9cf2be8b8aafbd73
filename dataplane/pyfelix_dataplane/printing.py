"""The printing driver behind ``pyfelix run --dry-run``: a dry-run dataplane that says what it
would do. Every message is printed as it arrives; after each burst (checked every
``render_interval``), the chains that changed are printed in full and IP set changes as the
``add``/``del`` lines ipset would be given."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

import attrs
import trio

from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.driver import ToCalc
from pyfelix_dataplane.dryrun import describe_message
from pyfelix_dataplane.process_status import report_process_status
from pyfelix_dataplane.rules.ipsets import ipset_name, member_version
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import render
from pyfelix_dataplane.state import NodeState

ChainKey = tuple[int, str, str]
#: A render may take a fifth of the time at most: the wait before the next is four times its
#: cost (1,000 new endpoints under 1,000 policies fell 5 s behind with a fixed 0.1 s).
RENDER_SHARE_INVERSE = 4


def _set_event() -> trio.Event:
    event = trio.Event()
    event.set()
    return event


@attrs.define(eq=False)
class PrintingDriver:
    out: TextIO
    to_calc: ToCalc
    render_interval: float = 0.1
    #: Told (ready) after every round of the loop, as Felix's dataplane reports its health.
    report_health: Callable[[bool], None] = lambda ready: None
    state: NodeState = attrs.Factory(NodeState)
    #: Not used: this driver probes nothing.
    startup_config: FelixConfig | None = None
    #: Set from the start: this driver writes nothing to wait for.
    writing: trio.Event = attrs.Factory(_set_event)
    #: Messages by type for Felix's metrics (this driver writes nothing, so times nothing).
    stats: DataplaneStats = attrs.Factory(DataplaneStats)
    _started: float = 0.0
    _dirty: bool = False
    _chains: dict[ChainKey, Chain] = attrs.Factory(dict)
    _members: dict[str, frozenset[str]] = attrs.Factory(dict)

    async def apply(self, msg: m.ToDataplane) -> None:
        self.state.apply(msg)
        self.stats.messages[type(msg).__name__] += 1
        self._dirty = True
        print(describe_message(msg), file=self.out, flush=True)
        if isinstance(msg, m.InSync):
            await self.to_calc.send(m.DataplaneInSync())

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_process_status, self.state, self.to_calc, self._started)
            task_status.started()
            cost = 0.0
            while True:
                self.report_health(self.state.in_sync)
                # A render is of the whole node: at most a fifth of the time goes to it, so
                # the messages behind a busy node's bursts are not held up (they are
                # printed as they come; the chains coalesce until the next render).
                await trio.sleep(max(self.render_interval, cost * RENDER_SHARE_INVERSE))
                if self._dirty and self.state.in_sync:
                    self._dirty = False
                    started = time.monotonic()
                    self.print_changes()
                    cost = time.monotonic() - started

    def print_changes(self) -> None:
        """Print chains that differ from the last render, and IP set member changes."""
        rendered = render(self.state)
        chains = {
            (version, table, chain.name): chain
            for version, tables in rendered.chains.items()
            for table, table_chains in tables.items()
            for chain in table_chains
        }
        lines = []
        for key in sorted(chains.keys() | self._chains.keys()):
            version, table, name = key
            new, old = chains.get(key), self._chains.get(key)
            if new == old:
                continue
            if new is None:
                lines.append(f"# IPv{version} {table}: chain {name} removed")
            else:
                lines.append(f"# IPv{version} {table}: chain {name}")
                lines.extend(new.lines())
        members = {set_id: frozenset(s) for set_id, (_, s) in self.state.ipsets.items()}
        for set_id in sorted(members.keys() | self._members.keys()):
            new_members = members.get(set_id, frozenset())
            old_members = self._members.get(set_id, frozenset())
            for member in sorted(new_members - old_members):
                lines.append(f"add {ipset_name(set_id, member_version(member))} {member}")
            for member in sorted(old_members - new_members):
                lines.append(f"del {ipset_name(set_id, member_version(member))} {member}")
        self._chains, self._members = chains, members
        if lines:
            print("\n".join(lines), file=self.out, flush=True)
