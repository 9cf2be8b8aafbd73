"""An index of selectors against labelled items, with label inheritance from parents.

Items are endpoints and network sets; parents are profiles whose labels the items inherit (an
item's own labels win; among parents, the first listed wins). The index reports when a selector
starts or stops matching an item.

It is indexed both ways by the selectors' label restrictions: a selector that requires
``app in {"a", "b"}`` is filed under (app, a) and (app, b), one that only requires ``has(app)``
under app, and only the rest (e.g. ``!has(x)``, ``a != "b"``) is tested against every item. So an
item change evaluates only selectors that could match it, and a new selector naming a label
value is tested only against items carrying that value.

The item side is only needed when a selector naming a label arrives or changes while items
exist. Items are filed in it lazily: an item added or changed is only noted, and the noted items
are filed when such a selector next asks for candidates (the first time, every item). A snapshot
whose selectors all arrive before most of its endpoints (policies listed first, or the IP set
selectors of policies made active by the first local endpoints) then never files the bulk of
them, and a running agent files them once, at its first such selector change.

Only the labels that selectors are filed under are filed on the item side: a selector asks for
the items under its own label and no other. A cluster's pods share a few labels with a value
each (the orchestrator, the service account, a team); filed, each was a set of every pod (120
MB for Felix's 100,000-pod tenants shape), and no selector asked for them. A selector filed
under a label not filed yet has it filed for every item then, in one pass; ``update_selectors``
takes a batch of selectors with one pass for all their labels.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol

from pyfelix.selector import Selector

SelectorID = Hashable
ItemID = Hashable
MatchCallback = Callable[[SelectorID, ItemID], None]
SelectorCallback = Callable[[SelectorID], None]
ItemMatchesCallback = Callable[[ItemID, list[SelectorID]], None]
SelectorMatchesCallback = Callable[[SelectorID, list[ItemID]], None]


#: The members filed under one label value: the member itself while there is one (nearly
#: every value of a namespace or pod label), a set from the second on. A set costs 216
#: bytes, and a 1-tuple around the one member 48, for each of 400,000 in a cluster of
#: tenants. A member is hashable, so never a set: ``_members`` tells them apart.
Bucket = Hashable | set[Hashable]
_NONE: frozenset[Hashable] = frozenset()


def _members(bucket: Bucket) -> AbstractSet[Hashable] | tuple[Hashable]:
    """A bucket's members (none for the None of a missing bucket)."""
    if isinstance(bucket, set):
        return bucket
    return () if bucket is None else (bucket,)  # type: ignore[return-value]


def _bucket_add(buckets: dict[Any, Bucket], key: Hashable, member: Hashable) -> None:
    bucket = buckets.get(key)
    if bucket is None:
        buckets[key] = member
    elif isinstance(bucket, set):
        bucket.add(member)
    elif bucket != member:
        buckets[key] = {bucket, member}


def _bucket_discard(buckets: dict[Any, Bucket], key: Hashable, member: Hashable) -> None:
    """Take ``member`` out; an emptied bucket's key goes."""
    bucket = buckets.get(key)
    if bucket is None:
        return
    if not isinstance(bucket, set):
        if bucket == member:
            del buckets[key]
        return
    bucket.discard(member)
    if not bucket:
        del buckets[key]


#: How a selector is filed: ("value", label, values), ("key", label, ()), ("all", None, ()) or
#: ("never", None, ()); by one value (nearly every selector: a namespace's, a tag's), only
#: (label, value), 56 bytes less for each of a cluster of tenants' 200,000 selectors.
Filing = tuple[str, str | None, tuple[str, ...]] | tuple[str, str]
_NEVER: Filing = ("never", None, ())
_ALL: Filing = ("all", None, ())


def _filing(filed: Filing) -> tuple[str, str | None, tuple[str, ...]]:
    """The (how, label, values) of a selector's filing."""
    if len(filed) == 2:
        return ("value", filed[0], (filed[1],))
    return filed


#: How many items' merged labels are kept, the last read (the node's own endpoints, read
#: against every policy selector: 10,000 policies on 200 endpoints merged 2 million times).
EFFECTIVE_KEPT = 4096


class Labelled(Protocol):
    """An item as the index holds it: its own labels and its parents (profiles), as the
    model's endpoints and network sets have them. Its effective labels are merged from them
    when they are read, not kept: kept, a pod's own labels merged with its namespace's were
    a dict per endpoint, 69 MB of 250,000 endpoints' snapshot."""

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def profile_ids(self) -> tuple[str, ...]: ...


