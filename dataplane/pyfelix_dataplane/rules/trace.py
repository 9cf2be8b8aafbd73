"""A packet through the rendered chains: which rules it matched, in order, and the verdict.

It reads the same typed rules both table modes program (matches.py), so what it says is what
the kernel would do with them, not what a second reading of the policies would say. It
follows iptables' traversal: the rules of a chain in order, a jump enters a chain and comes
back at its end or at a RETURN, a goto replaces the chain (its end returns to the caller's
caller), the mark carries what policies decided, and the kernel chain's policy (ACCEPT)
applies when the packet falls off its end.

What the packet carries is the first packet of a connection (conntrack state NEW); its
interfaces say where it comes from and goes to. IP sets are looked up in their members, as
the kernel would. Logging, limits and NAT targets do not change the verdict and are passed
over; the reverse-path check passes (the addresses are taken as routed).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import assert_never

import attrs

from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule

#: IP protocol numbers by the names the rules use.
PROTOCOL_NUMBERS = {
    "icmp": 1,
    "tcp": 6,
    "udp": 17,
    "ipv6-icmp": 58,
    "icmpv6": 58,
    "icmp6": 58,
    "sctp": 132,
    "udplite": 136,
}
#: A packet that jumps more often than this is in a loop the rules should never make.
MAX_STEPS = 100_000
_VERDICTS = frozenset({"ACCEPT", "DROP", "REJECT"})


def protocol_number(name: str) -> int:
    return int(name) if name.isdigit() else PROTOCOL_NUMBERS.get(name.lower(), -1)


@attrs.frozen
class Packet:
    """The first packet of a connection."""

    src: str
    dst: str
    protocol: str = "tcp"
    dst_port: int | None = None
    #: An ephemeral port: rules on source ports see this one.
    src_port: int = 43210
    in_interface: str = ""
    out_interface: str = ""
    icmp_type: int | None = None
    icmp_code: int | None = None
    #: This node's addresses (address type LOCAL).
    local: frozenset[str] = frozenset()


@attrs.frozen
class Step:
    """A rule the packet matched: its chain, its position there (0-based) and the rule."""

    chain: str
    index: int
    rule: Rule


@attrs.frozen
class Trace:
    verdict: str
    steps: tuple[Step, ...]
    #: The mark as it was at the verdict.
    mark: int


class TraceLoop(RuntimeError):
    """The rules sent the packet round for longer than any rendering does."""


@lru_cache(maxsize=4096)
def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(cidr, strict=False)


def in_network(address: str, cidr: str) -> bool:
    """Whether ``address`` is in ``cidr`` (of another IP version: no)."""
    ip = ipaddress.ip_address(address)
    net = _network(cidr)
    return ip.version == net.version and ip in net


def _port_in(port: int | None, spec: str) -> bool:
    if port is None:
        return False
    for item in spec.split(","):
        low, _, high = item.partition(":")
        if int(low) <= port <= int(high or low):
            return True
    return False


def _interface(name: str, pattern: str) -> bool:
    if pattern.endswith("+"):
        return name.startswith(pattern[:-1])
    return name == pattern


@attrs.define(eq=False)
class Tracer:
    """One table's chains and the IP sets (kernel names, type and members) they name."""

    chains: Mapping[str, Chain]
    sets: Mapping[str, tuple[str, frozenset[str]]]

    @classmethod
    def of(cls, chains: Iterable[Chain], sets: Mapping[str, tuple[str, frozenset[str]]]) -> Tracer:
        return cls({chain.name: chain for chain in chains}, sets)

    def in_set(self, name: str, flags: str, packet: Packet) -> bool:
        set_type, members = self.sets.get(name, ("", frozenset()))
        address = packet.src if flags.startswith("src") else packet.dst
        if set_type == "hash:ip,port":
            port = packet.src_port if flags.startswith("src") else packet.dst_port
            return f"{address},{packet.protocol.lower()}:{port}" in members
        if set_type == "hash:ip":
            return address in members
        return any(in_network(address, member) for member in members)

    def matches(self, c: mt.Criterion, packet: Packet, mark: int) -> bool:
        """Whether one criterion holds for the packet, with the mark as it is now."""
        match c:
            case mt.Protocol(name, negate):
                return (protocol_number(name) == protocol_number(packet.protocol)) != negate
            case mt.Net(end, cidr, negate):
                return in_network(packet.src if end == "src" else packet.dst, cidr) != negate
            case mt.InSet(name, flags, negate):
                return self.in_set(name, flags, packet) != negate
            case mt.Ports(end, ports, negate):
                port = packet.src_port if end == "src" else packet.dst_port
                return _port_in(port, ports) != negate
            case mt.Port(end, port):
                return (packet.src_port if end == "src" else packet.dst_port) == port
            case mt.Interface(direction, name, negate):
                found = packet.in_interface if direction == "in" else packet.out_interface
                return _interface(found, name) != negate
            case mt.Mark(value, mask, negate):
                return ((mark & mask) == value) != negate
            case mt.ConnState(states, negate):
                return ("NEW" in states.split(",")) != negate
            case mt.AddrType(end, kind, negate, _):
                address = packet.src if end == "src" else packet.dst
                local = kind == "LOCAL" and address in packet.local
                return local != negate
            case mt.Icmp(_, icmp_type, code, negate):
                same = str(packet.icmp_type) == str(icmp_type) and (
                    code is None or packet.icmp_code == code
                )
                return same != negate
            case mt.Limit():
                return True
            case mt.ReversePath(invert):
                return not invert
            case _:
                assert_never(c)

    def run(self, entry: Sequence[Rule], packet: Packet, name: str = "") -> Trace:
        """The packet through ``entry`` (a kernel chain's rules, called ``name``), following
        every jump into the table's chains."""
        mark = 0
        steps: list[Step] = []
        frames: list[tuple[str, Sequence[Rule], int]] = [(name, entry, 0)]
        for _ in range(MAX_STEPS):
            if not frames:
                return Trace("ACCEPT", tuple(steps), mark)  # the kernel chain's policy
            chain, rules, index = frames.pop()
            if index >= len(rules):
                continue  # the end of a chain: back to its caller
            rule = rules[index]
            frames.append((chain, rules, index + 1))
            if not all(self.matches(c, packet, mark) for c in rule.match):
                continue
            steps.append(Step(chain, index, rule))
            match rule.action:
                case mt.SetMark(value, mask):
                    mark = (mark & ~mask) | value
                case mt.Jump(target) if target in _VERDICTS:
                    return Trace(target, tuple(steps), mark)
                case mt.Jump("RETURN"):
                    frames.pop()
                case mt.Jump(target) if target in self.chains:
                    frames.append((target, self.chains[target].rules, 0))
                case mt.Goto(target) if target in self.chains:
                    frames.pop()
                    frames.append((target, self.chains[target].rules, 0))
                case _:
                    pass  # logging, NOTRACK, NAT: the filter verdict goes on
        raise TraceLoop(f"more than {MAX_STEPS} steps from {name or 'the entry'}")
