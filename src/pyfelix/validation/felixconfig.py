"""Typed FelixConfiguration values: parse each field as Felix would, or say why not.

:func:`parse_param` is shared with the configuration layer, so that what validation accepts is
exactly what the agent can use (durations become seconds, enums their canonical spelling,
failsafe ports a tuple of :class:`ProtoPort`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from pyfelix.config.params import BY_JSON, Param
from pyfelix.config.text import ParamError, ProtoPort, parse_duration
from pyfelix.ipnet import parse_address
from pyfelix.resources.cluster import FelixConfiguration
from pyfelix.selector import SelectorError, parse_selector
from pyfelix.validation.common import INTERFACE_NAME, Checker, check_name
from pyfelix.values import Port

_IFACE_PARAM = re.compile(r"^[a-zA-Z0-9:._+-]{1,15}$")
_INTERFACE_PREFIX = re.compile(r"^[a-zA-Z0-9_-]{1,15}(,[a-zA-Z0-9_-]{1,15})*$")
_KEY_BOOL_LIST = re.compile(r"^([a-zA-Z0-9-_]+=(true|false|),)*([a-zA-Z0-9-_]+=(true|false|))?$")
_KEY_VALUE_LIST = re.compile(r"^([a-zA-Z0-9-_]+=([^=]+),)*([a-zA-Z0-9-_]+=([^=]+))?$")
_STRING_PATTERNS = {
    "logPrefix": (re.compile(r"^[a-zA-Z0-9%: /_-]*$"), "letters, digits and % : / _ - only"),
    "logActionRateLimit": (
        re.compile(r"^[1-9]\d{0,3}/(second|minute|hour|day)$"),
        "N/second, N/minute, N/hour or N/day with N from 1 to 9999",
    ),
    "interfacePrefix": (_INTERFACE_PREFIX, "comma-separated prefixes of [a-zA-Z0-9_-]{1,15}"),
    "featureDetectOverride": (_KEY_BOOL_LIST, "comma-separated key=true|false"),
    "featureGates": (_KEY_VALUE_LIST, "comma-separated key=value"),
    "prometheusMetricsHost": (re.compile(r"^[a-zA-Z0-9:._+-]{1,64}$"), "a host name or address"),
    "iptablesNATOutgoingInterfaceFilter": (_IFACE_PARAM, "an interface name or pattern"),
    "wireguardInterfaceName": (INTERFACE_NAME, "an interface name of at most 15 characters"),
    "wireguardInterfaceNameV6": (INTERFACE_NAME, "an interface name of at most 15 characters"),
}
_REGEX_FIELDS = frozenset(
    {
        "logDebugFilenameRegex",
        "bpfDataIfacePattern",
        "bpfL3IfacePattern",
        "bpfDisableGROForIfaces",
        "mtuIfacePattern",
        "nftablesFlowTableDataIfacePattern",
    }
)
_ADDRESS_FIELDS = {
    "natOutgoingAddress": 4,
    "deviceRouteSourceAddress": 4,
    "deviceRouteSourceAddressIPv6": 6,
}
_CONNTRACK_TIMEOUT_KEYS = frozenset(
    {
        "creationGracePeriod",
        "tcpSynSent",
        "tcpEstablished",
        "tcpFinsSeen",
        "tcpResetSeen",
        "udpTimeout",
        "genericTimeout",
        "icmpTimeout",
    }
)
_DSCP_NAMES = frozenset(
    {"DF", "EF"}
    | {f"AF{a}{b}" for a in range(1, 5) for b in range(1, 4)}
    | {f"CS{n}" for n in range(7)}
)
_MIN_MARK_BITS = 2


def _parse_int(param: Param, value: Any) -> int:
    if param.min is not None and value < param.min:
        raise ParamError(f"{value} is below the minimum {param.min}")
    if param.max is not None and value > param.max:
        raise ParamError(f"{value} is above the maximum {param.max}")
    if param.json in ("iptablesMarkMask", "nftablesMarkMask") and bin(value).count("1") < (
        _MIN_MARK_BITS
    ):
        raise ParamError(f"mark mask {value:#x} must have at least {_MIN_MARK_BITS} bits set")
    return int(value)


def _parse_enum(param: Param, value: str) -> str:
    for allowed in param.values:
        if allowed.lower() == value.lower():
            return allowed
    raise ParamError(f"invalid value {value!r}: expected one of {', '.join(param.values)}")


def _parse_string(param: Param, value: str) -> str:
    if param.json in _STRING_PATTERNS:
        pattern, wanted = _STRING_PATTERNS[param.json]
        if not pattern.match(value):
            raise ParamError(f"invalid value {value!r}: expected {wanted}")
    elif param.json in _REGEX_FIELDS:
        try:
            re.compile(value)
        except re.error as exc:
            raise ParamError(f"invalid regular expression {value!r}: {exc}") from None
    elif param.json in _ADDRESS_FIELDS:
        version = _ADDRESS_FIELDS[param.json]
        try:
            ok = parse_address(value).version == version
        except ValueError:
            ok = False
        if not ok:
            raise ParamError(f"invalid value {value!r}: expected an IPv{version} address")
    elif param.json == "interfaceExclude":
        for item in (part.strip() for part in value.split(",")):
            if len(item) > 1 and item.startswith("/") and item.endswith("/"):
                try:
                    re.compile(item[1:-1])
                except re.error as exc:
                    raise ParamError(f"invalid regular expression {item!r}: {exc}") from None
            elif item and not INTERFACE_NAME.match(item):
                raise ParamError(f"invalid interface name {item!r} (or write a /regex/)")
    elif param.json == "openstackRegion" and value:
        if len(value) > 46:
            raise ParamError("must be at most 46 characters")
        check = Checker()
        check_name(check, value, label=True)
        if check.problems:
            raise ParamError(f"must be a valid DNS label: {check.problems[0].message}")
    elif param.json == "nodeSelector":
        try:
            parse_selector(value)
        except SelectorError as exc:
            raise ParamError(str(exc)) from None
    return value


def _parse_proto_ports(value: list[Any]) -> tuple[ProtoPort, ...]:
    out = []
    for index, item in enumerate(value):
        for key in item:
            if key not in ("protocol", "port", "net"):
                raise ParamError("unknown field", f"[{index}].{key}")
        protocol = item.get("protocol", "")
        if protocol not in ("TCP", "UDP"):
            raise ParamError(
                f"protocol {protocol!r} invalid: failsafe ports take TCP or UDP",
                f"[{index}].protocol",
            )
        port = item.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ParamError(f"port {port!r} invalid: must be 0-65535", f"[{index}].port")
        net = item.get("net", "") or ""
        if net:
            try:
                net = str(ipaddress.ip_network(net, strict=False))
            except ValueError:
                raise ParamError(f"invalid CIDR {net!r}", f"[{index}].net") from None
        out.append(ProtoPort(protocol.lower(), port, net))
    return tuple(out)


def _parse_port_range(value: int | str, *, allow_named: bool = False) -> Port:
    try:
        port = Port.parse(value)
    except ValueError as exc:
        raise ParamError(str(exc)) from None
    if port.is_named and not allow_named:
        raise ParamError(f"{value!r} is not a port or port range")
    if not 0 <= port.min_port <= port.max_port <= 65535:
        raise ParamError(f"invalid port range {value!r}")
    return port


def _parse_object(param: Param, value: Any) -> Any:
    name = param.json
    if name == "healthTimeoutOverrides":
        out = {}
        for index, item in enumerate(value if isinstance(value, tuple | list) else ()):
            label = str(item.get("name", ""))
            if not re.match(r"^[a-zA-Z0-9_ -]+$", label):
                raise ParamError(f"invalid name {label!r}", f"[{index}].name")
            timeout = parse_duration(str(item.get("timeout", "")))
            if timeout < 0:
                raise ParamError("timeout must not be negative", f"[{index}].timeout")
            out[label] = timeout
        return out
    if name in ("routeTableRange", "routeTableRanges"):
        ranges = [value] if name == "routeTableRange" else list(value)
        out_ranges = []
        total = 0
        for index, item in enumerate(ranges):
            where = "" if name == "routeTableRange" else f"[{index}]"
            low, high = item.get("min"), item.get("max")
            if not isinstance(low, int) or not isinstance(high, int) or not 1 <= low <= high:
                raise ParamError("min and max must be integers with 1 <= min <= max", where)
            if name == "routeTableRange" and high > 250:
                raise ParamError("must be a range of route table indices within 1..250", where)
            total += high - low + 1
            out_ranges.append((low, high))
        if total > 65535:
            raise ParamError("targets too many tables (more than 65535)")
        return tuple(out_ranges)
    if name == "bpfConntrackTimeouts":
        if not isinstance(value, Mapping):
            raise ParamError("expected a mapping")
        timeouts = {}
        for key, item in value.items():
            if key not in _CONNTRACK_TIMEOUT_KEYS:
                raise ParamError("unknown field", key)
            timeouts[key] = item if item == "Auto" else parse_duration(str(item))
        return timeouts
    return value


def _parse_other(param: Param, value: Any) -> Any:
    name = param.json
    if name == "kubeNodePortRanges":
        items = value if isinstance(value, tuple | list) else (value,)
        if len(items) > 7:
            raise ParamError("node port ranges list is too long (max 7)")
        return tuple(_parse_port_range(v) for v in items)
    if name in ("natPortRange", "bpfPSNATPorts"):
        return _parse_port_range(value)
    if name == "istioDSCPMark":
        if isinstance(value, int):
            if not 0 <= value <= 63:
                raise ParamError(f"DSCP value {value} invalid: must be 0-63")
        elif value.upper() not in _DSCP_NAMES:
            raise ParamError(f"invalid DSCP name {value!r}")
        return value
    return value


def parse_param(param: Param, value: Any) -> Any:
    """The typed value Felix would use; raises :class:`ParamError`."""
    kind = param.kind
    if kind == "duration":
        return parse_duration(value)
    if kind == "int":
        return _parse_int(param, value)
    if kind == "enum":
        return _parse_enum(param, value) if param.values else value
    if kind == "string":
        return _parse_string(param, value)
    if kind == "cidr-list":
        out = []
        for index, item in enumerate(value):
            try:
                network = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ParamError(f"invalid CIDR {item!r}", f"[{index}]") from None
            if param.json == "externalNodesList" and network.version != 4:
                raise ParamError(f"{item!r} is not an IPv4 CIDR", f"[{index}]")
            out.append(str(network))
        return tuple(out)
    if kind == "port-list":
        return _parse_proto_ports(list(value))
    if kind == "list-string":
        for index, item in enumerate(value):
            if not _IFACE_PARAM.match(item.rstrip("+")) and item != "+":
                raise ParamError(f"invalid interface filter {item!r}", f"[{index}]")
        return tuple(value)
    if kind == "object":
        return _parse_object(param, value)
    if kind == "other":
        return _parse_other(param, value)
    return value


def check_felix_configuration(c: Checker, resource: FelixConfiguration) -> None:
    spec = c.at("spec")
    name = resource.name
    if name != "default":
        # node.<node name> is a name too: an invalid node name matches no node, silently.
        check_name(c.at("metadata.name"), name)
    if resource.spec.values.get("nodeSelector") and (name == "default" or name.startswith("node.")):
        spec.at("nodeSelector").error(
            "nodeSelector must not be set on the 'default' or per-node ('node.*') "
            "FelixConfiguration"
        )
    if {"routeTableRange", "routeTableRanges"} <= resource.spec.values.keys():
        spec.error("routeTableRange and routeTableRanges cannot both be set")
    for key, value in resource.spec.values.items():
        if value == "":
            # Unset: Felix skips an empty value from every source (Config.UpdateFrom), and
            # Calico's Go client writes some fields empty (bpfLogLevel has no omitempty).
            continue
        try:
            parse_param(BY_JSON[key], value)
        except ParamError as exc:
            separator = "" if exc.field.startswith("[") or not exc.field else "."
            Checker(f"{spec.at(key).path}{separator}{exc.field}", c.problems).error(str(exc))
        except (TypeError, AttributeError) as exc:
            spec.at(key).error(f"invalid value {value!r}: {exc}")
