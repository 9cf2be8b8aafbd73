"""The label index: its matches always equal brute-force evaluation of every selector against
every item's effective labels, and it reports exactly the changes."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.calc.labelindex import FewItemsLabelIndex, LabelIndex
from pyfelix.selector import parse_selector

SELECTORS = [
    'a == "1"',
    'a in {"1", "2"}',
    "has(b)",
    "!has(b)",
    'a != "1"',
    'a == "1" && b == "x"',
    'a == "1" || b == "x"',
    "all()",
    'c starts with "p"',
    'a == "1" && a == "2"',
]
LABELS = st.dictionaries(st.sampled_from("abc"), st.sampled_from(["1", "2", "x", "pq"]), max_size=3)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("item"), st.integers(0, 4), LABELS, st.lists(st.sampled_from("PQ"), max_size=2)
        ),
        st.tuples(st.just("del-item"), st.integers(0, 4), st.just({}), st.just([])),
        st.tuples(st.just("parent"), st.sampled_from("PQ"), LABELS, st.just([])),
        st.tuples(st.just("del-parent"), st.sampled_from("PQ"), st.just({}), st.just([])),
        st.tuples(st.just("sel"), st.integers(0, len(SELECTORS) - 1), st.just({}), st.just([])),
        st.tuples(st.just("del-sel"), st.integers(0, len(SELECTORS) - 1), st.just({}), st.just([])),
        st.tuples(st.just("file"), st.just(0), st.just({}), st.just([])),
        st.tuples(
            st.just("sels"),
            st.lists(st.integers(0, len(SELECTORS) - 1), max_size=3),
            st.just({}),
            st.just([]),
        ),
    ),
    max_size=40,
)


def effective(
    own: Mapping[str, str], parents: list[str], parent_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    merged: dict[str, str] = {}
    for parent in reversed(parents):
        merged.update(parent_labels.get(parent, {}))
    merged.update(own)
    return merged


@attrs.frozen
class Endpoint:
    """An item as the model has it (``LabelIndex.update_labelled`` holds it itself)."""

    labels: dict[str, str] = attrs.field(eq=False)
    profile_ids: tuple[str, ...]


@settings(max_examples=400)
@given(OPS, st.booleans(), st.sampled_from([LabelIndex, FewItemsLabelIndex]), st.booleans())
def test_matches_equal_brute_force(
    ops: list[tuple[str, object, dict[str, str], list[str]]],
    batched: bool,
    kind: type[LabelIndex],
    labelled: bool,
) -> None:
    """After any sequence of changes (the items' labels filed ahead of need among them, and
    selectors given in batches), reported matches = evaluating everything from scratch, and
    a selector is reported matching something from before its first match is reported to
    after its last one stops; with a new item's matches, and a new or changed selector's,
    reported one by one, or at once (``batched``); by either kind of index, and each tells a
    selector's matches, and an item's, as they are; with items given as labels and parents,
    or as the caller's own objects (``labelled``), which the index then holds."""
    reported: set[tuple[Hashable, Hashable]] = set()
    matching: set[Hashable] = set()

    def started(sel: Hashable, item: Hashable) -> None:
        assert (sel, item) not in reported
        assert sel in matching
        reported.add((sel, item))

    def stopped(sel: Hashable, item: Hashable) -> None:
        assert (sel, item) in reported
        reported.discard((sel, item))

    def first(sel: Hashable) -> None:
        assert sel not in matching
        assert not any(s == sel for s, _ in reported)
        matching.add(sel)

    def last(sel: Hashable) -> None:
        assert sel in matching
        assert not any(s == sel for s, _ in reported)
        matching.discard(sel)

    def item_started(item: Hashable, sels: list[Hashable]) -> None:
        assert sels
        for sel in sels:
            started(sel, item)

    def selector_started(sel: Hashable, items: list[Hashable]) -> None:
        assert items
        for item in items:
            started(sel, item)

    index = kind(
        started,
        stopped,
        first,
        last,
        on_item_matches_started=item_started if batched else None,
        on_selector_matches_started=selector_started if batched else None,
    )
    items: dict[int, tuple[dict[str, str], list[str]]] = {}
    parents: dict[str, dict[str, str]] = {}
    selectors: set[int] = set()
    for op, target, labels, parent_ids in ops:
        if op == "item":
            assert isinstance(target, int)
            items[target] = (labels, parent_ids)
            if labelled:
                given_item = Endpoint(labels, tuple(parent_ids))
                index.update_labelled(target, given_item)
                assert index.labelled(target) is given_item
            else:
                index.update_item(target, labels, parent_ids)
        elif op == "del-item":
            assert isinstance(target, int)
            items.pop(target, None)
            index.delete_item(target)
        elif op == "parent":
            assert isinstance(target, str)
            parents[target] = labels
            index.update_parent_labels(target, labels)
        elif op == "del-parent":
            assert isinstance(target, str)
            parents.pop(target, None)
            index.delete_parent_labels(target)
        elif op == "file":  # the labels filed ahead, as a waiting dry-run has them
            index.file_items()
        elif op == "sel":
            assert isinstance(target, int)
            selectors.add(target)
            index.update_selector(target, parse_selector(SELECTORS[target]))
        elif op == "sels":
            assert isinstance(target, list)
            selectors.update(target)
            index.update_selectors([(t, parse_selector(SELECTORS[t])) for t in target])
        else:
            assert isinstance(target, int)
            selectors.discard(target)
            index.delete_selector(target)
        expected = {
            (s, i)
            for s in selectors
            for i, (own, ps) in items.items()
            if parse_selector(SELECTORS[s]).evaluate(effective(own, ps, parents))
        }
        assert reported == expected
        assert matching == {s for s, _ in expected}
        for s in range(len(SELECTORS)):
            assert index.matches(s) == {i for t, i in expected if t == s}
            assert index.has_matches(s) == (s in matching)
        for i in range(5):
            wanted = {s for s, t in expected if t == i}
            assert index.item_matches(i) == wanted
            now = list(index.item_matching_now(i))
            assert len(now) == len(wanted)
            assert set(now) == wanted


