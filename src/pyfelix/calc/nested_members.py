"""Nested CIDR members left out of an IP set, as Felix's member deduplicator does while
NFTablesMode is not Disabled: a member inside a wider member of the same set (a network set's
10.65.1.0/24 beside its 10.65.0.0/16, an endpoint's /32 inside either) is not sent, since the
wider one matches it anyway and an nftables interval set refuses overlapping elements. When
the wider member goes, the closest members inside it are sent again.

Only address members are deduplicated (not named ports' ``ip,proto:port``). Only a set's
members wider than one address are kept here (a set holds few); the others are parsed only
when a wider one comes or goes. A set without wide members costs its host members nothing.

A wide member's coming or going is settled at the next ``flush``, once for the set, from its
members then: settled at once, each of a network set's CIDRs scanned every member of a set
that also holds the cluster's pods (hours, for a few thousand CIDRs beside 50,000 pods). Until
the flush, nothing is sent for that set but named-port members.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection

#: A member as a network: (family's address bits, prefix length, network as an integer).
_Net = tuple[int, int, int]
_HOSTS = ("/32", "/128")


def _parse(member: str) -> _Net:
    """The member's network (host bits cleared). ``inet_pton`` in C where it reads the
    address, ``ipaddress`` otherwise: a wide member's coming or going parses every member of
    its set, and ``ip_network`` took 10 us of it each."""
    address, _, length = member.partition("/")
    bits = 128 if ":" in address else 32
    try:
        raw = socket.inet_pton(socket.AF_INET6 if bits == 128 else socket.AF_INET, address)
    except OSError:
        raw = b""
    if not length:
        prefix = bits
    elif length.isascii() and length.isdigit():
        prefix = int(length)
    else:
        prefix = -1  # ipaddress says what is wrong with it
    if not raw or not 0 <= prefix <= bits:
        network = ipaddress.ip_network(member, strict=False)
        return network.max_prefixlen, network.prefixlen, int(network.network_address)
    host_bits = bits - prefix
    return bits, prefix, int.from_bytes(raw, "big") >> host_bits << host_bits


class _Wide:
    """A set's members wider than one address, by network and by prefix length: whether one
    covers a network is a lookup per length in use (a set's few), not a test per member
    (hundreds, in a set of network sets' CIDRs, against each of its thousands of hosts)."""

    __slots__ = ("lengths", "members", "nets")

    def __init__(self) -> None:
        self.members: dict[str, _Net] = {}
        #: How many members have each (address bits, prefix length).
        self.lengths: dict[tuple[int, int], int] = {}
        #: How many members have each network (two spellings of one network are two).
        self.nets: dict[_Net, int] = {}

    def add(self, member: str, net: _Net) -> None:
        if member in self.members:
            return
        self.members[member] = net
        shape = net[:2]
        self.lengths[shape] = self.lengths.get(shape, 0) + 1
        self.nets[net] = self.nets.get(net, 0) + 1

    def copy(self) -> _Wide:
        other = _Wide()
        other.members, other.lengths, other.nets = (
            dict(self.members),
            dict(self.lengths),
            dict(self.nets),
        )
        return other

    def discard(self, member: str) -> None:
        net = self.members.pop(member, None)
        if net is None:
            return
        shape = net[:2]
        if self.lengths[shape] > 1:
            self.lengths[shape] -= 1
        else:
            del self.lengths[shape]
        if self.nets[net] > 1:
            self.nets[net] -= 1
        else:
            del self.nets[net]

    def covers(self, inner: _Net) -> bool:
        """Whether a member strictly contains ``inner``."""
        bits, length, value = inner
        nets = self.nets
        for family, prefix in self.lengths:
            if family == bits and prefix < length:
                host_bits = bits - prefix
                if (bits, prefix, value >> host_bits << host_bits) in nets:
                    return True
        return False


class NestedMembers:
    """Between the member index and the dataplane: which of a set's members are sent. Sent
    means present and not strictly inside a wide member of the set."""

    def __init__(
        self,
        on_added: Callable[[str, str], None],
        on_removed: Callable[[str, str], None],
        members_of: Callable[[str], Collection[str]],
    ) -> None:
        self._added = on_added
        self._removed = on_removed
        #: Every member a set holds now (the member index's count).
        self._members_of = members_of
        #: Per set, its members wider than one address, parsed (a set without any has none).
        self._wide: dict[str, _Wide] = {}
        #: The sets whose wide members changed since the last flush, each with its wide
        #: members and its members when the first change came (what was sent is known from
        #: them).
        self._unsettled: dict[str, tuple[_Wide | None, frozenset[str]]] = {}

    def added(self, set_id: str, member: str) -> None:
        """``member`` came into ``set_id`` (its first contributor)."""
        if "," in member:
            self._added(set_id, member)
            return
        is_wide = not member.endswith(_HOSTS)
        if is_wide:
            self._unsettle(set_id, member, adding=True)
            self._wide.setdefault(set_id, _Wide()).add(member, _parse(member))
            return
        if set_id in self._unsettled:
            return
        wide = self._wide.get(set_id)
        if wide is None or not wide.covers(_parse(member)):
            self._added(set_id, member)

    def removed(self, set_id: str, member: str) -> None:
        """``member`` left ``set_id`` (its last contributor went)."""
        if "," in member:
            self._removed(set_id, member)
            return
        is_wide = not member.endswith(_HOSTS)
        wide = self._wide.get(set_id)
        if is_wide:
            self._unsettle(set_id, member, adding=False)
            if wide is not None:
                wide.discard(member)
                if not wide.members:
                    del self._wide[set_id]
            return
        if set_id in self._unsettled:
            return
        if wide is None or not wide.covers(_parse(member)):
            self._removed(set_id, member)

    def _unsettle(self, set_id: str, member: str, *, adding: bool) -> None:
        """Note what was sent before ``set_id``'s first wide change since the last flush
        (``member``, which the index counts already, was present only if it is going)."""
        if set_id in self._unsettled:
            return
        members = frozenset(self._members_of(set_id))
        members = members - {member} if adding else members | {member}
        wide = self._wide.get(set_id)
        self._unsettled[set_id] = (None if wide is None else wide.copy(), members)

    def flush(self) -> None:
        """Send what the wide changes since the last flush changed, set by set."""
        unsettled, self._unsettled = self._unsettled, {}
        for set_id, (wide_before, before) in sorted(unsettled.items()):
            wide = self._wide.get(set_id)
            now = self._members_of(set_id)
            added, removed = [], []
            for member in before | frozenset(now):
                if "," in member:
                    continue
                net = _parse(member)
                was_sent = member in before and not (
                    wide_before is not None and wide_before.covers(net)
                )
                is_sent = member in now and not (wide is not None and wide.covers(net))
                if is_sent and not was_sent:
                    added.append(member)
                elif was_sent and not is_sent:
                    removed.append(member)
            for member in sorted(removed):
                self._removed(set_id, member)
            for member in sorted(added):
                self._added(set_id, member)

    def dropped(self, set_id: str) -> None:
        """The set is gone: its wide members need not be remembered, nor sent."""
        self._wide.pop(set_id, None)
        self._unsettled.pop(set_id, None)
