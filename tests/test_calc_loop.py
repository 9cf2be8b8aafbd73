"""The async calc loop on Trio's autojump clock: leaky-bucket flushing, InSync once, health
and counters."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import trio
import trio.testing

from pyfelix import messages as m
from pyfelix.calc.async_loop import BUCKET_SIZE, FLUSH_INTERVAL, CalcLoop
from pyfelix.calc.decoupler import Decoupler
from pyfelix.collection import STARTUP_PAUSE
from pyfelix.syncer.api import SyncStatus
from pyfelix.syncer.processors import Converter
from pyfelix.throttle import LeakyBucket
from tests.calc_harness import example_state


async def test_leaky_bucket_rate(autojump_clock: trio.testing.MockClock) -> None:
    """Ten tokens at once, then one every 10 ms."""
    bucket = LeakyBucket(FLUSH_INTERVAL, BUCKET_SIZE)
    start = trio.current_time()
    for _ in range(10):
        await bucket.take()
    assert trio.current_time() == start
    for _ in range(5):
        await bucket.take()
    assert abs(trio.current_time() - start - 0.05) < 1e-6


async def test_loop_flushes_and_sends_in_sync_once(autojump_clock: trio.testing.MockClock) -> None:
    """The snapshot flows out, then one InSync; later updates flow without another InSync."""
    decoupler = Decoupler()
    send, receive = trio.open_memory_channel[m.Flush](10_000)
    loop = CalcLoop("node-a", decoupler, send)
    converter = Converter()
    state = example_state()
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        assert not loop.ready
        assert not loop.health.summary().ready
        for key, resource in state.items():
            decoupler.on_updates(converter.update(key, resource))
        decoupler.on_status(SyncStatus.IN_SYNC)
        await trio.sleep(1)
        received: list[m.ToDataplane] = []
        while True:
            try:
                received.extend(receive.receive_nowait())
            except trio.WouldBlock:
                break
        assert [type(x) for x in received].count(m.InSync) == 1
        assert isinstance(received[-1], m.InSync)
        assert loop.ready
        assert loop.health.summary().ready
        assert loop.health.summary().live
        assert sum(loop.updates_processed.values()) >= len(state)
        assert loop.messages_emitted == len(received)
        tier_key = ("Tier", "", "security")
        decoupler.on_updates(converter.update(tier_key, None))
        await trio.sleep(1)
        later: list[m.ToDataplane] = []
        while True:
            try:
                later.extend(receive.receive_nowait())
            except trio.WouldBlock:
                break
        assert later
        assert not any(isinstance(x, m.InSync) for x in later)
        nursery.cancel_scope.cancel()


async def test_storm_is_rate_limited(autojump_clock: trio.testing.MockClock) -> None:
    """A storm of updates over one second causes at most ~110 flushes (10 + 1 per 10 ms)."""
    decoupler = Decoupler()
    send, receive = trio.open_memory_channel[m.Flush](100_000)
    loop = CalcLoop("node-a", decoupler, send)
    converter = Converter()
    state = example_state()
    key = ("Tier", "", "security")
    tier = state[key]
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        for key2, resource in state.items():
            decoupler.on_updates(converter.update(key2, resource))
        decoupler.on_status(SyncStatus.IN_SYNC)
        start = trio.current_time()
        for i in range(1000):
            decoupler.on_updates(converter.update(key, None if i % 2 else tier))
            await trio.sleep(0.001)
        assert trio.current_time() - start >= 1.0
        assert loop.flushes <= 10 + 100 + 5
        nursery.cancel_scope.cancel()
    del receive


async def test_collector_is_paused_only_while_the_snapshot_loads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The cyclic collector is off from start to InSync, back on after STARTUP_PAUSE if
    InSync is late, and never left off when the loop stops."""
    for in_sync in (True, False):
        decoupler = Decoupler()
        send, _receive = trio.open_memory_channel[m.Flush](10_000)
        loop = CalcLoop("node-a", decoupler, send)
        async with trio.open_nursery() as nursery:
            await nursery.start(loop.run)
            assert not gc.isenabled()
            if in_sync:
                decoupler.on_status(SyncStatus.IN_SYNC)
                await trio.sleep(0.1)
                assert gc.isenabled()
            else:
                await trio.sleep(STARTUP_PAUSE - 1)
                assert not gc.isenabled()
                await trio.sleep(2)
                assert gc.isenabled()
            nursery.cancel_scope.cancel()
    decoupler = Decoupler()
    loop = CalcLoop("node-a", decoupler, trio.open_memory_channel[m.Flush](1)[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        nursery.cancel_scope.cancel()
    assert gc.isenabled()


def test_the_collector_is_switched_in_one_module() -> None:
    """Only pyfelix.collection turns the cyclic collector off, on or freezes the heap; every
    other module names the moment it is at."""
    root = Path(__file__).resolve().parent.parent
    switch = re.compile(r"\bgc\.(disable|enable|freeze|unfreeze|collect)\(")
    found = [
        str(path.relative_to(root))
        for package in ("src", "dataplane")
        for path in sorted((root / package).rglob("*.py"))
        if switch.search(path.read_text()) and path.name != "collection.py"
    ]
    assert found == []
    assert switch.search((root / "src" / "pyfelix" / "collection.py").read_text())
