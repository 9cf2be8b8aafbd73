"""Felix's text forms of its parameters: what ConfigUpdate and FELIX_<NAME> variables carry.

Shared by validation (which reads FelixConfiguration resources) and the typed configuration
(which reads the merged text), so both accept exactly the same values.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from pyfelix.errors import PyfelixError

E = TypeVar("E", bound=enum.StrEnum)


@attrs.frozen
class Field:
    """One parameter of the typed configuration: its attribute, Felix name and text parser."""

    attribute: str
    felix: str
    parse: Callable[[str], Any]


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class ParamError(PyfelixError, ValueError):
    """A FelixConfiguration value Felix would reject; ``field`` is relative to the param."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@attrs.frozen
class ProtoPort:
    """One failsafe port: protocol (lower case, as Felix keeps it), port and optional net."""

    protocol: str
    port: int
    net: str = ""


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, in seconds ("1m30s" -> 90.0, "0" -> 0.0)."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            raise ParamError(f'invalid duration {text!r}: expected e.g. "90s", "1m30s"')
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not body:
        raise ParamError(f"invalid duration {text!r}")
    return sign * total


def parse_felix_port_list(text: str) -> tuple[ProtoPort, ...]:
    """Felix's own string form ("tcp:22,udp:68,tcp:10.0.0.0/8:443"), used for defaults and env."""
    if text.strip().lower() == "none":
        return ()
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) == 1:
            parts = ["tcp", parts[0]]
        protocol, port = parts[0].lower(), parts[-1]
        net = ":".join(parts[1:-1]).strip("[]")
        if protocol not in ("tcp", "udp") or not port.isdigit() or int(port) > 65535:
            raise ParamError(f"invalid failsafe port {entry!r}")
        out.append(ProtoPort(protocol, int(port), net))
    return tuple(out)


def parse_bool(text: str) -> bool:
    """Felix's BoolParam: true/1/yes/y/t and false/0/no/n/f, any case."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "y", "t"):
        return True
    if lowered in ("false", "0", "no", "n", "f"):
        return False
    raise ParamError(f"invalid boolean {text!r}")


def parse_int(text: str) -> int:
    """Decimal, or with a 0x/0o/0b prefix (mark masks are often written in hex)."""
    body = text.strip()
    try:
        return int(body, 0)
    except ValueError:
        try:
            return int(body)
        except ValueError:
            raise ParamError(f"invalid integer {text!r}") from None


def parse_seconds(text: str, *, millis: bool = False) -> float:
    """A duration as Felix's text carries it: a number of seconds (of milliseconds for the
    ``*Millis`` parameters), or a Go duration ("90s"); always returned in seconds."""
    body = text.strip()
    try:
        number = float(body)
    except ValueError:
        return parse_duration(body)
    return number / 1000 if millis else number


def parse_list(text: str) -> tuple[str, ...]:
    return tuple(item for item in (part.strip() for part in text.split(",")) if item)


def parse_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` (a trailing comma allowed)."""
    pairs = []
    for item in parse_list(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(f"invalid entry {item!r}: expected name=value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def parse_timeouts(text: str) -> tuple[tuple[str, float], ...]:
    """HealthTimeoutOverrides: ``Name=30s,Other=1m``."""
    return tuple((name, parse_duration(value)) for name, value in parse_pairs(text))


def parse_range(text: str, separator: str = "-") -> tuple[int, int]:
    """``min-max`` (route tables) or ``min:max`` (ports); a single number is both."""
    low, sep, high = text.strip().partition(separator)
    first = parse_int(low)
    last = parse_int(high) if sep else first
    if last < first:
        raise ParamError(f"invalid range {text!r}: the end is before the start")
    return first, last


def parse_ranges(text: str, separator: str = "-") -> tuple[tuple[int, int], ...]:
    return tuple(parse_range(item, separator) for item in parse_list(text))


#: Linux's largest routing table number, and Felix's cap on how many a pyfelix may own.
ROUTE_TABLE_MAX = 0xFFFFFFFF
ROUTE_TABLES_MAX = 0xFFFF


def parse_route_table_range(text: str) -> tuple[int, int]:
    """RouteTableRange (deprecated): ``min-max`` within 1-250, as Felix."""
    low, high = parse_range(text)
    if not 1 <= low <= high <= 250:
        raise ParamError(f"{text!r} must be a range of route table indices within 1-250")
    return low, high


def parse_route_table_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """RouteTableRanges: ``min-max,...``, each from 1, at most 65535 tables in all."""
    ranges = parse_ranges(text)
    for low, high in ranges:
        if low < 1 or high > ROUTE_TABLE_MAX:
            raise ParamError(f"{low}-{high}: route tables run from 1 to {ROUTE_TABLE_MAX}")
    if sum(high - low + 1 for low, high in ranges) > ROUTE_TABLES_MAX:
        raise ParamError(f"{text!r} targets too many tables (more than {ROUTE_TABLES_MAX})")
    return ranges


def parse_regex(text: str) -> str:
    """A regular expression (MTUIfacePattern), checked once here rather than on every use."""
    try:
        re.compile(text)
    except re.error as exc:
        raise ParamError(f"invalid regular expression {text!r}: {exc}") from None
    return text


def parse_port_range(text: str) -> tuple[int, int]:
    return parse_range(text, ":")


def parse_port_ranges(text: str) -> tuple[tuple[int, int], ...]:
    return parse_ranges(text, ":")


def parse_int_in(text: str, *, low: int | None, high: int | None) -> int:
    value = parse_int(text)
    if low is not None and value < low:
        raise ParamError(f"{value} is below the minimum {low}")
    if high is not None and value > high:
        raise ParamError(f"{value} is above the maximum {high}")
    return value


def enum_parser(cls: type[E]) -> Callable[[str], E]:
    """A parser for one of ``cls``'s values, matched in any case (as Felix matches them)."""
    by_lower = {member.value.lower(): member for member in cls}

    def parse(text: str) -> E:
        found = by_lower.get(text.strip().lower())
        if found is None:
            allowed = ", ".join(member.value for member in cls)
            raise ParamError(f"invalid value {text!r}: expected one of {allowed}")
        return found

    return parse
