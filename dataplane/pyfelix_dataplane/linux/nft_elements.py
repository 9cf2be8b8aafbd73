"""Set elements straight over nfnetlink: the nftables mode's fast path for an apply that only
adds and deletes set members (a label change, a workload coming or going).

libnftables fills its cache from the table before every element command (8-10 ms with two
families of a 2,500-chain table; bench/RESULTS.md); the same change as one nfnetlink batch
(NEWSETELEM and DELSETELEM messages between a batch begin and end, acknowledged one by one)
costs about 0.2 ms. The socket stays open: closing a netlink socket that deleted elements
waits for the kernel's deferred release of them (6-14 ms here, an RCU grace period), which
was most of a removal's cost when each batch had a socket of its own. Keys are encoded as nft
encodes them: an address in network order; a range of an interval set as its first address
and, flagged as an interval end, the address after its last (with the set's leading interval
end at the zero address, which nft adds with a set's first range); a named-port member as
address, protocol and port, each field padded to four bytes. Blocking: run in a worker
thread.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Iterable, Sequence

import attrs

from pyfelix_dataplane.linux.rtnl import HEADER, attribute
from pyfelix_dataplane.rules.nft import TABLE, NftSet

BATCH_BEGIN, BATCH_END = 0x10, 0x11
#: The netfilter netlink protocol (NETLINK_NETFILTER), its nftables subsystem and messages.
_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM = 12, 14
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE = 0x1, 0x4, 0x400
#: NFTA_SET_ELEM_LIST_* (the message's attributes), NFTA_SET_ELEM_* (an element's),
#: NFTA_LIST_ELEM and NFTA_DATA_VALUE.
_LIST_TABLE, _LIST_SET, _LIST_ELEMENTS = 1, 2, 3
_ELEM_KEY, _ELEM_FLAGS = 1, 3
_LIST_ELEM, _DATA_VALUE = 1, 1
INTERVAL_END = 1
_PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132}
#: nfgenmsg: family, version, resource id (big-endian).
_NFGEN = struct.Struct("!BBH")


@attrs.frozen
class ElementChange:
    """Members to add to (or delete from) one set."""

    add: bool
    set_name: str
    nft_set: NftSet
    members: tuple[str, ...]


def _key(value: bytes, end: bool = False) -> bytes:
    """One element of the list: its key and, for an interval's end, its flag."""
    body = attribute(_ELEM_KEY, attribute(_DATA_VALUE, value))
    if end:
        body += attribute(_ELEM_FLAGS, INTERVAL_END.to_bytes(4, "big"))
    return attribute(_LIST_ELEM, body)


def _concatenation(member: str) -> bytes:
    """``10.0.0.1 . tcp . 8080`` as nft lays out a concatenated key."""
    address, protocol, port = (part.strip() for part in member.split(" . "))
    number = _PROTOCOLS.get(protocol) or int(protocol)
    return (
        ipaddress.ip_address(address).packed
        + bytes([number, 0, 0, 0])
        + int(port).to_bytes(2, "big")
        + b"\0\0"
    )


def keys(nft_set: NftSet, members: Iterable[str], add: bool) -> list[bytes]:
    """The encoded elements (keys) for ``members`` of ``nft_set``."""
    if " . " in nft_set.type:
        return [_key(_concatenation(member)) for member in members]
    if not nft_set.interval:
        return [_key(ipaddress.ip_address(member).packed) for member in members]
    out = []
    starts_at_zero = False
    for member in members:
        network = ipaddress.ip_network(member, strict=False)
        out.append(_key(network.network_address.packed))
        starts_at_zero = starts_at_zero or int(network.network_address) == 0
        after = int(network.broadcast_address) + 1
        if after < 2**network.max_prefixlen:
            width = network.max_prefixlen // 8
            out.append(_key(after.to_bytes(width, "big"), end=True))
    if add and not starts_at_zero:
        width = 4 if nft_set.type == "ipv4_addr" else 16
        out.insert(0, _key(bytes(width), end=True))
    return out


#: SOL_NETLINK and its NETLINK_CAP_ACK: acknowledgements without a copy of the request.
_SOL_NETLINK, _CAP_ACK = 270, 10
_NLMSG_ERROR = 2


class ElementWriter:
    """One family's nfnetlink socket for set elements, kept open (see the module's note);
    writes are serialised, from whichever thread."""

    def __init__(self, family: str) -> None:
        self._family = socket.AF_INET6 if family == "ip6" else socket.AF_INET
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._sequence = 0

    def write(self, changes: Sequence[ElementChange]) -> None:
        """Every change as one batch, deletions first (a member moving between ranges),
        acknowledged; raises OSError naming what the kernel refused."""
        with self._lock:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETFILTER)
                self._socket.setsockopt(_SOL_NETLINK, _CAP_ACK, 1)
                self._socket.bind((0, 0))
            try:
                self._send(self._socket, changes)
            except OSError:
                # Replies of the failed batch may still be queued: start afresh next time.
                self._socket.close()
                self._socket = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None

    def _send(self, sock: socket.socket, changes: Sequence[ElementChange]) -> None:
        data = bytearray(self._message(BATCH_BEGIN, 0, _NFGEN.pack(0, 0, NFNL_SUBSYS_NFTABLES)))
        for change in sorted(changes, key=lambda c: c.add):
            body = _NFGEN.pack(self._family, 0, 0)
            body += attribute(_LIST_TABLE, TABLE.encode() + b"\0")
            body += attribute(_LIST_SET, change.set_name.encode() + b"\0")
            body += attribute(
                _LIST_ELEMENTS, b"".join(keys(change.nft_set, change.members, change.add))
            )
            kind = NFT_MSG_NEWSETELEM if change.add else NFT_MSG_DELSETELEM
            flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE if change.add else 0)
            data += self._message((NFNL_SUBSYS_NFTABLES << 8) | kind, flags, body)
        data += self._message(BATCH_END, 0, _NFGEN.pack(0, 0, NFNL_SUBSYS_NFTABLES))
        sock.sendall(data)
        self._acknowledged(sock, len(changes))

    def _message(self, kind: int, flags: int, body: bytes) -> bytes:
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        return (
            HEADER.pack(HEADER.size + len(body), kind, flags | NLM_F_REQUEST, self._sequence, 0)
            + body
        )

    @staticmethod
    def _acknowledged(sock: socket.socket, expected: int) -> None:
        """Read the element messages' acknowledgements; the first refusal is raised."""
        while expected:
            reply = sock.recv(65536)
            offset = 0
            while offset + HEADER.size <= len(reply):
                length, kind, _, _, _ = HEADER.unpack_from(reply, offset)
                if kind == _NLMSG_ERROR:
                    (error,) = struct.unpack_from("=i", reply, offset + HEADER.size)
                    if error:
                        raise OSError(-error, f"nft set elements: {os.strerror(-error)}")
                    expected -= 1
                offset += max((length + 3) & ~3, HEADER.size)
