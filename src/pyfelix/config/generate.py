"""Writes ``felix_config.py`` from the parameter table: ``python -m pyfelix.config.generate``.

The typed configuration is generated rather than written by hand so that the table stays the
one place a parameter's name, type and default are stated; a test fails when the committed
module and the table disagree.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from pyfelix.config.params import DATASTORE_PARAMS, PARAMS, Param
from pyfelix.config.text import (
    parse_felix_port_list,
    parse_list,
    parse_pairs,
    parse_port_range,
    parse_port_ranges,
    parse_regex,
    parse_route_table_range,
    parse_route_table_ranges,
    parse_timeouts,
)

TARGET = Path(__file__).with_name("felix_config.py")

#: Attribute names the mechanical conversion gets wrong (runs of capitals).
_NAMES = {
    "VXLANMTUV6": "vxlan_mtu_v6",
    "VXLANMTU": "vxlan_mtu",
    "VXLANVNI": "vxlan_vni",
    "IpInIpMtu": "ipip_mtu",
    "IpInIpEnabled": "ipip_enabled",
    "IpInIpTunnelAddr": "ipip_tunnel_addr",
    "IPv4VXLANTunnelAddr": "ipv4_vxlan_tunnel_addr",
    "IPv6VXLANTunnelAddr": "ipv6_vxlan_tunnel_addr",
    "VXLANTunnelMACAddr": "vxlan_tunnel_mac_addr",
    "VXLANTunnelMACAddrV6": "vxlan_tunnel_mac_addr_v6",
    "MTUIfacePattern": "mtu_iface_pattern",
    "BPFDSROptoutCIDRs": "bpf_dsr_optout_cidrs",
    "BPFExcludeCIDRsFromNAT": "bpf_exclude_cidrs_from_nat",
    "BPFPSNATPorts": "bpf_psnat_ports",
    "BPFCTLBLogFilter": "bpf_ctlb_log_filter",
    "ClusterGUID": "cluster_guid",
    "ExternalNodesCIDRList": "external_nodes_cidr_list",
    "IstioDSCPMark": "istio_dscp_mark",
    "NFTablesMode": "nftables_mode",
    "NFTablesFlowTableOffload": "nftables_flow_table_offload",
    "NFTablesFlowTableDataIfacePattern": "nftables_flow_table_data_iface_pattern",
    "PrometheusWireGuardMetricsEnabled": "prometheus_wireguard_metrics_enabled",
    "BPFJITHardening": "bpf_jit_hardening",
    "BPFIPFragTimeout": "bpf_ip_frag_timeout",
    "BPFL3IfacePattern": "bpf_l3_iface_pattern",
    "BPFIPFragmentReassemblyEnabled": "bpf_ip_fragment_reassembly_enabled",
    "WireguardMTUV6": "wireguard_mtu_v6",
}


def attribute(param: Param) -> str:
    """Felix's name in snake case; durations drop their unit suffix (they are in seconds)."""
    name = param.felix
    if param.kind == "duration":
        name = re.sub(r"(Secs|Millis)$", "", name)
    if name in _NAMES:
        return _NAMES[name]
    name = name.replace("IPv6", "Ipv6").replace("IPv4", "Ipv4").replace("IPs", "Ips")
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])|(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return name.lower()


def enum_class(param: Param) -> str:
    return param.felix


def member(value: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", value).upper()


def _enum_default(param: Param) -> str:
    default = str(param.default or "")
    for value in param.values:
        if value.lower() == default.lower():
            return f"{enum_class(param)}.{member(value)}"
    raise ValueError(f"{param.felix}: default {default!r} is not one of {param.values}")


_OBJECT_PARSERS: dict[str, tuple[str, str, Callable[[str], object]]] = {
    "HealthTimeoutOverrides": ("tuple[tuple[str, float], ...]", "parse_timeouts", parse_timeouts),
    "RouteTableRange": (
        "tuple[int, int] | None",
        "parse_route_table_range",
        parse_route_table_range,
    ),
    "RouteTableRanges": (
        "tuple[tuple[int, int], ...]",
        "parse_route_table_ranges",
        parse_route_table_ranges,
    ),
    "MTUIfacePattern": ("str", "parse_regex", parse_regex),
    "BPFConntrackTimeouts": ("tuple[tuple[str, str], ...]", "parse_pairs", parse_pairs),
    "KubeNodePortRanges": ("tuple[tuple[int, int], ...]", "parse_port_ranges", parse_port_ranges),
    "NATPortRange": ("tuple[int, int] | None", "parse_port_range", parse_port_range),
    "BPFPSNATPorts": ("tuple[int, int] | None", "parse_port_range", parse_port_range),
    "IstioDSCPMark": ("str", "str", str),
}


#: Parameters written as one string (in a FelixConfiguration too) that Felix reads as a list
#: or as name=value pairs: typed as such, so no consumer splits the text again.
_TEXT_COLLECTIONS = {
    "InterfacePrefix": "list",
    "InterfaceExclude": "list",
    "FeatureDetectOverride": "map",
}


def field(param: Param) -> tuple[str, str, str]:
    """(annotation, default expression, parser expression) for one parameter."""
    kind, default = param.kind, param.default
    collection = _TEXT_COLLECTIONS.get(param.felix)
    if collection == "list":
        return "tuple[str, ...]", repr(parse_list(str(default or ""))), "parse_list"
    if collection == "map":
        return "tuple[tuple[str, str], ...]", repr(parse_pairs(str(default or ""))), "parse_pairs"
    if kind == "string" and param.felix in _OBJECT_PARSERS:
        return "str", repr(str(default or "")), _OBJECT_PARSERS[param.felix][1]
    if kind == "bool":
        if default is None:
            return "bool | None", "None", "parse_bool"
        return "bool", repr(bool(default)), "parse_bool"
    if kind == "int":
        bounds = f"low={param.min!r}, high={param.max!r}"
        return "int", repr(int(str(default))), f"partial(parse_int_in, {bounds})"
    if kind == "duration":
        millis = param.felix.endswith("Millis")
        return "float", repr(float(str(default))), f"partial(parse_seconds, millis={millis})"
    if kind == "enum":
        if not param.values:
            return "str", repr(str(default or "")), "str"
        return enum_class(param), _enum_default(param), f"enum_parser({enum_class(param)})"
    if kind == "string":
        return "str", repr(str(default or "")), "str"
    if kind == "port-list":
        parsed = parse_felix_port_list(str(default or "none"))
        return "tuple[ProtoPort, ...]", repr(parsed), "parse_felix_port_list"
    if kind in ("list-string", "cidr-list"):
        return "tuple[str, ...]", repr(parse_list(str(default or ""))), "parse_list"
    if kind == "map":
        return "tuple[tuple[str, str], ...]", repr(parse_pairs(str(default or ""))), "parse_pairs"
    annotation, parser_name, parser = _OBJECT_PARSERS[param.felix]
    if default is None:
        value = "None" if annotation.endswith("None") else "()"
    else:
        value = repr(parser(str(default)))
    return annotation, value, parser_name


def render() -> str:
    params = [p for p in (*PARAMS, *DATASTORE_PARAMS) if p.felix]
    out = [
        '"""The typed Felix configuration. Generated by ``python -m pyfelix.config.generate``',
        'from the parameter table (config/params.py): do not edit."""',
        "",
        "# ruff: noqa: E501",
        "",
        "from __future__ import annotations",
        "",
        "import enum",
        "from functools import partial",
        "",
        "import attrs",
        "",
        "from pyfelix.config.text import (",
        "    Field,",
        "    ProtoPort,",
        "    enum_parser,",
        "    parse_bool,",
        "    parse_felix_port_list,",
        "    parse_int_in,",
        "    parse_list,",
        "    parse_pairs,",
        "    parse_port_range,",
        "    parse_port_ranges,",
        "    parse_regex,",
        "    parse_route_table_range,",
        "    parse_route_table_ranges,",
        "    parse_seconds,",
        "    parse_timeouts,",
        ")",
        "",
    ]
    for param in params:
        if param.kind == "enum" and param.values:
            out += ["", f"class {enum_class(param)}(enum.StrEnum):"]
            out += [f"    {member(v)} = {v!r}" for v in param.values]
            out.append("")
    out += [
        "",
        "@attrs.frozen",
        "class FelixConfig:",
        '    """Every Felix parameter, typed, with Felix\'s default; durations in seconds."""',
        "",
    ]
    rows = []
    for param in params:
        annotation, default, parser = field(param)
        name = attribute(param)
        out.append(f"    {name}: {annotation} = {default}")
        rows.append(f"    Field({name!r}, {param.felix!r}, {parser}),")
    out += ["", "", "#: Attribute, Felix name and text parser of every parameter.", "FIELDS = ("]
    out += rows
    out += [")", ""]
    return "\n".join(out)


def main() -> None:
    text = render()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if TARGET.read_text() == text else 1)
    TARGET.write_text(text)


if __name__ == "__main__":
    main()
