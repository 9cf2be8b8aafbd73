"""Route messages on a plain rtnetlink socket: the route writer's dumps and batches, the
links dump MTU detection reads, and the interface monitor's events.

pyroute2 (the netlink library everywhere else) runs an asyncio loop for each call and
encodes each message through its generic attribute machinery: for a node's 200 workload
routes that was 0.3 s of Python holding the GIL at start-up (two dumps 0.12 s, the batch
0.19 s, of which encoding 0.13 s), while the tables were being rendered. The few message
shapes the route writer needs are packed here with ``struct`` and sent on one socket:
about 0.02 s for the same work (bench/RESULTS.md). Blocking: run in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Iterator, Sequence
from types import TracebackType

import attrs

NETLINK_ROUTE = 0
_SOL_NETLINK, _CAP_ACK, _GET_STRICT_CHK = 270, 10, 12
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_DUMP, NLM_F_REPLACE, NLM_F_CREATE = 0x300, 0x100, 0x400
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK, RTM_NEWADDR, RTM_DELADDR = 16, 17, 18, 20, 21
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE, RTM_NEWNEIGH = 24, 25, 26, 28
RTM_GETRULE = 34
FRA_PRIORITY, FRA_FWMARK, FRA_TABLE = 6, 10, 15
IFLA_IFNAME, IFLA_MTU = 3, 4
IFA_ADDRESS = 1
RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR = 0x1, 0x10, 0x100
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC, RTA_TABLE = 1, 4, 5, 6, 7, 15
NDA_DST, NDA_LLADDR = 1, 2
RTN_UNICAST, RTN_THROW = 1, 9
RT_SCOPE_UNIVERSE, RT_SCOPE_LINK = 0, 253
#: The protocol pyroute2 gives a route made without one (as WireGuard's throw routes were).
RTPROT_STATIC = 4
#: Create or replace (a route of the same destination and metric).
REPLACE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE
#: Requests sent before their acknowledgements are read: bounded, so that the replies never
#: overflow the socket's receive buffer.
_WINDOW = 256

#: nlmsghdr: length, type, flags, sequence, port.
HEADER = struct.Struct("=IHHII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_NDMSG = struct.Struct("=BBHiHBB")
_IFINFOMSG = struct.Struct("=BBHiII")
_IFADDRMSG = struct.Struct("=BBBBI")
_ATTR = struct.Struct("=HH")
_U32 = struct.Struct("=I")


@attrs.frozen
class Route:
    """A route as a dump gives it (the fields the route writer reads)."""

    family: int
    dst: str | None
    dst_len: int
    table: int
    proto: int
    scope: int
    type: int
    oif: int | None
    gateway: str | None
    priority: int
    prefsrc: str


def attribute(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to four bytes (rtnetlink's and nfnetlink's alike)."""
    data = _ATTR.pack(_ATTR.size + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _address(text: str) -> tuple[int, bytes]:
    address = ipaddress.ip_address(text)
    return (socket.AF_INET6 if address.version == 6 else socket.AF_INET), address.packed


def route_message(
    dst: str,
    *,
    table: int,
    proto: int,
    scope: int,
    oif: int | None = None,
    gateway: str = "",
    prefsrc: str = "",
    priority: int = 0,
    route_flags: int = 0,
    route_type: int = RTN_UNICAST,
) -> bytes:
    """An RTM_NEWROUTE or RTM_DELROUTE body (no header) for ``dst`` (a CIDR)."""
    network = ipaddress.ip_network(dst)
    family = socket.AF_INET6 if network.version == 6 else socket.AF_INET
    # The header's table has 8 bits; RTA_TABLE has all of them.
    head = _RTMSG.pack(
        family,
        network.prefixlen,
        0,
        0,
        table if table < 256 else 0,
        proto,
        scope,
        route_type,
        route_flags,
    )
    parts = [
        head,
        attribute(RTA_TABLE, _U32.pack(table)),
        attribute(RTA_DST, network.network_address.packed),
    ]
    if oif is not None:
        parts.append(attribute(RTA_OIF, _U32.pack(oif)))
    if gateway:
        parts.append(attribute(RTA_GATEWAY, _address(gateway)[1]))
    if prefsrc:
        parts.append(attribute(RTA_PREFSRC, _address(prefsrc)[1]))
    if priority:
        parts.append(attribute(RTA_PRIORITY, _U32.pack(priority)))
    return b"".join(parts)


def neighbour_message(dst: str, mac: str, index: int, state: int) -> bytes:
    """An RTM_NEWNEIGH body: ``dst`` (an address) at ``mac`` on interface ``index``."""
    family, packed = _address(dst)
    head = _NDMSG.pack(family, 0, 0, index, state, 0, 0)
    lladdr = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    return head + attribute(NDA_DST, packed) + attribute(NDA_LLADDR, lladdr)


def _attributes(data: bytes, offset: int, end: int) -> Iterator[tuple[int, bytes]]:
    while offset + _ATTR.size <= end:
        length, kind = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size:
            return
        yield kind & 0x3FFF, data[offset + _ATTR.size : offset + length]
        offset += (length + 3) & ~3


def _text(family: int, packed: bytes) -> str:
    return socket.inet_ntop(family, packed)


def _route(data: bytes, offset: int, end: int) -> Route:
    family, dst_len, _, _, table, proto, scope, kind_, _ = _RTMSG.unpack_from(data, offset)
    dst = gateway = None
    oif = None
    priority = 0
    prefsrc = ""
    for kind, value in _attributes(data, offset + _RTMSG.size, end):
        if kind == RTA_DST:
            dst = _text(family, value)
        elif kind == RTA_OIF:
            (oif,) = _U32.unpack(value)
        elif kind == RTA_GATEWAY:
            gateway = _text(family, value)
        elif kind == RTA_PRIORITY:
            (priority,) = _U32.unpack(value)
        elif kind == RTA_PREFSRC:
            prefsrc = _text(family, value)
        elif kind == RTA_TABLE:
            (table,) = _U32.unpack(value)
    return Route(family, dst, dst_len, table, proto, scope, kind_, oif, gateway, priority, prefsrc)


class Rtnl:
    """One rtnetlink socket (with the kernel filtering dumps where it can); a context
    manager, used by one thread at a time."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        for option in (_CAP_ACK, _GET_STRICT_CHK):
            # Older kernels refuse them: dumps are filtered below, acknowledgements longer.
            with contextlib.suppress(OSError):
                self._socket.setsockopt(_SOL_NETLINK, option, 1)
        self._socket.bind((0, 0))
        self._sequence = 0

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._socket.close()

    def _header(self, length: int, kind: int, flags: int) -> tuple[bytes, int]:
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        return HEADER.pack(HEADER.size + length, kind, flags, self._sequence, 0), self._sequence

    def _dump(self, kind: int, query: bytes) -> Iterator[tuple[bytes, int, int]]:
        """The messages a dump request gets back: (data, offset of the body, its end)."""
        header, sequence = self._header(len(query), kind, NLM_F_REQUEST | NLM_F_DUMP)
        self._socket.sendall(header + query)
        while True:
            data = self._socket.recv(1 << 16)
            offset = 0
            while offset + HEADER.size <= len(data):
                length, kind_, _, seq, _ = HEADER.unpack_from(data, offset)
                if length < HEADER.size:
                    raise OSError(errno.EPROTO, "a truncated netlink message")
                if seq == sequence:
                    if kind_ == NLMSG_DONE:
                        return
                    if kind_ == NLMSG_ERROR:
                        (error,) = struct.unpack_from("=i", data, offset + HEADER.size)
                        raise OSError(-error, f"netlink dump: {os.strerror(-error)}")
                    yield data, offset + HEADER.size, offset + length
                offset += (length + 3) & ~3

    def routes(self, family: int, table: int, proto: int | None = None) -> list[Route]:
        """The routes of one family in ``table`` (of protocol ``proto`` if given)."""
        query = _RTMSG.pack(family, 0, 0, 0, table if table < 256 else 0, proto or 0, 0, 0, 0)
        query += attribute(RTA_TABLE, _U32.pack(table))
        found = (_route(*message) for message in self._dump(RTM_GETROUTE, query))
        return [r for r in found if r.table == table and (proto is None or r.proto == proto)]

    def links(self) -> list[tuple[str, int, int]]:
        """(name, MTU, flags) of every interface."""
        found = []
        for data, offset, end in self._dump(RTM_GETLINK, _IFINFOMSG.pack(0, 0, 0, 0, 0, 0)):
            flags = _IFINFOMSG.unpack_from(data, offset)[4]
            name, mtu = "", 0
            for kind, value in _attributes(data, offset + _IFINFOMSG.size, end):
                if kind == IFLA_IFNAME:
                    name = value.rstrip(b"\0").decode("utf-8", "replace")
                elif kind == IFLA_MTU:
                    (mtu,) = _U32.unpack(value)
            found.append((name, mtu, flags))
        return found

    def rules(self, family: int) -> list[tuple[int, int, int | None, int]]:
        """(priority, table, fwmark or None, FIB_RULE_* flags) of every routing rule of one
        family."""
        found = []
        for data, offset, end in self._dump(
            RTM_GETRULE, _RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
        ):
            header = _RTMSG.unpack_from(data, offset)
            table, flags = header[4], header[8]
            priority, mark = 0, None
            for kind, value in _attributes(data, offset + _RTMSG.size, end):
                if kind == FRA_PRIORITY:
                    (priority,) = _U32.unpack(value)
                elif kind == FRA_FWMARK:
                    (mark,) = _U32.unpack(value)
                elif kind == FRA_TABLE:
                    (table,) = _U32.unpack(value)
            found.append((priority, table, mark, flags))
        return found

    def request(self, messages: Sequence[tuple[int, int, bytes]]) -> list[int]:
        """Send (type, flags, body) messages, each acknowledged; the error number of each
        (0: done), in order."""
        errors: list[int] = []
        for start in range(0, len(messages), _WINDOW):
            window = messages[start : start + _WINDOW]
            data = bytearray()
            sequences = []
            for kind, flags, body in window:
                header, sequence = self._header(len(body), kind, flags | NLM_F_ACK)
                sequences.append(sequence)
                data += header
                data += body
                data += b"\0" * (-len(body) % 4)
            self._socket.sendall(data)
            answers: dict[int, int] = {}
            while len(answers) < len(window):
                reply = self._socket.recv(1 << 16)
                offset = 0
                while offset + HEADER.size <= len(reply):
                    length, kind, _, seq, _ = HEADER.unpack_from(reply, offset)
                    if kind == NLMSG_ERROR:
                        (error,) = struct.unpack_from("=i", reply, offset + HEADER.size)
                        answers[seq] = -error
                    offset += max((length + 3) & ~3, HEADER.size)
            errors.extend(answers.get(sequence, 0) for sequence in sequences)
        return errors


def subscribe(groups: int) -> socket.socket:
    """A non-blocking rtnetlink socket that receives the multicast ``groups``' events."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK, NETLINK_ROUTE)
    try:
        sock.bind((0, groups))
    except OSError:
        sock.close()
        raise
    return sock


def event_interfaces(data: bytes) -> Iterator[tuple[str, int]]:
    """What each link or address event read from a ``subscribe`` socket is about: (name, 0)
    for a link created, changed or removed; ("", index) for an address added to or removed
    from interface ``index``. Other messages are skipped."""
    offset = 0
    while offset + HEADER.size <= len(data):
        length, kind, _, _, _ = HEADER.unpack_from(data, offset)
        if length < HEADER.size:
            return
        body, end = offset + HEADER.size, offset + length
        if kind in (RTM_NEWLINK, RTM_DELLINK) and body + _IFINFOMSG.size <= end:
            for attribute, value in _attributes(data, body + _IFINFOMSG.size, end):
                if attribute == IFLA_IFNAME:
                    yield value.rstrip(b"\0").decode("utf-8", "replace"), 0
                    break
        elif kind in (RTM_NEWADDR, RTM_DELADDR) and body + _IFADDRMSG.size <= end:
            index = _IFADDRMSG.unpack_from(data, body)[4]
            attributes = _attributes(data, body + _IFADDRMSG.size, end)
            if any(attribute == IFA_ADDRESS for attribute, _ in attributes):
                yield "", index
        offset += (length + 3) & ~3
