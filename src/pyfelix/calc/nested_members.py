"""Nested CIDR members left out of an IP set, as Felix's member deduplicator does while
NFTablesMode is not Disabled: a member inside a wider member of the same set (a network set's
10.65.1.0/24 beside its 10.65.0.0/16, an endpoint's /32 inside either) is not sent, since the
wider one matches it anyway and an nftables interval set refuses overlapping elements. When
the wider member goes, the closest members inside it are sent again.

Only address members are deduplicated (not named ports' ``ip,proto:port``). Only a set's
members wider than one address are kept here (a set holds few); the others are parsed only
when a wider one comes or goes, from the member index's own count of the set's members. A
set without wide members costs its host members nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

#: A member as a network: (family's address bits, prefix length, network as an integer).
_Net = tuple[int, int, int]
_HOSTS = ("/32", "/128")


def _parse(member: str) -> _Net:
    network = ipaddress.ip_network(member, strict=False)
    return network.max_prefixlen, network.prefixlen, int(network.network_address)


def _covers(outer: _Net, inner: _Net) -> bool:
    """Whether ``outer`` strictly contains ``inner`` (same family)."""
    bits, length, net = outer
    return (
        bits == inner[0]
        and length < inner[1]
        and (inner[2] >> (bits - length)) == (net >> (bits - length))
    )


class NestedMembers:
    """Between the member index and the dataplane: which of a set's members are sent."""

    def __init__(
        self,
        on_added: Callable[[str, str], None],
        on_removed: Callable[[str, str], None],
        members_of: Callable[[str], Iterable[str]],
    ) -> None:
        self._added = on_added
        self._removed = on_removed
        #: Every member a set holds now (the member index's count).
        self._members_of = members_of
        #: Per set, its members wider than one address, parsed.
        self._wide: dict[str, dict[str, _Net]] = {}

    def added(self, set_id: str, member: str) -> None:
        """``member`` came into ``set_id`` (its first contributor)."""
        wide = self._wide.get(set_id)
        is_wide = "," not in member and not member.endswith(_HOSTS)
        if "," in member or not (wide or is_wide):
            self._added(set_id, member)
            return
        net = _parse(member)
        covered = wide is not None and any(_covers(w, net) for w in wide.values())
        if is_wide:
            self._wide.setdefault(set_id, {})[member] = net
        if covered:
            return
        self._added(set_id, member)
        if is_wide:
            # What it covers was sent: take back the closest ones (the rest were not sent).
            for inside in self._closest_inside(set_id, member, net):
                self._removed(set_id, inside)

    def removed(self, set_id: str, member: str) -> None:
        """``member`` left ``set_id`` (its last contributor went)."""
        wide = self._wide.get(set_id)
        is_wide = "," not in member and not member.endswith(_HOSTS)
        if "," in member or not (wide or is_wide):
            self._removed(set_id, member)
            return
        net = _parse(member)
        if wide is not None and is_wide:
            wide.pop(member, None)
            if not wide:
                del self._wide[set_id]
        if wide and any(_covers(w, net) for w in wide.values()):
            return  # it was never sent
        self._removed(set_id, member)
        if is_wide:
            for inside in self._closest_inside(set_id, member, net):
                self._added(set_id, inside)

    def _closest_inside(self, set_id: str, member: str, net: _Net) -> list[str]:
        """The set's members inside ``net`` that no other wide member covers: those
        ``net`` alone decides (sent without it, not with it)."""
        others = [n for m, n in self._wide.get(set_id, {}).items() if m != member]
        inside = []
        for candidate in self._members_of(set_id):
            if candidate == member or "," in candidate:
                continue
            parsed = _parse(candidate)
            if _covers(net, parsed) and not any(_covers(w, parsed) for w in others):
                inside.append(candidate)
        return sorted(inside)

    def dropped(self, set_id: str) -> None:
        """The set is gone: its wide members need not be remembered."""
        self._wide.pop(set_id, None)
