"""Validation of policy and profile rules (Calico's Rule and EntityRule checks)."""

from __future__ import annotations

from pyfelix.errors import FieldProblem
from pyfelix.ipnet import IPNetwork
from pyfelix.resources.rules import EntityRule, ICMPFields, Rule
from pyfelix.validation.common import (
    Checker,
    check_cidr,
    check_enum,
    check_name,
    check_port_number,
    check_protocol,
    check_selector,
    normalise_protocol,
    port_name_problem,
    supports_ports,
)
from pyfelix.values import Port

ACTIONS = ("Allow", "Deny", "Log", "Pass")
ICMP_PROTOCOLS = {"ICMP": 4, 1: 4, "ICMPv6": 6, 58: 6}
_MAX_HTTP_ITEMS = 20


def _check_ports(c: Checker, ports: tuple[Port, ...], protocol: int | str | None) -> None:
    for index, port in enumerate(ports):
        pc = c.at(index)
        if port.is_named:
            problem = port_name_problem(port.name)
            if problem:
                pc.error(f"invalid named port {port.name!r}: {problem}")
        else:
            check_port_number(pc, port.min_port)
            check_port_number(pc, port.max_port)
            pc.check(
                port.min_port <= port.max_port,
                f"minimum port {port.min_port} is greater than maximum port {port.max_port}",
            )
    if not ports:
        return
    if protocol is None:
        if any(not p.is_named for p in ports):
            c.error("rules with numeric ports or port ranges must set protocol to TCP, UDP or SCTP")
    elif not supports_ports(protocol):
        c.error(f"rules that specify ports must set protocol to TCP, UDP or SCTP, not {protocol!r}")


def _check_nets(c: Checker, nets: tuple[str, ...], negated: bool) -> list[IPNetwork]:
    parsed = []
    for index, net in enumerate(nets):
        network = check_cidr(c.at(index), net, strict=True)
        if network is None:
            continue
        parsed.append(network)
        if negated and network.prefixlen == 0:
            c.at(index).error(
                f"catch-all CIDR {net!r} in notNets matches nothing; remove it or use nets"
            )
    return parsed


def _check_entity(c: Checker, entity: EntityRule, protocol: int | str | None) -> list[IPNetwork]:
    networks = _check_nets(c.at("nets"), entity.nets, negated=False)
    networks += _check_nets(c.at("notNets"), entity.not_nets, negated=True)
    check_selector(c.at("selector"), entity.selector)
    check_selector(c.at("notSelector"), entity.not_selector)
    check_selector(c.at("namespaceSelector"), entity.namespace_selector, allow_global=True)
    ns_sel = entity.namespace_selector.strip()
    if "global(" in ns_sel and ns_sel != "global()":
        c.at("namespaceSelector").error("global() cannot be combined with other selectors")
    _check_ports(c.at("ports"), entity.ports, protocol)
    _check_ports(c.at("notPorts"), entity.not_ports, protocol)
    if entity.service_accounts is not None:
        sa = c.at("serviceAccounts")
        for index, name in enumerate(entity.service_accounts.names):
            check_name(sa.at("names").at(index), name)
        check_selector(sa.at("selector"), entity.service_accounts.selector)
    if entity.services is not None:
        sc = c.at("services")
        if sc.at("name").check(bool(entity.services.name), "services must specify a service name"):
            check_name(sc.at("name"), entity.services.name)
        if entity.services.namespace:
            check_name(sc.at("namespace"), entity.services.namespace, label=True)
        clashes = {
            "selector": entity.selector,
            "notSelector": entity.not_selector,
            "namespaceSelector": entity.namespace_selector,
            "nets": entity.nets,
            "notNets": entity.not_nets,
            "serviceAccounts": entity.service_accounts,
        }
        for name, value in clashes.items():
            if value:
                sc.error(f"cannot specify {name} and services on the same rule side")
    return networks


def _check_icmp(c: Checker, icmp: ICMPFields | None) -> None:
    if icmp is None:
        return
    if icmp.type is not None:
        c.at("type").check(0 <= icmp.type <= 254, f"ICMP type {icmp.type} invalid: must be 0-254")
    if icmp.code is not None:
        c.at("code").check(0 <= icmp.code <= 255, f"ICMP code {icmp.code} invalid: must be 0-255")
        c.at("code").check(icmp.type is not None, "ICMP code specified without an ICMP type")


#: Rules checked, by value, with what was found: policies repeat rules (the same peers, ports
#: and action in many namespaces' policies), and a rule's problems depend on nothing else.
_CHECKED: dict[tuple[Rule, str, bool], tuple[tuple[str, str], ...]] = {}
#: How many are kept (forgotten all at once beyond).
CHECKED_RULES = 16384


