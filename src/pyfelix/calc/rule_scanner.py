"""The rule scanner: which IP sets the active rules need, reference counted.

Each active policy or profile hands over its rules; the scanner works out the IP sets they refer
to (selectors, named ports, services) with Felix's ids, and reports a set as active when the
first rule needs it and inactive when the last one stops. The IP set member index and the
service index fill the active sets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cached_property

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.outputs import RulesOutput
from pyfelix.calc.policy_resolver import policy_id
from pyfelix.selector import make_unique_id, parse_selector
from pyfelix.values import Port

IP_NET = "hash:net"
IP_PORT = "hash:ip,port"
IP_ONLY = "hash:ip"
_PORT_PROTOCOLS = {"tcp": "tcp", "udp": "udp", "sctp": "sctp", 6: "tcp", 17: "udp", 132: "sctp"}


@attrs.frozen
class IPSetData:
    """What an IP set holds: a selector's addresses, a named port, or a service's endpoints."""

    selector: str = ""
    named_port: str = ""
    protocol: str = ""
    service: str = ""
    include_ports: bool = False

    @cached_property
    def id(self) -> str:
        """Felix's id: "s:..." for selectors, "n:..." named ports, "svc:"/"svcnoport:"."""
        if self.service:
            return make_unique_id("svc" if self.include_ports else "svcnoport", self.service)
        selector_id = parse_selector(self.selector).unique_id
        if not self.named_port:
            return selector_id
        return make_unique_id("n", f"{selector_id},{self.protocol},{self.named_port}")

    @property
    def type(self) -> str:
        if self.service:
            return IP_PORT if self.include_ports else IP_ONLY
        return IP_PORT if self.named_port else IP_NET

    def describe(self) -> dict[str, str]:
        """The ``source`` field of the dry-run snapshot."""
        if self.service:
            return {"service": self.service}
        if self.named_port:
            return {
                "selector": str(parse_selector(self.selector)),
                "named_port": self.named_port,
                "protocol": self.protocol,
            }
        return {"selector": str(parse_selector(self.selector))}


def _named_port_protocols(protocol: int | str | None) -> tuple[str, ...]:
    """Named ports on a rule without a protocol match both TCP and UDP ports."""
    if protocol is None:
        return ("tcp", "udp")
    named = _PORT_PROTOCOLS.get(protocol)
    return (named,) if named else ()


def side_ipsets(
    selector: str, ports: tuple[Port, ...], protocol: int | str | None
) -> tuple[list[IPSetData], list[IPSetData]]:
    """(selector sets, named-port sets) for one side of a rule.

    The plain selector set is only needed when the side has numeric ports or no ports at all:
    a named-port set already filters by the selector.
    """
    named = [p for p in ports if p.is_named]
    numeric = [p for p in ports if not p.is_named]
    selector_sets = [IPSetData(selector=selector)] if selector and (numeric or not named) else []
    named_sets = [
        IPSetData(selector=selector or "all()", named_port=port.name, protocol=proto)
        for port in named
        for proto in _named_port_protocols(protocol)
    ]
    return selector_sets, named_sets


def fold_selectors(selector: str, not_selector: str) -> tuple[str, str]:
    """Felix's combineMatchesIfPossible: with a positive selector, the rule only matches known
    endpoints, so the negated one filters it (``(sel) && (!(notsel))``, one IP set) instead of
    being a set of its own; without one, the negation must also match the outside world."""
    if selector and not_selector:
        return f"({selector}) && (!({not_selector}))", ""
    return selector, not_selector


def _side_ipsets(
    selector: str,
    not_selector: str,
    ports: tuple[Port, ...],
    not_ports: tuple[Port, ...],
    protocol: int | str | None,
) -> list[IPSetData]:
    selector, not_selector = fold_selectors(selector, not_selector)
    selector_sets, named_sets = side_ipsets(selector, ports, protocol)
    _, not_named_sets = side_ipsets(selector, tuple(p for p in not_ports if p.is_named), protocol)
    sets = selector_sets + named_sets + not_named_sets
    if not_selector:
        sets.append(IPSetData(selector=not_selector))
    return sets


@functools.lru_cache(maxsize=1 << 16)
def rule_ipsets(rule: model.Rule) -> tuple[IPSetData, ...]:
    """Every IP set one rule refers to (the renderer uses the same ids); kept by value, as
    ``parse_rule`` is: policies repeat their rules."""
    return tuple(_rule_ipsets(rule))


def _rule_ipsets(rule: model.Rule) -> list[IPSetData]:
    sets = _side_ipsets(
        rule.src_selector, rule.not_src_selector, rule.src_ports, rule.not_src_ports, rule.protocol
    )
    sets += _side_ipsets(
        rule.dst_selector, rule.not_dst_selector, rule.dst_ports, rule.not_dst_ports, rule.protocol
    )
    if rule.src_service:
        sets.append(IPSetData(service=f"{rule.src_service_namespace}/{rule.src_service}"))
    if rule.dst_service:
        sets.append(
            IPSetData(
                service=f"{rule.dst_service_namespace}/{rule.dst_service}", include_ports=True
            )
        )
    return sets


