"""The policy rule model shared by policies and profiles (Calico's v3 Rule and EntityRule).

Values are kept as the user wrote them (``protocol: TCP`` stays ``"TCP"``, ``6`` stays ``6``) so
that ``to_manifest()`` prints what calicoctl would; normalisation belongs to the update processors.
"""

from __future__ import annotations

import attrs

from pyfelix.resources.schema import (
    INT,
    INT_OR_STR,
    JSON,
    MISSING,
    RAW,
    STR,
    STR_LIST,
    STR_MAP,
    Context,
    ListOf,
    Missing,
    Nested,
    Slow,
    Spec,
    field,
)
from pyfelix.values import FrozenMap, Port


@attrs.frozen
class PortCodec:
    """JSON number for a single port, string for a range or a name (as calicoctl prints)."""

    def decode(self, value: JSON, ctx: Context) -> Port | Missing:
        if not isinstance(value, int | str) or isinstance(value, bool):
            ctx.error(f"expected a port number, range or name, got {value!r}")
            return MISSING
        try:
            return Port.parse(value)
        except ValueError as exc:
            ctx.error(str(exc))
            return MISSING

    def fast(self, value: JSON) -> Port:
        if type(value) is not int and type(value) is not str:
            raise Slow
        try:
            return Port.parse(value)
        except ValueError:
            raise Slow from None

    def encode(self, value: Port) -> JSON:
        if not value.name and value.min_port == value.max_port:
            return value.min_port
        return str(value)


PORTS = ListOf(PortCodec())


@attrs.frozen
class ICMPFields(Spec):
    type: int | None = field("type", INT)
    code: int | None = field("code", INT)


@attrs.frozen
class ServiceAccountMatch(Spec):
    names: tuple[str, ...] = field("names", STR_LIST, factory=tuple)
    selector: str = field("selector", STR, default="")


@attrs.frozen
class ServiceMatch(Spec):
    name: str = field("name", STR, default="")
    namespace: str = field("namespace", STR, default="")


@attrs.frozen(cache_hash=True)
class EntityRule(Spec):
    """One side (source or destination) of a rule."""

    nets: tuple[str, ...] = field("nets", STR_LIST, factory=tuple)
    selector: str = field("selector", STR, default="")
    namespace_selector: str = field("namespaceSelector", STR, default="")
    ports: tuple[Port, ...] = field("ports", PORTS, factory=tuple)
    not_nets: tuple[str, ...] = field("notNets", STR_LIST, factory=tuple)
    not_selector: str = field("notSelector", STR, default="")
    not_ports: tuple[Port, ...] = field("notPorts", PORTS, factory=tuple)
    service_accounts: ServiceAccountMatch | None = field(
        "serviceAccounts", Nested(ServiceAccountMatch)
    )
    services: ServiceMatch | None = field("services", Nested(ServiceMatch))


@attrs.frozen
class RuleMetadata(Spec):
    annotations: FrozenMap[str] = field("annotations", STR_MAP, factory=FrozenMap)


@attrs.frozen(cache_hash=True)
class Rule(Spec):
    """A policy or profile rule. ``http`` is carried but not enforced (no L7 proxy here)."""

    action: str = field("action", STR, default="")
    ip_version: int | None = field("ipVersion", INT)
    protocol: int | str | None = field("protocol", INT_OR_STR)
    icmp: ICMPFields | None = field("icmp", Nested(ICMPFields))
    not_protocol: int | str | None = field("notProtocol", INT_OR_STR)
    not_icmp: ICMPFields | None = field("notICMP", Nested(ICMPFields))
    source: EntityRule = field("source", Nested(EntityRule), factory=EntityRule)
    destination: EntityRule = field("destination", Nested(EntityRule), factory=EntityRule)
    http: JSON = field("http", RAW)
    metadata: RuleMetadata | None = field("metadata", Nested(RuleMetadata))


RULES = ListOf(Nested(Rule, shared=True))
