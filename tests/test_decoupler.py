"""The decoupler: coalescing per key, order of first arrival, bounded memory, statuses that never
overtake the updates queued before them."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.calc.decoupler import Decoupler, Delivery
from pyfelix.syncer.api import SyncStatus, Update


def put(key: str, value: str) -> Update:
    return Update(key, value)


def delete(key: str) -> Update:
    return Update(key, None)


def drain(decoupler: Decoupler) -> list[Delivery]:
    out = []
    while (delivery := decoupler.poll()) is not None:
        out.append(delivery)
    return out


def test_later_update_replaces_queued_one_in_place() -> None:
    """A key updated while queued is delivered once, with its last value, in its first place."""
    d = Decoupler()
    d.on_updates([put("a", "1"), put("b", "1"), put("a", "2")])
    assert drain(d) == [(put("a", "2"), put("b", "1"))]


def test_delete_of_never_delivered_key_cancels_it() -> None:
    """Add then delete before delivery: the consumer hears nothing about that key."""
    d = Decoupler()
    d.on_updates([put("a", "1"), put("b", "1"), delete("a")])
    assert drain(d) == [(put("b", "1"),)]
    d.on_updates([delete("never-seen")])
    assert drain(d) == []


def test_delete_of_delivered_key_is_delivered() -> None:
    """Once the consumer has a key, its deletion must reach it, even after a queued update."""
    d = Decoupler()
    d.on_updates([put("a", "1")])
    drain(d)
    d.on_updates([put("a", "2"), delete("a")])
    assert drain(d) == [(delete("a"),)]
    d.on_updates([delete("a")])
    assert drain(d) == []


def test_batches_of_at_most_max_batch() -> None:
    """Large snapshots arrive in batches of at most 100 updates, in arrival order."""
    d = Decoupler()
    d.on_updates([put(f"k{i:03}", "v") for i in range(250)])
    batches = [b for b in drain(d) if isinstance(b, tuple)]
    assert [len(b) for b in batches] == [100, 100, 50]
    keys = [u.key for b in batches for u in b]
    assert keys == [f"k{i:03}" for i in range(250)]


def test_status_waits_for_earlier_updates_and_coalesces() -> None:
    """IN_SYNC comes after the updates before it; consecutive statuses keep only the latest."""
    d = Decoupler(max_batch=2)
    d.on_status(SyncStatus.WAIT_FOR_DATASTORE)
    d.on_updates([put("a", "1"), put("b", "1"), put("c", "1")])
    d.on_status(SyncStatus.RESYNC_IN_PROGRESS)
    d.on_status(SyncStatus.IN_SYNC)
    d.on_updates([put("d", "1")])
    assert drain(d) == [
        (put("a", "1"), put("b", "1")),
        (put("c", "1"),),
        SyncStatus.IN_SYNC,
        (put("d", "1"),),
    ]


def test_memory_is_bounded_by_keys() -> None:
    """A million updates to ten keys queue ten entries."""
    d = Decoupler()
    for i in range(100_000):
        d.on_updates([put(f"k{i % 10}", str(i))])
    assert d.queued_keys == 10


async def test_get_waits_for_producer() -> None:
    """get() parks until the syncer pushes something, then returns it."""
    d = Decoupler()
    got: list[Delivery] = []

    async def consume() -> None:
        got.append(await d.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        d.on_updates([put("a", "1")])
    assert got == [(put("a", "1"),)]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abcdef"), st.integers(0, 3)),
        st.tuples(st.just("del"), st.sampled_from("abcdef"), st.just(0)),
        st.tuples(st.just("drain"), st.just(""), st.integers(1, 3)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(OPS)
def test_output_applied_equals_input_applied(ops: list[tuple[str, str, int]]) -> None:
    """Applying everything delivered to a dict gives the same dict as applying the input."""
    d = Decoupler(max_batch=2)
    truth: dict[str, str] = {}
    seen: dict[str, str] = {}

    def apply(deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            assert isinstance(delivery, tuple)
            for update in delivery:
                if update.value is None:
                    assert update.key in seen, "delete for a key the consumer never had"
                    del seen[str(update.key)]
                else:
                    seen[str(update.key)] = str(update.value)

    for op, key, n in ops:
        if op == "put":
            d.on_updates([put(key, str(n))])
            truth[key] = str(n)
        elif op == "del":
            d.on_updates([delete(key)])
            truth.pop(key, None)
        else:
            for _ in range(n):
                delivery = d.poll()
                if delivery is not None:
                    apply([delivery])
        assert d.queued_keys <= 6
    apply(drain(d))
    assert seen == truth