def _ids(sets: Iterable[IPSetData]) -> tuple[str, ...]:
    return tuple(data.id for data in sets)


@functools.lru_cache(maxsize=1 << 16)
def parse_rule(rule: model.Rule) -> m.ParsedRule:
    """The rule with the ids of the IP sets it matches on, as they leave the graph."""
    src_selector, not_src_selector = fold_selectors(rule.src_selector, rule.not_src_selector)
    dst_selector, not_dst_selector = fold_selectors(rule.dst_selector, rule.not_dst_selector)
    src, src_named = side_ipsets(src_selector, rule.src_ports, rule.protocol)
    dst, dst_named = side_ipsets(dst_selector, rule.dst_ports, rule.protocol)
    not_dst_ports = tuple(p for p in rule.not_dst_ports if p.is_named)
    _, not_dst_named = side_ipsets(dst_selector, not_dst_ports, rule.protocol)
    src_service = dst_service = ""
    if rule.src_service:
        src_service = IPSetData(service=f"{rule.src_service_namespace}/{rule.src_service}").id
    if rule.dst_service:
        service = f"{rule.dst_service_namespace}/{rule.dst_service}"
        dst_service = IPSetData(service=service, include_ports=True).id
    ipsets = m.RuleIPSets(
        src=_ids(src),
        src_named_ports=_ids(src_named),
        not_src=_ids([IPSetData(selector=not_src_selector)] if not_src_selector else []),
        dst=_ids(dst),
        dst_named_ports=_ids(dst_named),
        not_dst=_ids([IPSetData(selector=not_dst_selector)] if not_dst_selector else []),
        not_dst_named_ports=_ids(not_dst_named),
        src_service=src_service,
        dst_service=dst_service,
    )
    return m.ParsedRule(rule, ipsets)


def parse_rules(rules: Iterable[model.Rule]) -> tuple[m.ParsedRule, ...]:
    return tuple(parse_rule(rule) for rule in rules)


class RuleScanner:
    """Between the active rules calculator and the dataplane, as Felix's: active policies and
    profiles go on with their rules parsed (IP set ids resolved), and each IP set is announced
    active when the first rule needs it, inactive when the last one stops."""

    def __init__(
        self,
        on_ipset_active: Callable[[IPSetData], None],
        on_ipset_inactive: Callable[[IPSetData], None],
        output: RulesOutput,
    ) -> None:
        self._active = on_ipset_active
        self._inactive = on_ipset_inactive
        self._out = output
        self._by_rules: dict[Hashable, frozenset[IPSetData]] = {}
        self._users: dict[IPSetData, set[Hashable]] = {}

    def on_policy_active(self, key: model.PolicyKey, policy: model.Policy) -> None:
        self.on_rules_update(key, policy.inbound_rules + policy.outbound_rules)
        pid = policy_id(key)
        inbound, outbound = parse_rules(policy.inbound_rules), parse_rules(policy.outbound_rules)
        selector = str(parse_selector(policy.selector))
        update = m.ActivePolicyUpdate(pid, policy, inbound, outbound, selector)
        self._out.on_policy_update(update)

    def on_policy_inactive(self, key: model.PolicyKey) -> None:
        self._out.on_policy_remove(policy_id(key))
        self.on_rules_remove(key)

    def on_profile_active(self, name: str, rules: model.ProfileRules) -> None:
        self.on_rules_update(("profile", name), rules.inbound_rules + rules.outbound_rules)
        inbound, outbound = parse_rules(rules.inbound_rules), parse_rules(rules.outbound_rules)
        self._out.on_profile_update(m.ActiveProfileUpdate(name, rules, inbound, outbound))

    def on_profile_inactive(self, name: str) -> None:
        self._out.on_profile_remove(name)
        self.on_rules_remove(("profile", name))

    def on_rules_update(self, rules_id: Hashable, rules: Iterable[model.Rule]) -> None:
        wanted = frozenset(s for rule in rules for s in rule_ipsets(rule))
        old = self._by_rules.get(rules_id, frozenset())
        self._by_rules[rules_id] = wanted
        for data in wanted - old:
            users = self._users.setdefault(data, set())
            users.add(rules_id)
            if len(users) == 1:
                self._active(data)
        self._release(rules_id, old - wanted)

    def on_rules_remove(self, rules_id: Hashable) -> None:
        self._release(rules_id, self._by_rules.pop(rules_id, frozenset()))

    def _release(self, rules_id: Hashable, sets: Iterable[IPSetData]) -> None:
        for data in sets:
            users = self._users.get(data)
            if users is None:
                continue
            users.discard(rules_id)
            if not users:
                del self._users[data]
                self._inactive(data)

    @property
    def active_ipsets(self) -> Sequence[IPSetData]:
        return list(self._users)
