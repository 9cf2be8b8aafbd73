"""The IP set member index: members of the active selector and named-port IP sets.

Every endpoint (local or remote) and network set is an item in a label index, inheriting its
profiles' labels; every active selector or named-port IP set is a selector in it. When a set
starts matching an item, the item's addresses (or ``ip,proto:port`` pairs for a named port)
become members. Members are reference counted, since two items may share an address, and a
network set's ``/0`` is split into two ``/1`` halves, which ipsets can hold.

What an item contributes to a set is not stored: it is a function of the set and the item, so
it is computed again from the item it came from when the item changes or stops matching. At
250k endpoints, a stored set per match and a tuple per counted member were a fifth of the
process's memory.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import cast

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, value_of
from pyfelix.calc.labelindex import LabelIndex
from pyfelix.calc.nested_members import NestedMembers
from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.selector import Selector, parse_selector
from pyfelix.syncer.api import Update

Item = model.WorkloadEndpoint | model.HostEndpoint | model.NetworkSet


def split_default_route(cidr: str) -> tuple[str, ...]:
    """ipsets cannot hold a /0: use the two /1 halves instead. ``cidr`` is canonical (as the
    converter writes it), so only a /0 needs parsing."""
    if not cidr.endswith("/0"):
        return (cidr,)
    network = ipaddress.ip_network(cidr, strict=False)
    if network.prefixlen:
        return (str(network),)
    return tuple(str(half) for half in network.subnets(new_prefix=1))


def _addresses(item: Item) -> tuple[str, ...]:
    if isinstance(item, model.NetworkSet):
        return tuple(m for net in item.nets for m in split_default_route(net))
    if isinstance(item, model.HostEndpoint):
        return tuple(
            f"{ip}/{32 if ':' not in ip else 128}"
            for ip in item.expected_ipv4_addrs + item.expected_ipv6_addrs
        )
    return item.ipv4_nets + item.ipv6_nets


_PROTOCOL_NAMES: dict[int | str, str] = {6: "tcp", 17: "udp", 132: "sctp"}


def _members(data: IPSetData, item: Item) -> frozenset[str]:
    if not data.named_port:
        return frozenset(_addresses(item))
    if isinstance(item, model.NetworkSet):
        return frozenset()
    out = set()
    for port in item.ports:
        protocol = _PROTOCOL_NAMES.get(port.protocol, str(port.protocol))
        if port.name != data.named_port or protocol != data.protocol:
            continue
        for address in _addresses(item):
            out.add(sys.intern(f"{address.split('/')[0]},{data.protocol}:{port.port}"))
    return frozenset(out)


class IPSetMemberIndex:
    """The members of every active selector and named-port IP set: endpoints and network
    sets matched through a label index, their addresses counted per set, each member sent
    when its first contributor comes and removed when its last goes.

    A set made active is matched at the next flush (or work ahead), with the others made
    active since: the rule scanner activates them one by one as policies become active, and
    the label index files the labels they ask about in one pass over the items for all."""

    def __init__(
        self,
        on_member_added: Callable[[str, str], None],
        on_member_removed: Callable[[str, str], None],
        *,
        suppress_nested: bool = False,
    ) -> None:
        """``suppress_nested``: leave out a member inside a wider member of its set, as Felix
        does unless NFTablesMode is Disabled (calc.nested_members)."""
        self._added = on_member_added
        self._removed = on_member_removed
        self._nested: NestedMembers | None = None
        if suppress_nested:
            self._nested = NestedMembers(on_member_added, on_member_removed, self._members_of)
            self._added, self._removed = self._nested.added, self._nested.removed
        self._index = LabelIndex(
            self._match_started,
            self._match_stopped,
            on_selector_matches_started=self._set_matches_started,
        )
        self._sets: dict[str, IPSetData] = {}
        #: Set id -> member -> how many matching items contribute it.
        self._counts: dict[str, dict[str, int]] = {}
        #: Sets made active since the last flush, not yet in the index.
        self._pending: dict[str, Selector] = {}

    def _members_of(self, set_id: str) -> Collection[str]:
        return self._counts.get(set_id, {}).keys()

    def flush(self) -> None:
        """Send what is left to send (the new sets' members, the nested members' wide
        changes settled)."""
        self._match_pending()
        if self._nested is not None:
            self._nested.flush()

    def work_ahead(self) -> None:
        """Match the sets made active since the last time, and file the endpoints' labels
        that came since (``LabelIndex.file_items``): the flush would, all at once."""
        self._match_pending()
        self._index.file_items()

    def _match_pending(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, {}
            self._index.update_selectors(pending.items())

    def register_with(self, updates: Dispatcher) -> None:
        for key_type in (model.WorkloadEndpointKey, model.HostEndpointKey, model.NetworkSetKey):
            updates.register(key_type, self._on_item_update)
        updates.register(model.ProfileLabelsKey, self._on_parent_labels_update)

    def _on_item_update(self, update: Update) -> None:
        value = update.value
        assert value is None or isinstance(
            value, model.WorkloadEndpoint | model.HostEndpoint | model.NetworkSet
        )
        self.on_item_update(update.key, value)

    def _on_parent_labels_update(self, update: Update) -> None:
        assert isinstance(update.key, model.ProfileLabelsKey)
        labels = value_of(update, model.ProfileLabels)
        self.on_parent_labels(update.key.name, labels.labels if labels else None)

    # IP sets (from the rule scanner).

    def on_ipset_active(self, data: IPSetData) -> None:
        if data.service:
            return
        self._sets[data.id] = data
        # Its members counted at the flush: until then, no item's change touches it.
        self._pending[data.id] = parse_selector(data.selector)

    def on_ipset_inactive(self, data: IPSetData) -> None:
        if data.service or data.id not in self._sets:
            return
        self._pending.pop(data.id, None)
        self._index.delete_selector(data.id)
        del self._sets[data.id]
        if self._nested is not None:
            self._nested.dropped(data.id)

    # Items (from the dispatcher).

    def on_item_update(self, item_id: Hashable, item: Item | None) -> None:
        if item is None:
            # Stopping the matches takes back what the item (still known) contributed.
            self._index.delete_item(item_id)
            return
        old = cast(Item | None, self._index.labelled(item_id))
        if old is not None:
            for set_id in self._index.item_matches(item_id):
                assert isinstance(set_id, str)
                data = self._sets[set_id]
                self._change(set_id, _members(data, old), _members(data, item))
        self._index.update_labelled(item_id, item)

    def on_parent_labels(self, parent: str, labels: Mapping[str, str] | None) -> None:
        if labels is None:
            self._index.delete_parent_labels(parent)
        else:
            self._index.update_parent_labels(parent, labels)

    # Membership.

    def _item(self, item_id: Hashable) -> Item:
        """The item as the index holds it (the one this index gave it)."""
        return cast(Item, self._index.labelled(item_id))

    def _match_started(self, set_id: Hashable, item_id: Hashable) -> None:
        self._set_matches_started(set_id, [item_id])

    def _set_matches_started(self, set_id: Hashable, item_ids: list[Hashable]) -> None:
        """``_match_started`` for each of a set's new items, in one frame."""
        assert isinstance(set_id, str)
        data, items, added = self._sets[set_id], self._index.labelled, self._added
        counts = self._counts.setdefault(set_id, {})
        for item_id in item_ids:
            for member in _members(data, cast(Item, items(item_id))):
                count = counts.get(member, 0)
                counts[member] = count + 1
                if not count:
                    added(set_id, member)

    def _match_stopped(self, set_id: Hashable, item_id: Hashable) -> None:
        assert isinstance(set_id, str)
        for member in _members(self._sets[set_id], self._item(item_id)):
            self._decrement(set_id, member)

    def _change(self, set_id: str, old: frozenset[str], new: frozenset[str]) -> None:
        if new == old:
            return
        counts = self._counts.setdefault(set_id, {})
        for member in new - old:
            count = counts.get(member, 0)
            counts[member] = count + 1
            if not count:
                self._added(set_id, member)
        for member in old - new:
            self._decrement(set_id, member)

    def _decrement(self, set_id: str, member: str) -> None:
        counts = self._counts[set_id]
        count = counts[member] - 1
        if count:
            counts[member] = count
            return
        del counts[member]
        if not counts:
            del self._counts[set_id]
        self._removed(set_id, member)
