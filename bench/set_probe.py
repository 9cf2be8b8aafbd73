"""Whether an address is in an IP set, asked of the kernel over netlink: the label-change
benchmark's probe, the same for both modes (an ipset's TEST, or an nft set's GETSETELEM),
about 0.1 ms a question where running ``ipset list`` costs 2-3 ms and ``nft list set`` 8.

Run inside the node's namespace: ``python bench/set_probe.py ipset|nftables SET ADDRESS``.
Each line read ("1": wait until present, "0": until absent) is answered, once the set
agrees, by the CLOCK_MONOTONIC time it was seen (comparable with the benchmark's own
``time.monotonic()``), polling every half millisecond.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NLA_F_NESTED, NLA_F_NET_BYTEORDER = 1 << 15, 1 << 14
#: ipset: its nfnetlink subsystem, the TEST command and attributes.
IPSET_SUBSYS, IPSET_CMD_TEST, IPSET_PROTOCOL = 6, 11, 7
IPSET_ATTR_PROTOCOL, IPSET_ATTR_SETNAME, IPSET_ATTR_DATA, IPSET_ATTR_IP = 1, 2, 7, 1
#: nftables: its subsystem, GETSETELEM and the element list's attributes.
NFT_SUBSYS, NFT_MSG_GETSETELEM = 10, 13
NFTA_LIST_TABLE, NFTA_LIST_SET, NFTA_LIST_ELEMENTS, NFTA_LIST_ELEM = 1, 2, 3, 1
NFTA_SET_ELEM_KEY, NFTA_DATA_VALUE = 1, 1
POLL = 0.0005


def attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def message(kind: int, family: int, body: bytes) -> bytes:
    header = struct.pack("=IHHII", 20 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK, 1, 0)
    return header + struct.pack("=BBH", family, 0, 0) + body


def question(mode: str, set_name: str, address: str) -> bytes:
    packed = ipaddress.ip_address(address).packed
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    if mode == "ipset":
        version = 1 if len(packed) == 4 else 2  # IPSET_ATTR_IPADDR_IPV4, _IPV6
        ip = attr(IPSET_ATTR_IP | NLA_F_NESTED, attr(version | NLA_F_NET_BYTEORDER, packed))
        body = (
            attr(IPSET_ATTR_PROTOCOL, bytes([IPSET_PROTOCOL]))
            + attr(IPSET_ATTR_SETNAME, set_name.encode() + b"\0")
            + attr(IPSET_ATTR_DATA | NLA_F_NESTED, ip)
        )
        return message(IPSET_SUBSYS << 8 | IPSET_CMD_TEST, family, body)
    key = attr(NFTA_SET_ELEM_KEY | NLA_F_NESTED, attr(NFTA_DATA_VALUE, packed))
    body = (
        attr(NFTA_LIST_TABLE, b"calico\0")
        + attr(NFTA_LIST_SET, set_name.encode() + b"\0")
        + attr(NFTA_LIST_ELEMENTS | NLA_F_NESTED, attr(NFTA_LIST_ELEM | NLA_F_NESTED, key))
    )
    return message(NFT_SUBSYS << 8 | NFT_MSG_GETSETELEM, family, body)


def present(sock: socket.socket, asked: bytes) -> bool:
    """The kernel's answer: acknowledged without an error (found), or refused (absent)."""
    sock.send(asked)
    while True:
        reply = sock.recv(65536)
        offset = 0
        while offset + 16 <= len(reply):
            length, kind = struct.unpack_from("=IH", reply, offset)
            if kind == NLMSG_ERROR:
                (error,) = struct.unpack_from("=i", reply, offset + 16)
                return bool(error == 0)
            offset += max((length + 3) & ~3, 16)


def main() -> None:
    mode, set_name, address = sys.argv[1:4]
    asked = question(mode, set_name, address)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    for line in sys.stdin:
        wanted = line.strip() == "1"
        while present(sock, asked) != wanted:
            time.sleep(POLL)
        print(f"{time.monotonic():.6f}", flush=True)


if __name__ == "__main__":
    main()
