"""What a rule matches and what it does, as typed values both table modes render.

The rules package builds every rule from these, and nothing else: ``model.py`` spells them for
iptables-restore and ``nft.py`` for nft, as Felix's two match builders share one set of match
criteria. A criterion's fields are what iptables would be told; each renderer owns its own
spelling, so a criterion that a renderer has no case for is a gap in that renderer, caught by
the type checker (the unions below are closed) and by the tests that render every cluster.

The order of the criteria in a rule is the order iptables is given them, which is part of the
rule's text and so of its ``cali:`` id.
"""

from __future__ import annotations

from typing import Literal

import attrs

#: Which address (or port) of the packet a criterion looks at.
End = Literal["src", "dst"]
#: Which interface: the one the packet came in on, or the one it leaves by.
Direction = Literal["in", "out"]


@attrs.frozen
class Protocol:
    """The IP protocol, by name or number as the user wrote it."""

    name: str
    negate: bool = False


@attrs.frozen
class Net:
    """One CIDR (or address) on one end: iptables takes one of each end per rule."""

    end: End
    cidr: str
    negate: bool = False


@attrs.frozen
class InSet:
    """Membership of an IP set; ``flags`` are iptables' (``src``, ``dst``, ``dst,dst`` for an
    address-and-port set on the destination, ...)."""

    name: str
    flags: str
    negate: bool = False


@attrs.frozen
class Ports:
    """Ports on one end (a multiport list: ``80,443,1000:2000``, at most 15 slots)."""

    end: End
    ports: str
    negate: bool = False


@attrs.frozen
class Port:
    """One port on one end, in the protocol's own match (``-p udp --dport 4789``)."""

    end: End
    port: int


@attrs.frozen
class Interface:
    """An interface by name; a trailing ``+`` matches every name with that prefix."""

    direction: Direction
    name: str
    negate: bool = False


@attrs.frozen
class Mark:
    """The packet mark's bits under ``mask`` equal ``value``."""

    value: int
    mask: int
    negate: bool = False


@attrs.frozen
class ConnState:
    """Conntrack states, comma separated as iptables takes them (``RELATED,ESTABLISHED``;
    ``DNAT`` and ``SNAT`` are nft's status bits)."""

    states: str
    negate: bool = False


@attrs.frozen
class AddrType:
    """The address type (``LOCAL``) of one end; ``limit_iface_out`` asks only about the
    interface the packet leaves by."""

    end: End
    kind: str
    negate: bool = False
    limit_iface_out: bool = False


@attrs.frozen
class Icmp:
    """An ICMP (version 4) or ICMPv6 (version 6) type, and code if given."""

    version: int
    type: int | str
    code: int | None = None
    negate: bool = False


@attrs.frozen
class Limit:
    """At most ``rate`` (``10/second``) packets, after a burst of ``burst`` (0: the
    default)."""

    rate: str
    burst: int = 0


@attrs.frozen
class ReversePath:
    """The reverse-path check: with ``invert``, a packet whose source has no route back out of
    the interface it came in on."""

    invert: bool = True


Criterion = (
    Protocol
    | Net
    | InSet
    | Ports
    | Port
    | Interface
    | Mark
    | ConnState
    | AddrType
    | Icmp
    | Limit
    | ReversePath
)
#: Every criterion must hold for the rule to match; none matches every packet.
Match = tuple[Criterion, ...]


@attrs.frozen
class Jump:
    """A jump to a chain, or one of the kernel's verdicts (``ACCEPT``, ``DROP``, ``REJECT``,
    ``RETURN``, ``NOTRACK``)."""

    target: str


@attrs.frozen
class Goto:
    """A goto: the chain's verdict is the caller's (a RETURN goes back past this chain)."""

    target: str


@attrs.frozen
class SetMark:
    """Set the bits of ``mask`` in the packet mark to ``value``."""

    value: int
    mask: int


@attrs.frozen
class Masquerade:
    to_ports: str = ""
    random_fully: bool = False


@attrs.frozen
class Snat:
    to: str
    random_fully: bool = False


@attrs.frozen
class Dnat:
    to: str


@attrs.frozen
class Log:
    """Log the packet with ``prefix`` at syslog ``level``; the rule's chain goes on."""

    prefix: str
    level: int = 5


Action = Jump | Goto | SetMark | Masquerade | Snat | Dnat | Log

ACCEPT = Jump("ACCEPT")
DROP = Jump("DROP")
RETURN = Jump("RETURN")
NOTRACK = Jump("NOTRACK")


def match_mark(bits: int, mask: int | None = None) -> Mark:
    """The mark's ``mask`` bits (``bits`` when not given) equal ``bits``."""
    return Mark(bits, bits if mask is None else mask)


def set_mark(bits: int, mask: int | None = None) -> SetMark:
    """Set the mark's ``mask`` bits (``bits`` when not given) to ``bits``."""
    return SetMark(bits, bits if mask is None else mask)