def check_rule(c: Checker, rule: Rule, *, direction: str, global_policy: bool = False) -> None:
    """One rule; ``direction`` is "ingress" or "egress" (for the service-side checks). A rule
    checked before (an equal value, anywhere) has its problems repeated at ``c``'s path."""
    key = (rule, direction, global_policy)
    try:
        found = _CHECKED.get(key)
    except TypeError:  # a value that cannot be hashed (an http match's lists): checked here
        _check_rule(c, rule, direction=direction, global_policy=global_policy)
        return
    if found is None:
        scratch = Checker()
        _check_rule(scratch, rule, direction=direction, global_policy=global_policy)
        found = tuple((problem.field, problem.message) for problem in scratch.problems)
        if len(_CHECKED) >= CHECKED_RULES:
            _CHECKED.clear()
        _CHECKED[key] = found
    if found:
        base = c.path
        c.problems.extend(FieldProblem(_under(base, path), message) for path, message in found)


def _under(base: str, path: str) -> str:
    """``path`` (found from a rule's own root) below ``base``, as ``Checker.at`` joins them."""
    if not path:
        return base
    if path.startswith("[") or not base:
        return base + path
    return f"{base}.{path}"


def _check_rule(c: Checker, rule: Rule, *, direction: str, global_policy: bool) -> None:
    if not rule.action:
        c.at("action").error("an action is required")
    else:
        check_enum(c.at("action"), rule.action, ACTIONS)
    if rule.ip_version is not None:
        c.at("ipVersion").check(rule.ip_version in (4, 6), "ipVersion must be 4 or 6")
    protocol = None if rule.protocol is None else normalise_protocol(rule.protocol)
    if rule.protocol is not None:
        check_protocol(c.at("protocol"), rule.protocol)
    if rule.not_protocol is not None:
        check_protocol(c.at("notProtocol"), rule.not_protocol)
    for name, value in (("protocol", protocol), ("notProtocol", rule.not_protocol)):
        wanted = ICMP_PROTOCOLS.get(normalise_protocol(value)) if value is not None else None
        if wanted is not None and rule.ip_version not in (None, wanted):
            c.at(name).error(f"protocol {value} requires ipVersion {wanted}")
    for name, icmp in (("icmp", rule.icmp), ("notICMP", rule.not_icmp)):
        if icmp is None:
            continue
        _check_icmp(c.at(name), icmp)
        if protocol not in ICMP_PROTOCOLS:
            c.at(name).error("ICMP fields require protocol to be ICMP or ICMPv6")
    networks = _check_entity(c.at("source"), rule.source, protocol)
    networks += _check_entity(c.at("destination"), rule.destination, protocol)
    versions = {n.version for n in networks}
    if len(versions) > 1:
        c.error("rule contains both IPv4 and IPv6 CIDRs")
    elif rule.ip_version is not None and versions and versions != {rule.ip_version}:
        c.at("ipVersion").error("rule IP version doesn't match CIDR version")
    if rule.destination.services is not None and (
        rule.destination.ports or rule.destination.not_ports
    ):
        c.at("destination").error("ports and notPorts cannot be specified with services")
    if direction == "egress" and rule.source.services is not None:
        c.at("source.services").error("not allowed in egress rule source")
    if direction == "ingress" and rule.destination.services is not None:
        c.at("destination.services").error("not allowed in ingress rule destination")
    if global_policy:
        side = rule.destination if direction == "egress" else rule.source
        side_name = "destination" if direction == "egress" else "source"
        if side.services is not None and not side.services.namespace:
            c.at(f"{side_name}.services.namespace").error(
                "must specify a namespace in a global policy"
            )
    _check_http(c.at("http"), rule, protocol, direction)


def _check_http(c: Checker, rule: Rule, protocol: int | str | None, direction: str) -> None:
    http = rule.http
    if http is None:
        return
    if direction == "egress":
        c.error("not allowed in egress rules")
    if rule.action != "Allow":
        c.error("HTTP match is only valid on Allow rules")
    if protocol not in (None, "TCP", 6):
        c.error("rules with HTTP match must have protocol TCP or unset")
    if not hasattr(http, "items"):
        c.error("expected a mapping with methods and paths")
        return
    for key in http:
        if key not in ("methods", "paths"):
            c.at(key).error("unknown field")
    methods = list(http.get("methods") or ())
    if len(methods) > _MAX_HTTP_ITEMS:
        c.at("methods").error(f"at most {_MAX_HTTP_ITEMS} methods")
    if len(set(methods)) != len(methods):
        c.at("methods").error("duplicate methods")
    paths = list(http.get("paths") or ())
    if len(paths) > _MAX_HTTP_ITEMS:
        c.at("paths").error(f"at most {_MAX_HTTP_ITEMS} paths")
    for index, path in enumerate(paths):
        pc = c.at("paths").at(index)
        if not hasattr(path, "get"):
            pc.error("expected a mapping with exact or prefix")
            continue
        set_keys = [k for k in ("exact", "prefix") if path.get(k)]
        if len(set_keys) != 1:
            pc.error("set exactly one of 'exact' or 'prefix'")
            continue
        value = str(path[set_keys[0]])
        pc.at(set_keys[0]).check(
            value.startswith("/") and not any(ch in value for ch in "?# ") and len(value) <= 1024,
            f"invalid path {value!r}: must start with '/' and contain no '?', '#' or space",
        )