def test_selector_on_a_value_only_tests_items_with_that_value() -> None:
    """Adding a selector that names a label value evaluates only items carrying it; one that
    is no more than that value evaluates none, and matches them all the same."""
    started: list[tuple[Hashable, Hashable]] = []
    index = LabelIndex(lambda s, i: started.append((s, i)), lambda s, i: None)
    for i in range(1000):
        index.update_item(i, {"app": f"a{i}", "tier": "web" if i % 2 else "db"})
    only = parse_selector('app in {"a7", "a8"}')
    object.__setattr__(only, "_evaluate", None)  # evaluating it would raise
    index.update_selector("only", only)
    assert sorted(started) == [("only", 7), ("only", 8)]
    calls = 0
    selector = parse_selector('app == "a7" && tier != "db"')
    original = selector._evaluate

    def counting(labels: Mapping[str, str]) -> bool:
        nonlocal calls
        calls += 1
        return original(labels)

    object.__setattr__(selector, "_evaluate", counting)
    try:
        index.update_selector("s", selector)
    finally:
        object.__setattr__(selector, "_evaluate", original)
    assert calls == 1
    assert index.matches("s") == {7}


def test_a_selector_is_filed_where_it_shares_its_bucket_with_the_fewest() -> None:
    """Kubernetes policies all require `orchestrator == "k8s"` beside their namespace: filed
    under the namespace, a new pod is tested against its namespace's policies only, not
    against every policy of the cluster."""
    index = LabelIndex(lambda s, i: None, lambda s, i: None)
    selectors = [
        parse_selector(f'projectcalico.org/orchestrator == "k8s" && ns == "n{i}"')
        for i in range(200)
    ]
    for i, selector in enumerate(selectors):
        index.update_selector(i, selector)
    calls = 0
    originals = [selector._evaluate for selector in selectors]

    def counting(original: Callable[[Mapping[str, str]], bool]) -> Any:
        def evaluate(labels: Mapping[str, str]) -> bool:
            nonlocal calls
            calls += 1
            return original(labels)

        return evaluate

    for selector, original in zip(selectors, originals, strict=True):
        object.__setattr__(selector, "_evaluate", counting(original))
    index.update_item("pod", {"projectcalico.org/orchestrator": "k8s", "ns": "n7"})
    assert index.item_matches("pod") == {7}
    assert calls <= 2  # its namespace's, and at most the first one filed