class _Item:
    """An item given as its labels and parents (``update_item``)."""

    __slots__ = ("labels", "profile_ids")

    def __init__(self, labels: Mapping[str, str], profile_ids: tuple[str, ...]) -> None:
        self.labels = labels
        self.profile_ids = profile_ids


class LabelIndex:
    """Which items each selector matches, items inheriting their parents' (profiles')
    labels; calls back when a match starts or stops. What a match means is the caller's."""

    def __init__(
        self,
        on_match_started: MatchCallback,
        on_match_stopped: MatchCallback,
        on_first_match: SelectorCallback | None = None,
        on_last_match: SelectorCallback | None = None,
        *,
        on_item_matches_started: ItemMatchesCallback | None = None,
        on_selector_matches_started: SelectorMatchesCallback | None = None,
    ) -> None:
        """``on_first_match`` is called before a selector's first match is reported,
        ``on_last_match`` after its last one stops: what a caller would otherwise count for
        itself, for every match. ``on_item_matches_started``, if given, takes a new item's
        matches in one call in place of an ``on_match_started`` for each: on a node where
        10,000 policies select every local endpoint, a snapshot's 2M matches were that many
        calls through three frames. ``on_selector_matches_started`` does the same for a
        selector's new matches, when the selector comes after its items."""
        self._started = on_match_started
        self._item_started = on_item_matches_started
        self._selector_started = on_selector_matches_started
        self._stopped = on_match_stopped
        self._first = on_first_match
        self._last = on_last_match
        self._selectors: dict[SelectorID, Selector] = {}
        self._items: dict[ItemID, Labelled] = {}
        self._parent_labels: dict[str, Mapping[str, str]] = {}
        #: Recently merged effective labels, by the id of the item they were merged for
        #: (held beside them: an item's labels change by a new item, and a model value's
        #: own hash is its whole value's); a parent's change empties it.
        self._merged: dict[int, tuple[Labelled, Mapping[str, str]]] = {}
        #: Each parent's items, as a bucket (a tenant's namespace often holds one pod); None
        #: until a parent's labels change while it has items, then made in one pass: a
        #: snapshot's parents come before their items, and filing each of 250,000 endpoints
        #: under its two parents as it came was 4% of a dump's computing process.
        self._parent_items: dict[str, Bucket] | None = None
        self._matches: dict[SelectorID, set[ItemID]] = {}
        #: Each item's selectors, as a bucket: in a cluster's IP set index nearly every
        #: endpoint matches one selector (250,000 sets of one were 62 MB).
        self._item_matches: dict[ItemID, Bucket] = {}
        # Selector side of the index.
        self._sel_by_value: dict[str, dict[str, Bucket]] = {}
        self._sel_by_key: dict[str, set[SelectorID]] = {}
        self._sel_unindexed: set[SelectorID] = set()
        self._sel_filing: dict[SelectorID, Filing] = {}
        # Item side of the index, built on first use; the items changed since it was last
        # asked, in ``_unfiled`` (their labels are not in it).
        self._items_by_label: dict[str, dict[str, Bucket]] = {}
        #: The labels filed there: those that selectors were filed under when they asked.
        self._filed_labels: set[str] = set()
        self._item_side_built = False
        self._unfiled: dict[ItemID, None] = {}

    # ----------------------------------------------------------------------------- selectors

    def update_selector(self, sel_id: SelectorID, selector: Selector) -> None:
        if self._replace_selector(sel_id, selector):
            self._match_selector(sel_id, selector)

    def update_selectors(self, selectors: Iterable[tuple[SelectorID, Selector]]) -> None:
        """``update_selector`` for each, their new labels filed on the item side in one pass
        over the items (a flush's IP set selectors, which arrive one by one), and each
        candidate item's labels merged once to test all the selectors it is a candidate of
        (tested selector by selector, an item's merge was not kept from one to the next:
        3M merges for Felix's varied shape)."""
        changed = [(i, s) for i, s in selectors if self._replace_selector(i, s)]
        if self._items:
            labels = set()
            for sel_id, _ in changed:
                label = _filing(self._sel_filing[sel_id])[1]
                if label is not None:
                    labels.add(label)
            self._file_more_labels(labels)
        tests: dict[ItemID, list[SelectorID]] = {}
        for sel_id, selector in changed:
            self._match_selector(sel_id, selector, tests)
        items, selectors_by_id = self._items, self._selectors
        for item_id, sel_ids in tests.items():
            labels_of = self._effective(items[item_id])
            for sel_id in sel_ids:
                if selectors_by_id[sel_id].evaluate(labels_of):
                    self._start(sel_id, item_id)

    def _replace_selector(self, sel_id: SelectorID, selector: Selector) -> bool:
        """File ``selector`` on the selector side in place of ``sel_id``'s old one (False:
        it is the same)."""
        old = self._selectors.get(sel_id)
        if old is not None and old == selector:
            return False
        if old is not None:
            self._unfile_selector(sel_id)
        self._selectors[sel_id] = selector
        self._file_selector(sel_id, selector)
        return True

    def _match_selector(
        self,
        sel_id: SelectorID,
        selector: Selector,
        tests: dict[ItemID, list[SelectorID]] | None = None,
    ) -> None:
        """Stop the matches ``selector`` no longer has, start its new ones (those that need
        testing noted in ``tests`` instead, if given, for the caller to test)."""
        matches = set(self._selector_items(sel_id))
        items, effective = self._items, self._effective
        for item_id in matches:
            if not selector.evaluate(effective(items[item_id])):
                self._stop(sel_id, item_id)
        # A selector that is its one restriction (``has(k)``, ``k == "v"``) is filed under
        # it: its candidates are its matches, and their labels need no merging to tell.
        exact = selector.is_one_restriction
        started: list[ItemID] = []
        for item_id in self._candidate_items(sel_id):
            if item_id in matches:
                continue
            if exact:
                started.append(item_id)
            elif tests is not None:
                tests.setdefault(item_id, []).append(sel_id)
            elif selector.evaluate(effective(items[item_id])):
                started.append(item_id)
        if started:
            self._start_selector(sel_id, started)

    def delete_selector(self, sel_id: SelectorID) -> None:
        if sel_id not in self._selectors:
            return
        for item_id in list(self._selector_items(sel_id)):
            self._stop(sel_id, item_id)
        self._unfile_selector(sel_id)
        del self._selectors[sel_id]
        self._matches.pop(sel_id, None)

    def _file_selector(self, sel_id: SelectorID, selector: Selector) -> None:
        restrictions = selector.label_restrictions
        if not all(r.satisfiable for r in restrictions.values()):
            self._sel_filing[sel_id] = _NEVER
            return
        # Filed where it shares its buckets with the fewest selectors: by values alone, a
        # Kubernetes policy's `orchestrator == "k8s" && namespace == "ns"` went under
        # orchestrator, where every pod met every such policy (100,000 policies tested
        # against each local pod of a cluster of isolated namespaces).
        best: tuple[str, frozenset[str]] | None = None
        best_cost = 0
        for label, restriction in restrictions.items():
            values = restriction.values
            if values is None:
                continue
            filed = self._sel_by_value.get(label)
            cost = (
                len(values)
                if filed is None
                else sum(len(_members(filed.get(value))) + 1 for value in values)
            )
            if best is None or cost < best_cost:
                best, best_cost = (label, values), cost
        if best is not None:
            label, values = best
            by_value = self._sel_by_value.setdefault(label, {})
            for value in values:
                _bucket_add(by_value, value, sel_id)
            chosen = tuple(values)
            self._sel_filing[sel_id] = (
                (label, chosen[0]) if len(chosen) == 1 else ("value", label, chosen)
            )
            return
        present = sorted(k for k, r in restrictions.items() if r.must_be_present)
        if present:
            self._sel_by_key.setdefault(present[0], set()).add(sel_id)
            self._sel_filing[sel_id] = ("key", present[0], ())
            return
        self._sel_unindexed.add(sel_id)
        self._sel_filing[sel_id] = _ALL

    def _unfile_selector(self, sel_id: SelectorID) -> None:
        how, label, values = _filing(self._sel_filing.pop(sel_id))
        if how == "value" and label is not None:
            by_value = self._sel_by_value.get(label, {})
            for value in values:
                _bucket_discard(by_value, value, sel_id)
            if not by_value:
                self._sel_by_value.pop(label, None)
        elif how == "key" and label is not None:
            bucket = self._sel_by_key.get(label)
            if bucket is not None:
                bucket.discard(sel_id)
                if not bucket:
                    del self._sel_by_key[label]
        elif how == "all":
            self._sel_unindexed.discard(sel_id)

    def _candidate_items(self, sel_id: SelectorID) -> Iterable[ItemID]:
        how, label, values = _filing(self._sel_filing[sel_id])
        if how == "never" or not self._items:
            return ()
        if how == "all":
            return list(self._items)
        assert label is not None  # filed by a label's value, or by the label
        if label not in self._filed_labels:
            self._file_more_labels({label})
        self._file_unfiled()
        by_value = self._items_by_label.get(label, {})
        if how == "value":
            found: set[ItemID] = set()
            for value in values:
                found.update(_members(by_value.get(value)))
            return found
        return {i for bucket in by_value.values() for i in _members(bucket)}

    def file_items(self) -> None:
        """File the noted items' labels now, as a selector's next question would (work a
        caller with time on its hands does ahead: the dry-run, waiting for its next file).
        Before the first question nothing is filed: which labels to file is the selectors'."""
        if self._item_side_built:
            self._file_unfiled()

    def _file_more_labels(self, labels: set[str]) -> None:
        """File ``labels`` too, for every item filed already (a pass over the items)."""
        new = labels - self._filed_labels
        if not new:
            return
        self._filed_labels |= new
        if not self._item_side_built:
            return  # the first question files every item, under every filed label
        items, effective, by_label = self._items, self._effective, self._items_by_label
        unfiled = self._unfiled
        for item_id, item in items.items():
            if item_id in unfiled:
                continue  # filed below, under every label
            labels_of = effective(item)
            for key in new & labels_of.keys():
                _bucket_add(by_label.setdefault(key, {}), labels_of[key], item_id)
        self._file_unfiled()

    def _file_unfiled(self) -> None:
        """Bring the item side up to date (the first time, build it)."""
        items = self._items
        if not self._item_side_built:
            self._item_side_built = True
            unfiled: Iterable[ItemID] = items
        else:
            unfiled = self._unfiled
        for item_id in unfiled:
            self._file_labels(item_id, self._effective(items[item_id]))
        self._unfiled.clear()

    # -------------------------------------------------------------------------------- items

    def update_item(
        self, item_id: ItemID, labels: Mapping[str, str], parents: Sequence[str] = ()
    ) -> None:
        self.update_labelled(item_id, _Item(labels, tuple(parents)))

    def update_labelled(self, item_id: ItemID, item: Labelled) -> None:
        """``update_item`` with the caller's own item, which the index holds (``labelled``)
        in place of a copy of its labels and parents: the IP set index keeps no map of
        its items beside this one (a dict and an object an endpoint, 30 MB at 250,000)."""
        old = self._items.get(item_id)
        self._items[item_id] = item
        labels, parents = item.labels, item.profile_ids
        if old is not None and old.labels == labels and old.profile_ids == parents:
            return
        parent_items = self._parent_items
        if parent_items is not None:
            if old is not None:
                for parent in old.profile_ids:
                    _bucket_discard(parent_items, parent, item_id)
            for parent in parents:
                _bucket_add(parent_items, parent, item_id)
        if old is not None:
            self._recalculate(item_id, self._effective(old))
            return
        if not self._selectors:
            # Nothing to test it against (a dump's remote pods, before the local ones make
            # the policies' selectors active): its labels are merged when they are filed.
            self._file_item(item_id)
            return
        # A new item (a snapshot's endpoints, nearly all): it matches nothing yet, so only the
        # selectors that could match it are tested. Once selectors have asked, it is filed
        # now, with the labels merged for that test: noted for later, it was merged again
        # then (each of 250,000 endpoints inheriting their namespace's labels).
        labels = self._effective(item) if parents else labels
        if self._item_side_built:
            self._file_labels(item_id, labels)
        selectors = self._selectors
        matched = [s for s in self._candidate_selectors(labels) if selectors[s].evaluate(labels)]
        if matched:
            self._start_item(item_id, matched)

    def delete_item(self, item_id: ItemID) -> None:
        item = self._items.get(item_id)
        if item is None:
            return
        for sel_id in list(_members(self._item_matches.get(item_id))):
            self._stop(sel_id, item_id)
        self._unfile_item(item_id, self._effective(item))
        if self._parent_items is not None:
            for parent in item.profile_ids:
                _bucket_discard(self._parent_items, parent, item_id)
        del self._items[item_id]
        self._item_matches.pop(item_id, None)

    def update_parent_labels(self, parent: str, labels: Mapping[str, str]) -> None:
        known = self._parent_labels.get(parent)
        if known is not None and known == labels:  # (a map's == with None is slow)
            return
        before = self._children_labels(parent)
        self._parent_labels[parent] = labels
        self._merged.clear()
        for item_id, filed in before:
            self._recalculate(item_id, filed)

    def delete_parent_labels(self, parent: str) -> None:
        if parent not in self._parent_labels:
            return
        before = self._children_labels(parent)
        del self._parent_labels[parent]
        self._merged.clear()
        for item_id, filed in before:
            self._recalculate(item_id, filed)

    def _children_labels(self, parent: str) -> list[tuple[ItemID, Mapping[str, str]]]:
        """The parent's items with their effective labels, before the parent's change."""
        items = self._items
        if not items:
            return []
        parent_items = self._parent_items
        if parent_items is None:
            parent_items = self._parent_items = {}
            for item_id, item in items.items():
                for each in item.profile_ids:
                    _bucket_add(parent_items, each, item_id)
        return [(i, self._effective(items[i])) for i in _members(parent_items.get(parent))]

    def _effective(self, item: Labelled) -> Mapping[str, str]:
        parents, own = item.profile_ids, item.labels
        if not parents:
            return own
        kept = self._merged.get(id(item))
        if kept is not None and kept[0] is item:
            return kept[1]
        merged: dict[str, str]
        if len(parents) == 1:  # a pod's namespace profile: one merge, in C
            parent = self._parent_labels.get(parents[0])
            if not parent:
                return own
            merged = {**parent, **own}
        elif len(parents) == 2:  # a pod's namespace and service account profiles, so too
            first = self._parent_labels.get(parents[0])
            second = self._parent_labels.get(parents[1])
            if not first:
                if not second:
                    return own
                merged = {**second, **own}
            elif not second:
                merged = {**first, **own}
            else:
                merged = {**second, **first, **own}
        else:
            inherited = [self._parent_labels[p] for p in parents if p in self._parent_labels]
            if not inherited:
                return own
            merged = {}
            for labels in reversed(inherited):
                merged.update(labels)
            merged.update(own)
        if len(self._merged) >= EFFECTIVE_KEPT:
            self._merged.clear()
        self._merged[id(item)] = (item, merged)
        return merged

    def _recalculate(self, item_id: ItemID, filed: Mapping[str, str] | None) -> None:
        """Re-file the item under its effective labels and re-test candidate selectors."""
        item = self._items[item_id]
        labels = self._effective(item)
        if filed is not None:
            self._unfile_item(item_id, filed)
        self._file_item(item_id)
        matched = set(_members(self._item_matches.get(item_id)))
        candidates = self._candidate_selectors(labels)
        for sel_id in matched:
            if sel_id not in candidates or not self._selectors[sel_id].evaluate(labels):
                self._stop(sel_id, item_id)
        for sel_id in candidates:
            if sel_id not in matched and self._selectors[sel_id].evaluate(labels):
                self._start(sel_id, item_id)

    def _candidate_selectors(self, labels: Mapping[str, str]) -> set[SelectorID]:
        found = set(self._sel_unindexed)
        by_value, by_key = self._sel_by_value, self._sel_by_key
        keys = labels.keys()
        # Only the item's labels that some selector is filed under (a C-level intersection).
        for key in keys & by_value.keys():
            bucket = by_value[key].get(labels[key])
            if isinstance(bucket, set):
                found.update(bucket)
            elif bucket is not None:
                found.add(bucket)
        for key in keys & by_key.keys():
            found |= by_key[key]
        return found

    def _file_item(self, item_id: ItemID) -> None:
        """Note the item for filing (its labels are read when they are filed)."""
        if self._item_side_built:
            self._unfiled[item_id] = None

    def _file_labels(self, item_id: ItemID, labels: Mapping[str, str]) -> None:
        by_label = self._items_by_label
        # _bucket_add, inlined: every filed label of every filed item passes here (a fifth
        # of the graph's time for Felix's 250,000-endpoint benchmark, when each was filed).
        for key in labels.keys() & self._filed_labels:
            value = labels[key]
            values = by_label.get(key)
            if values is None:
                by_label[key] = {value: item_id}
                continue
            bucket = values.get(value)
            if bucket is None:
                values[value] = item_id
            elif isinstance(bucket, set):
                bucket.add(item_id)
            elif bucket != item_id:
                values[value] = {bucket, item_id}

    def _unfile_item(self, item_id: ItemID, labels: Mapping[str, str]) -> None:
        if not self._item_side_built or self._unfiled.pop(item_id, False) is None:
            return
        for key, value in labels.items():
            values = self._items_by_label.get(key)
            if values is None:
                continue
            _bucket_discard(values, value, item_id)
            if not values:
                del self._items_by_label[key]

    # ------------------------------------------------------------------------------ matches

    def _start(self, sel_id: SelectorID, item_id: ItemID) -> None:
        # Once for every (selector, item) pair (2M of them for 10,000 policies on 200 local
        # endpoints): no empty set made for a ``setdefault`` that does not need it.
        items = self._matches.get(sel_id)
        # _bucket_add written out: a frame more for each of 2M (policy, endpoint) pairs.
        bucket = self._item_matches.get(item_id)
        if bucket is None:
            self._item_matches[item_id] = sel_id
        elif isinstance(bucket, set):
            bucket.add(sel_id)
        elif bucket != sel_id:
            self._item_matches[item_id] = {bucket, sel_id}
        if items is None:
            self._matches[sel_id] = {item_id}
            if self._first is not None:
                self._first(sel_id)
        else:
            items.add(item_id)
        self._started(sel_id, item_id)

    def _start_item(self, item_id: ItemID, sel_ids: list[SelectorID]) -> None:
        """``_start`` for each of a new item's first matches, in one frame."""
        if self._item_started is None:
            for sel_id in sel_ids:
                self._start(sel_id, item_id)
            return
        self._item_matches[item_id] = set(sel_ids) if len(sel_ids) > 1 else sel_ids[0]
        matches, first = self._matches, self._first
        for sel_id in sel_ids:
            items = matches.get(sel_id)
            if items is None:
                matches[sel_id] = {item_id}
                if first is not None:
                    first(sel_id)
            else:
                items.add(item_id)
        self._item_started(item_id, sel_ids)

    def _start_selector(self, sel_id: SelectorID, item_ids: list[ItemID]) -> None:
        """``_start`` for each of a selector's new matches, in one frame: on the selector's
        side only a count or a set's update (``_note_selector_matches``), one callback."""
        if self._selector_started is None:
            for item_id in item_ids:
                self._start(sel_id, item_id)
            return
        item_matches = self._item_matches
        for item_id in item_ids:  # _bucket_add written out, as in _start
            bucket = item_matches.get(item_id)
            if bucket is None:
                item_matches[item_id] = sel_id
            elif isinstance(bucket, set):
                bucket.add(sel_id)
            elif bucket != sel_id:
                item_matches[item_id] = {bucket, sel_id}
        if self._note_selector_matches(sel_id, item_ids) and self._first is not None:
            self._first(sel_id)
        self._selector_started(sel_id, item_ids)

    def _note_selector_matches(self, sel_id: SelectorID, item_ids: list[ItemID]) -> bool:
        """Add new matches to the selector's side; True if they are its first."""
        items = self._matches.get(sel_id)
        if items is None:
            self._matches[sel_id] = set(item_ids)
            return True
        items.update(item_ids)
        return False

    def _stop(self, sel_id: SelectorID, item_id: ItemID) -> None:
        # Sets exist only while not empty: most selectors and items have no match at all.
        items = self._matches.get(sel_id)
        last = False
        if items is not None:
            items.discard(item_id)
            if not items:
                del self._matches[sel_id]
                last = True
        _bucket_discard(self._item_matches, item_id, sel_id)
        self._stopped(sel_id, item_id)
        if last and self._last is not None:
            self._last(sel_id)

    def _selector_items(self, sel_id: SelectorID) -> AbstractSet[ItemID]:
        """The items ``sel_id`` matches (the index's own set: read, never change, it)."""
        return self._matches.get(sel_id, _NONE)

    def has_matches(self, sel_id: SelectorID) -> bool:
        return sel_id in self._matches

    def matches(self, sel_id: SelectorID) -> frozenset[ItemID]:
        return frozenset(self._selector_items(sel_id))

    def item_matches(self, item_id: ItemID) -> frozenset[SelectorID]:
        return frozenset(_members(self._item_matches.get(item_id)))

    def matching_now(self, sel_id: SelectorID) -> AbstractSet[ItemID]:
        """The items ``sel_id`` matches, the index's own set (not a copy, which for a
        selector of every endpoint costs what the set does): read it before the index
        changes again, never change it."""
        return self._selector_items(sel_id)

    def item_matching_now(self, item_id: ItemID) -> Collection[SelectorID]:
        """The selectors matching ``item_id``, as ``matching_now`` gives them."""
        return _members(self._item_matches.get(item_id))

    def labelled(self, item_id: ItemID) -> Labelled | None:
        """The item as it was given (``update_labelled``'s own object)."""
        return self._items.get(item_id)

    def labels_of(self, item_id: ItemID) -> Mapping[str, str] | None:
        item = self._items.get(item_id)
        return None if item is None else self._effective(item)


