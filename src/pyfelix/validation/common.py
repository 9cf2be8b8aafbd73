"""Building blocks of Calico's v3 validation: names, labels, addresses, ports, protocols.

Checks report into a :class:`Checker`, which carries the field path, so each rule reads as one
line and every message names the field it is about.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping

from pyfelix.ipnet import (
    IPV4_CIDR,
    IPV4_HOST,
    IPNetwork,
    has_host_bits,
    parse_address,
    parse_network,
)
from pyfelix.resources.schema import Context
from pyfelix.selector import SelectorError, parse_selector

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
#: Linux interface names; never starting with "-", which a tool's command line (wireguard-go,
#: ip) would read as an option.
INTERFACE_NAME = re.compile(r"^(?!-)[a-zA-Z0-9_.-]{1,15}$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
MAC = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$")

PROTOCOL_NAMES = ("TCP", "UDP", "ICMP", "ICMPv6", "SCTP", "UDPLite")
PROTOCOL_NUMBERS = {"TCP": 6, "UDP": 17, "ICMP": 1, "ICMPv6": 58, "SCTP": 132, "UDPLite": 136}
PORT_PROTOCOLS = frozenset({"TCP", "UDP", "SCTP", 6, 17, 132})
MAX_NAME_LENGTH = 253
MAX_LABEL_NAME_LENGTH = 63
MAX_ANNOTATIONS_SIZE = 256 * 1024


class Checker(Context):
    """Collects problems for one resource; ``at`` descends into a field. The path is put
    together only when a problem needs it (as the decoder's Context does): validation
    descends into every field of every resource, and almost all of them are fine."""

    __slots__ = ()

    def check(self, ok: bool, message: str) -> bool:
        if not ok:
            self.error(message)
        return ok


def check_name(c: Checker, name: str, *, label: bool = False) -> None:
    """A DNS-1123 subdomain (or label, for tiers and namespaces)."""
    limit = MAX_LABEL_NAME_LENGTH if label else MAX_NAME_LENGTH
    if not name:
        c.error("must not be empty")
    elif len(name) > limit:
        c.error(f"name is too long by {len(name) - limit} characters (maximum {limit})")
    elif not (DNS1123_LABEL if label else DNS1123_SUBDOMAIN).match(name):
        allowed = "'-'" if label else "'-' or '.'"
        c.error(
            f"invalid name {name!r}: must consist of lower case alphanumeric characters or "
            f"{allowed}, and start and end with an alphanumeric character"
        )


def name_accepted(name: str, *, label: bool = False) -> bool:
    """What ``check_name`` accepts, without a Checker."""
    limit = MAX_LABEL_NAME_LENGTH if label else MAX_NAME_LENGTH
    pattern = DNS1123_LABEL if label else DNS1123_SUBDOMAIN
    return bool(name) and len(name) <= limit and bool(pattern.match(name))


#: ``name_accepted``, cached: names repeat (nodes, namespaces, profiles).
good_name = functools.lru_cache(maxsize=1 << 16)(name_accepted)


def good_labels(labels: Mapping[str, str]) -> bool:
    """What ``check_labels`` accepts."""
    for key, value in labels.items():
        if qualified_name_problem(key) is not None or not _good_label_value(value):
            return False
    return True


def good_annotations(annotations: Mapping[str, str]) -> bool:
    """What ``check_annotations`` accepts."""
    total = 0
    for key, value in annotations.items():
        total += len(key) + len(value)
        if qualified_name_problem(key.lower()) is not None:
            return False
    return total <= MAX_ANNOTATIONS_SIZE


#: How many label keys, and label values, the checks remember: a cluster's label keys are
#: few, but a benchmark's tag policies (Felix's) give 10,000, which 4,096 entries thrashed
#: (2.1 us an endpoint of four labels against 0.9 us); a full cache is some 6 MB.
LABEL_CACHE_SIZE = 1 << 16


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def qualified_name_problem(key: str) -> str | None:
    """Kubernetes' rule for label keys: [prefix/]name, prefix a DNS subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "prefix part must not be empty"
    if prefix and (len(prefix) > MAX_NAME_LENGTH or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"prefix {prefix!r} must be a lower case DNS subdomain"
    if not name:
        return "name part must not be empty"
    if len(name) > MAX_LABEL_NAME_LENGTH:
        return f"name part must be no more than {MAX_LABEL_NAME_LENGTH} characters"
    if not _QUALIFIED_NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character"
        )
    return None


def check_labels(c: Checker, labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem:
            c.at(key).error(f"invalid label key: {problem}")
        if _good_label_value(value):
            continue
        if len(value) > MAX_LABEL_NAME_LENGTH:
            c.at(key).error("invalid label value: must be no more than 63 characters")
        elif not _LABEL_VALUE.match(value):
            c.at(key).error(
                f"invalid label value {value!r}: must be empty or consist of alphanumeric "
                "characters, '-', '_' or '.', starting and ending with an alphanumeric"
            )


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def _good_label_value(value: str) -> bool:
    """Label keys and values repeat across a cluster's resources: their checks are cached."""
    return len(value) <= MAX_LABEL_NAME_LENGTH and bool(_LABEL_VALUE.match(value))


def check_annotations(c: Checker, annotations: Mapping[str, str]) -> None:
    total = 0
    for key, value in annotations.items():
        total += len(key) + len(value)
        problem = qualified_name_problem(key.lower())
        if problem:
            c.at(key).error(f"invalid annotation key: {problem}")
    if total > MAX_ANNOTATIONS_SIZE:
        c.error(f"total size of annotations is too large by {total - MAX_ANNOTATIONS_SIZE} bytes")


def check_selector(c: Checker, text: str, *, allow_global: bool = False) -> None:
    if not text:
        return
    try:
        parse_selector(text)
    except SelectorError as exc:
        c.error(f"invalid selector {text!r}: {exc.reason} at position {exc.position}")
        return
    if "global(" in text and not allow_global:
        c.error("global() can only be used in an EntityRule namespaceSelector")


def check_cidr(
    c: Checker, text: str, *, strict: bool = False, version: int | None = None
) -> IPNetwork | None:
    """IP or CIDR; ``strict`` also rejects host bits (Calico's ``net`` rule)."""
    try:
        network = parse_network(text)
    except ValueError:
        c.error(f"invalid CIDR {text!r}")
        return None
    if strict and has_host_bits(text, network):
        c.error(f"{text!r} has host bits set; use the network address")
        return None
    if version is not None and network.version != version:
        c.error(f"{text!r} is not an IPv{version} address")
        return None
    return network


def check_net(c: Checker, text: str) -> None:
    """``check_cidr`` where the parse is not kept: an IPv4 CIDR in its canonical form (a
    network set's million entries) is told by a pattern, a tenth of the parse's cost."""
    if not IPV4_CIDR.fullmatch(text):
        check_cidr(c, text)


def check_nets(c: Checker, texts: Iterable[str]) -> None:
    """``check_net`` of each of ``texts``, at its index below ``c`` (descended into only for
    the texts the pattern does not tell: a field's Checker was two objects an entry)."""
    fullmatch = IPV4_CIDR.fullmatch
    for index, text in enumerate(texts):
        if not fullmatch(text):
            check_cidr(c.at(index), text)


def check_ip(c: Checker, text: str, *, version: int | None = None) -> None:
    try:
        address = parse_address(text)
    except ValueError:
        c.error(f"invalid IP address {text!r}")
        return
    if version is not None and address.version != version:
        c.error(f"{text!r} is not an IPv{version} address")


def check_single_address(c: Checker, text: str) -> None:
    """An endpoint network: one address, /32 or /128 (a bare IP is fine)."""
    if IPV4_HOST.fullmatch(text):
        return
    network = check_cidr(c, text, strict=True)
    if network is not None and network.num_addresses != 1:
        c.error(f"{text!r} contains multiple addresses; expected a /32 or /128")


def check_mac(c: Checker, text: str) -> None:
    c.check(bool(MAC.match(text)), f"invalid MAC address {text!r}")


def check_interface_name(c: Checker, name: str, *, allow_star: bool = False) -> None:
    if allow_star and name == "*":
        return
    c.check(
        bool(INTERFACE_NAME.match(name)),
        f"invalid interface name {name!r}: 1-15 characters from [a-zA-Z0-9_.-],"
        " not starting with -",
    )


def port_name_problem(name: str) -> str | None:
    """Kubernetes' IANA service name rule, which Calico applies to named ports."""
    if len(name) > 15:
        return "must be no more than 15 characters"
    if not _PORT_NAME_CHARS.match(name):
        return "must contain only lower case alphanumeric characters or '-'"
    if not any(ch.isalpha() for ch in name):
        return "must contain at least one letter"
    if "--" in name or name.startswith("-") or name.endswith("-"):
        return "must not begin or end with '-' or contain '--'"
    return None


def check_protocol(c: Checker, protocol: int | str) -> None:
    """A protocol number 1-255 or one of Calico's (case-sensitive) names."""
    if isinstance(protocol, int):
        c.check(1 <= protocol <= 255, f"protocol number {protocol} invalid: must be 1-255")
        return
    if protocol.isdigit():
        c.check(1 <= int(protocol) <= 255, f"protocol number {protocol} invalid: must be 1-255")
        return
    if protocol not in PROTOCOL_NAMES:
        hint = ""
        matches = [n for n in PROTOCOL_NAMES if n.lower() == protocol.lower()]
        if matches:
            hint = f" (names are case-sensitive: did you mean {matches[0]!r}?)"
        c.error(
            f"protocol name {protocol!r} invalid: expected one of {', '.join(PROTOCOL_NAMES)}{hint}"
        )


def normalise_protocol(protocol: int | str) -> int | str:
    """Numeric strings become numbers, as Calico's Uint8OrString does."""
    if isinstance(protocol, str) and protocol.isdigit():
        return int(protocol)
    return protocol


def supports_ports(protocol: int | str | None) -> bool:
    return protocol is not None and normalise_protocol(protocol) in PORT_PROTOCOLS


def check_port_number(c: Checker, port: int, *, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    c.check(low <= port <= 65535, f"port {port} invalid: must be between {low} and 65535")


def check_wireguard_key(c: Checker, key: str) -> None:
    try:
        raw = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    c.check(len(raw) == 32, f"invalid WireGuard public key {key!r}: expected 32 bytes in base64")


def check_enum(c: Checker, value: str, allowed: tuple[str, ...]) -> None:
    c.check(value in allowed, f"invalid value {value!r}: expected one of {', '.join(allowed)}")