def test_an_item_that_comes_after_selectors_asked_is_found_by_a_later_one() -> None:
    """Once a selector has asked for the items under a label, a new item is filed there as it
    comes (its own labels or, through a parent, inherited ones), and the next selector on
    that label finds it without testing every item."""
    index = LabelIndex(lambda s, i: None, lambda s, i: None)
    index.update_parent_labels("P", {"a": "1"})
    index.update_item("before", {"a": "1"})
    index.update_selector("first", parse_selector('a == "1"'))
    index.update_item("own", {"a": "1"})
    index.update_item("inherited", {"b": "x"}, ["P"])
    index.update_item("other", {"a": "2"})
    index.update_selector("later", parse_selector('a in {"1", "3"} && !has(c)'))
    assert index.matches("later") == {"before", "own", "inherited"}
    assert index.matches("first") == {"before", "own", "inherited"}


def test_an_item_that_comes_while_no_selector_is_left_is_found_by_the_next() -> None:
    """An item that comes when no selector is left to test it against (the last one
    deleted) is still filed under the labels asked about before, for the next selector."""
    index = LabelIndex(lambda s, i: None, lambda s, i: None)
    index.update_item("before", {"a": "1"})
    index.update_selector("first", parse_selector('a == "1"'))
    index.delete_selector("first")
    index.update_item("after", {"a": "1"})
    index.update_item("inherited", {}, ["P"])
    index.update_parent_labels("P", {"a": "1"})
    index.update_selector("next", parse_selector('a == "1"'))
    assert index.matches("next") == {"before", "after", "inherited"}


def test_a_change_of_any_parent_reaches_the_items_that_came_before_it() -> None:
    """Items name their parents before the parents' labels change (a snapshot's profiles
    come first, and nothing asks which items a parent has until one changes): a change of
    the second parent of an item, then of the first, is still an item's change."""
    started: list[tuple[Hashable, Hashable]] = []
    index = LabelIndex(lambda s, i: started.append((s, i)), lambda s, i: None)
    index.update_item("pod", {}, ["kns.a", "ksa.a.default"])
    index.update_item("other", {}, ["kns.b"])
    index.update_selector("account", parse_selector('sa == "default"'))
    index.update_selector("namespace", parse_selector('ns == "a"'))
    index.update_parent_labels("ksa.a.default", {"sa": "default"})
    assert started == [("account", "pod")]
    index.update_parent_labels("kns.a", {"ns": "a"})
    assert started == [("account", "pod"), ("namespace", "pod")]
    index.delete_item("pod")
    index.update_parent_labels("ksa.a.default", {"sa": "other"})
    assert index.matches("account") == frozenset()


@pytest.mark.parametrize("kind", [LabelIndex, FewItemsLabelIndex])
def test_a_selector_after_others_adds_to_each_items_matches(kind: type[LabelIndex]) -> None:
    """Policies arriving after a node's endpoints, each selecting all of them (the third
    and later find every endpoint matching two already): each endpoint's matches hold
    every one, and a policy's going takes it from each."""
    started: list[tuple[Hashable, frozenset[Hashable]]] = []
    index = kind(
        lambda s, i: None,
        lambda s, i: None,
        on_selector_matches_started=lambda s, items: started.append((s, frozenset(items))),
    )
    for endpoint in ("a", "b", "c"):
        index.update_item(endpoint, {"app": endpoint})
    for policy in range(4):
        index.update_selector(policy, parse_selector("all()"))
    assert started == [(p, frozenset({"a", "b", "c"})) for p in range(4)]
    for endpoint in ("a", "b", "c"):
        assert index.item_matches(endpoint) == {0, 1, 2, 3}
    index.delete_selector(2)
    assert index.item_matches("b") == {0, 1, 3}
    assert index.matches(3) == {"a", "b", "c"}