class FewItemsLabelIndex(LabelIndex):
    """A label index of few items (a node's own endpoints, for the policies' selectors),
    which keeps no set of items for each selector, only their count: a selector's items are
    found by looking in each item's set of selectors when it changes or goes, or is asked
    about. Where 10,000 policies select all of 200 endpoints, that is 2M pairs not held a
    second time (76 MB), and a set operation less for each. Its ``_start`` and
    ``_start_item`` are the base's with a count where the base adds to a set, written out
    rather than calling a method for that step: a frame more for each of those 2M pairs."""

    def __init__(
        self,
        on_match_started: MatchCallback,
        on_match_stopped: MatchCallback,
        on_first_match: SelectorCallback | None = None,
        on_last_match: SelectorCallback | None = None,
        *,
        on_item_matches_started: ItemMatchesCallback | None = None,
        on_selector_matches_started: SelectorMatchesCallback | None = None,
    ) -> None:
        super().__init__(
            on_match_started,
            on_match_stopped,
            on_first_match,
            on_last_match,
            on_item_matches_started=on_item_matches_started,
            on_selector_matches_started=on_selector_matches_started,
        )
        self._counts: dict[SelectorID, int] = {}

    def _selector_items(self, sel_id: SelectorID) -> AbstractSet[ItemID]:
        if sel_id not in self._counts:
            return _NONE
        return {i for i, bucket in self._item_matches.items() if sel_id in _members(bucket)}

    def has_matches(self, sel_id: SelectorID) -> bool:
        return sel_id in self._counts

    def _start(self, sel_id: SelectorID, item_id: ItemID) -> None:
        # _bucket_add written out: a frame more for each of 2M (policy, endpoint) pairs.
        bucket = self._item_matches.get(item_id)
        if bucket is None:
            self._item_matches[item_id] = sel_id
        elif isinstance(bucket, set):
            bucket.add(sel_id)
        elif bucket != sel_id:
            self._item_matches[item_id] = {bucket, sel_id}
        count = self._counts.get(sel_id, 0)
        self._counts[sel_id] = count + 1
        if not count and self._first is not None:
            self._first(sel_id)
        self._started(sel_id, item_id)

    def _start_item(self, item_id: ItemID, sel_ids: list[SelectorID]) -> None:
        if self._item_started is None:
            for sel_id in sel_ids:
                self._start(sel_id, item_id)
            return
        self._item_matches[item_id] = set(sel_ids) if len(sel_ids) > 1 else sel_ids[0]
        counts, first = self._counts, self._first
        for sel_id in sel_ids:
            count = counts.get(sel_id, 0)
            counts[sel_id] = count + 1
            if not count and first is not None:
                first(sel_id)
        self._item_started(item_id, sel_ids)

    def _note_selector_matches(self, sel_id: SelectorID, item_ids: list[ItemID]) -> bool:
        count = self._counts.get(sel_id, 0)
        self._counts[sel_id] = count + len(item_ids)
        return not count

    def _stop(self, sel_id: SelectorID, item_id: ItemID) -> None:
        if sel_id not in _members(self._item_matches.get(item_id)):
            return
        _bucket_discard(self._item_matches, item_id, sel_id)
        count = self._counts[sel_id] - 1
        if count:
            self._counts[sel_id] = count
        else:
            del self._counts[sel_id]
        self._stopped(sel_id, item_id)
        if not count and self._last is not None:
            self._last(sel_id)
