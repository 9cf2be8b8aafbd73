"""Felix's internal data model: the keys and values the calculation graph consumes.

The update processors (:mod:`pyfelix.syncer.processors`) turn v3 resources into these, so both
datastores feed the graph identically. Keys mirror Felix's model keys (with the policy's tier in
its key, as our architecture asks); values record the v3 resource they came from (``origin``,
excluded from equality) so the validation filter can check it and name it in warnings.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Mapping
from itertools import compress
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from pyfelix.values import FrozenMap, Port

T = TypeVar("T")

if TYPE_CHECKING:
    # Only a type: values record the resource they came from, the model never reads it.
    from pyfelix.resources import Resource

NAMESPACE_LABEL = "projectcalico.org/namespace"
ORCHESTRATOR_LABEL = "projectcalico.org/orchestrator"
SERVICE_ACCOUNT_LABEL = "projectcalico.org/serviceaccount"
NAME_LABEL = "projectcalico.org/name"
NAMESPACE_LABEL_PREFIX = "pcns."
SERVICE_ACCOUNT_LABEL_PREFIX = "pcsa."
NAMESPACE_PROFILE_PREFIX = "kns."
SERVICE_ACCOUNT_PROFILE_PREFIX = "ksa."


def _escape(segment: str) -> str:
    return segment.replace("%", "%25").replace("/", "%2f")


# Every class here is made without a weak-reference slot: nothing refers to a key or a value
# weakly, and the slot took 16 bytes of each rule, policy, endpoint and profile's labels (an
# object's size is rounded to 16), 400,000 of them in a cluster of tenants.

# ---------------------------------------------------------------------------------------- keys
# Keys are hashed again and again (every index and set holds them): each keeps its hash.

#: Each kept-hash class's fields that its equality compares, read at once.
_HASHED: dict[type, Callable[[Any], Any]] = {}


def _no_fields(_: object) -> tuple[()]:
    return ()


def _hashed(self: Any) -> Any:
    """The values of the fields equality compares (what a kept hash is the hash of)."""
    fields = _HASHED.get(type(self))
    if fields is None:
        names = [f.name for f in attrs.fields(type(self)) if f.eq]
        fields = _HASHED[type(self)] = operator.attrgetter(*names) if names else _no_fields
    return fields(self)


def _kept_hash(self: Any) -> int:
    """The hash of the fields equality compares, computed on first use and kept as a plain
    int: attrs' own cached hash is an int subclass, 36 bytes more for each of the 400,000
    keys and rules of a cluster of tenants. Like every string's hash, it is this process's
    own; keys never cross to another (the dry-run's child hands on fields)."""
    kept: int | None = self._hash
    if kept is None:
        kept = hash(_hashed(self))
        object.__setattr__(self, "_hash", kept)
    return kept


if TYPE_CHECKING:
    KeptHash = object
else:
    try:
        from pyfelix._native import KeptHash
    except ImportError:  # not built: the hash is kept in a slot, by ``_kept_hash``
        KeptHash = object


def _hash_kept(cls: type[T]) -> type[T]:
    """A class ``attrs.frozen`` then makes with a kept hash for its hash (its own
    ``__hash__``: attrs generates none). Declared on ``KeptHash``, the compiled base, it is
    that base's, kept there and read in C (8M hashes of a dry-run's keys were a Python frame
    each); on ``object`` (the compiled module not built), ``_kept_hash``, with a slot to
    keep it in. The same hash either way."""
    if KeptHash is not object and issubclass(cls, KeptHash):
        cls._hashed = _hashed  # type: ignore[attr-defined]
        cls.__hash__ = KeptHash.__hash__  # type: ignore[method-assign]
        return cls
    cls.__annotations__ = {**inspect.get_annotations(cls), "_hash": "int | None"}
    cls._hash = attrs.field(default=None, init=False, eq=False, repr=False)  # type: ignore[attr-defined]
    cls.__hash__ = _kept_hash  # type: ignore[method-assign]
    return cls


def _hash_of_its_string(cls: type[T]) -> type[T]:
    """A key class of one string field, which ``attrs.frozen`` then makes with a hash of that
    string and the class: a string keeps its own hash, so the key need keep none (an int
    and a slot, 40 bytes for each of 400,000 namespaces' and service accounts' profile
    keys)."""
    (name,) = inspect.get_annotations(cls)
    of = operator.attrgetter(name)
    salt = hash(cls.__qualname__)

    def __hash__(self: object) -> int:
        return hash(of(self)) ^ salt

    cls.__hash__ = __hash__  # type: ignore[method-assign]
    return cls


@attrs.frozen(weakref_slot=False)
@_hash_kept
class WorkloadEndpointKey(KeptHash):
    hostname: str
    orchestrator: str
    workload: str
    endpoint: str

    @property
    def namespace(self) -> str:
        return self.workload.partition("/")[0] if "/" in self.workload else ""

    def __str__(self) -> str:
        return (
            f"/calico/v1/host/{self.hostname}/workload/{_escape(self.orchestrator)}/"
            f"{_escape(self.workload)}/endpoint/{_escape(self.endpoint)}"
        )


@attrs.frozen(weakref_slot=False)
@_hash_kept
class HostEndpointKey(KeptHash):
    hostname: str
    endpoint: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/endpoint/{_escape(self.endpoint)}"


#: Either kind of endpoint's key.
EndpointKey = WorkloadEndpointKey | HostEndpointKey


@attrs.frozen(weakref_slot=False)
@_hash_kept
class PolicyKey(KeptHash):
    name: str
    namespace: str
    kind: str
    tier: str

    @property
    def staged(self) -> bool:
        return self.kind.startswith("Staged")

    def __str__(self) -> str:
        return f"/calico/v1/policy/{self.kind}/{self.namespace}/{self.name}"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class TierKey:
    name: str

    def __str__(self) -> str:
        return f"/calico/v1/policy/tier/{self.name}/metadata"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class ProfileRulesKey:
    name: str

    def __str__(self) -> str:
        return f"/calico/v1/policy/profile/{_escape(self.name)}/rules"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class ProfileLabelsKey:
    name: str

    def __str__(self) -> str:
        return f"/calico/v1/policy/profile/{_escape(self.name)}/labels"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class NetworkSetKey:
    """``name`` is "<namespace>/<name>" for a namespaced NetworkSet."""

    name: str

    def __str__(self) -> str:
        return f"/calico/v1/netset/{_escape(self.name)}"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class IPPoolKey:
    cidr: str

    def __str__(self) -> str:
        version = 6 if ":" in self.cidr else 4
        return f"/calico/v1/ipam/v{version}/pool/{self.cidr.replace('/', '-')}"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class BlockKey:
    cidr: str

    def __str__(self) -> str:
        version = 6 if ":" in self.cidr else 4
        return f"/calico/ipam/v2/assignment/ipv{version}/block/{self.cidr.replace('/', '-')}"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class HostIPKey:
    hostname: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/bird_ip"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class HostIPv6Key:
    """A node's IPv6 address (its BGP ipv6Address): Felix reads it from the Node (V6Addr), for
    IPv6 VTEPs, host routes and the hosts' sets."""

    hostname: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/bird_ip6"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class HostNetworkKey:
    """A node's IPv4 address with its prefix length (its BGP ipv4Address): Felix's node info
    V4CIDR, which tells whether another node shares this one's subnet (CrossSubnet)."""

    hostname: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/network_v4"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class HostNetworkV6Key:
    """The IPv6 sibling of HostNetworkKey (Felix's V6CIDR): CrossSubnet for IPv6 pools."""

    hostname: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/network_v6"


@attrs.frozen(weakref_slot=False)
@_hash_kept
class HostConfigKey(KeptHash):
    hostname: str
    name: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/config/{self.name}"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class GlobalConfigKey:
    name: str

    def __str__(self) -> str:
        return f"/calico/v1/config/{self.name}"


@attrs.frozen(weakref_slot=False)
@_hash_kept
class ReadyFlagKey(KeptHash):
    def __str__(self) -> str:
        return "/calico/v1/Ready"


@attrs.frozen(weakref_slot=False)
@_hash_of_its_string
class WireguardKey:
    hostname: str

    def __str__(self) -> str:
        return f"/calico/v1/host/{self.hostname}/wireguard"


@attrs.frozen(weakref_slot=False)
@_hash_kept
class ResourceKey(KeptHash):
    """A v3 resource passed through unconverted (Node, Service, EndpointSlice, ...)."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        path = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind}({path})"


# -------------------------------------------------------------------------------------- values


def _origin() -> Any:
    """The v3 resource a value came from: not part of its identity, not printed."""
    return attrs.field(default=None, eq=False, repr=False, kw_only=True)


_EMPTY_ANNOTATIONS: FrozenMap[str] = FrozenMap()

#: A rule's fields after its action, with their defaults, in the order its constructor takes
#: them (the dry-run's child hands a rule on as these values).
_RULE_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("ip_version", None),
    ("protocol", None),
    ("not_protocol", None),
    ("icmp_type", None),
    ("icmp_code", None),
    ("not_icmp_type", None),
    ("not_icmp_code", None),
    ("src_nets", ()),
    ("not_src_nets", ()),
    ("src_selector", ""),
    ("not_src_selector", ""),
    ("src_ports", ()),
    ("not_src_ports", ()),
    ("src_service", ""),
    ("src_service_namespace", ""),
    ("dst_nets", ()),
    ("not_dst_nets", ()),
    ("dst_selector", ""),
    ("not_dst_selector", ""),
    ("dst_ports", ()),
    ("not_dst_ports", ()),
    ("dst_service", ""),
    ("dst_service_namespace", ""),
    ("http", None),
    ("annotations", _EMPTY_ANNOTATIONS),
    ("original_src_selector", ""),
    ("original_src_namespace_selector", ""),
    ("original_dst_selector", ""),
    ("original_dst_namespace_selector", ""),
)
#: Every field of a rule, in its constructor's order.
RULE_FIELDS: tuple[str, ...] = ("action", *(name for name, _ in _RULE_DEFAULTS))
_DEFAULTS = tuple(default for _, default in _RULE_DEFAULTS)
_rule_values = operator.attrgetter(*RULE_FIELDS)


class Rule:
    """A rule after conversion: selectors folded, action and protocol normalised.

    Ports stay mixed (numeric and named); the rule scanner splits them, as Felix does.

    Immutable, compared and hashed by its fields (its hash kept), as the model's attrs
    classes are. A rule sets few of its 30 fields (an allow from a selector sets two or
    three), so each rule is made an instance of a subclass for the fields it sets, with a
    slot for each of those alone, and reads the others' defaults from this class: 64-80
    bytes where a slot for every field took 280, for each of the 250,000 rules of a
    cluster of tenants. Read as any object's attributes, at the same speed.
    """

    __slots__ = ("_hash",)
    _hash: int | None

    action: str
    ip_version: int | None = None
    protocol: int | str | None = None
    not_protocol: int | str | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None
    not_icmp_type: int | None = None
    not_icmp_code: int | None = None
    src_nets: tuple[str, ...] = ()
    not_src_nets: tuple[str, ...] = ()
    src_selector: str = ""
    not_src_selector: str = ""
    src_ports: tuple[Port, ...] = ()
    not_src_ports: tuple[Port, ...] = ()
    src_service: str = ""
    src_service_namespace: str = ""
    dst_nets: tuple[str, ...] = ()
    not_dst_nets: tuple[str, ...] = ()
    dst_selector: str = ""
    not_dst_selector: str = ""
    dst_ports: tuple[Port, ...] = ()
    not_dst_ports: tuple[Port, ...] = ()
    dst_service: str = ""
    dst_service_namespace: str = ""
    http: object = None
    annotations: FrozenMap[str] = _EMPTY_ANNOTATIONS
    original_src_selector: str = ""
    original_src_namespace_selector: str = ""
    original_dst_selector: str = ""
    original_dst_namespace_selector: str = ""

    def __new__(
        cls,
        action: str,
        *,
        ip_version: int | None = None,
        protocol: int | str | None = None,
        not_protocol: int | str | None = None,
        icmp_type: int | None = None,
        icmp_code: int | None = None,
        not_icmp_type: int | None = None,
        not_icmp_code: int | None = None,
        src_nets: tuple[str, ...] = (),
        not_src_nets: tuple[str, ...] = (),
        src_selector: str = "",
        not_src_selector: str = "",
        src_ports: tuple[Port, ...] = (),
        not_src_ports: tuple[Port, ...] = (),
        src_service: str = "",
        src_service_namespace: str = "",
        dst_nets: tuple[str, ...] = (),
        not_dst_nets: tuple[str, ...] = (),
        dst_selector: str = "",
        not_dst_selector: str = "",
        dst_ports: tuple[Port, ...] = (),
        not_dst_ports: tuple[Port, ...] = (),
        dst_service: str = "",
        dst_service_namespace: str = "",
        http: object = None,
        annotations: FrozenMap[str] = _EMPTY_ANNOTATIONS,
        original_src_selector: str = "",
        original_src_namespace_selector: str = "",
        original_dst_selector: str = "",
        original_dst_namespace_selector: str = "",
    ) -> Rule:
        values = (
            ip_version,
            protocol,
            not_protocol,
            icmp_type,
            icmp_code,
            not_icmp_type,
            not_icmp_code,
            src_nets,
            not_src_nets,
            src_selector,
            not_src_selector,
            src_ports,
            not_src_ports,
            src_service,
            src_service_namespace,
            dst_nets,
            not_dst_nets,
            dst_selector,
            not_dst_selector,
            dst_ports,
            not_dst_ports,
            dst_service,
            dst_service_namespace,
            http,
            annotations,
            original_src_selector,
            original_src_namespace_selector,
            original_dst_selector,
            original_dst_namespace_selector,
        )
        return _made_rule(action, values)

    @staticmethod
    def of(values: tuple[Any, ...]) -> Rule:
        """The rule of every field's value, in ``RULE_FIELDS``' order."""
        return _made_rule(values[0], values[1:])

    _set: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise attrs.exceptions.FrozenInstanceError

    def __delattr__(self, name: str) -> None:
        raise attrs.exceptions.FrozenInstanceError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rule):
            return NotImplemented
        return self is other or _rule_values(self) == _rule_values(other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        kept = self._hash
        if kept is None:
            kept = hash(_rule_values(self))
            object.__setattr__(self, "_hash", kept)
        return kept

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in RULE_FIELDS)
        return f"Rule({fields})"

    def __reduce__(self) -> tuple[Callable[[tuple[Any, ...]], Rule], tuple[tuple[Any, ...]]]:
        return Rule.of, (_rule_values(self),)


def _made_rule(action: str, values: tuple[Any, ...]) -> Rule:
    """A rule of its action and the values of the fields after it."""
    # A default is nearly always the very object (None, "", ()): compared only if not.
    given = tuple([v is not d and v != d for v, d in zip(values, _DEFAULTS, strict=True)])
    shape = _RULE_SHAPES.get(given)
    if shape is None:
        shape = _rule_shape(given)
    rule = object.__new__(shape)
    setter = object.__setattr__
    setter(rule, "_hash", None)
    setter(rule, "action", action)
    for name, value in zip(shape._set, compress(values, given), strict=True):
        setter(rule, name, value)
    return rule


#: The subclass of Rule for each set of fields given (by which of ``_RULE_DEFAULTS`` are).
_RULE_SHAPES: dict[tuple[bool, ...], type[Rule]] = {}


def _rule_shape(given: tuple[bool, ...]) -> type[Rule]:
    names = tuple(compress((name for name, _ in _RULE_DEFAULTS), given))
    namespace = {"__slots__": ("action", *names), "_set": names, "__qualname__": "Rule"}
    shape = _RULE_SHAPES[given] = type("Rule", (Rule,), namespace)
    return shape


@attrs.frozen(weakref_slot=False)
@_hash_kept
class Policy(KeptHash):
    namespace: str
    tier: str
    order: float | None
    inbound_rules: tuple[Rule, ...]
    outbound_rules: tuple[Rule, ...]
    selector: str
    types: tuple[str, ...] = ()
    do_not_track: bool = False
    pre_dnat: bool = False
    apply_on_forward: bool = False
    performance_hints: tuple[str, ...] = ()
    staged_action: str = ""
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class Tier:
    order: float | None
    default_action: str
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class ProfileRules:
    inbound_rules: tuple[Rule, ...]
    outbound_rules: tuple[Rule, ...]
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class ProfileLabels:
    labels: FrozenMap[str]
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class EndpointPort:
    name: str
    protocol: int | str
    port: int


@attrs.frozen(weakref_slot=False)
class IPNAT:
    int_ip: str
    ext_ip: str


@attrs.frozen(weakref_slot=False)
class WorkloadEndpoint:
    state: str
    name: str
    mac: str
    profile_ids: tuple[str, ...]
    ipv4_nets: tuple[str, ...]
    ipv6_nets: tuple[str, ...]
    labels: FrozenMap[str]
    ipv4_nat: tuple[IPNAT, ...] = ()
    ipv6_nat: tuple[IPNAT, ...] = ()
    ipv4_gateway: str = ""
    ipv6_gateway: str = ""
    ports: tuple[EndpointPort, ...] = ()
    allow_spoofed_source_prefixes: tuple[str, ...] = ()
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class HostEndpoint:
    name: str
    expected_ipv4_addrs: tuple[str, ...]
    expected_ipv6_addrs: tuple[str, ...]
    labels: FrozenMap[str]
    profile_ids: tuple[str, ...]
    ports: tuple[EndpointPort, ...] = ()
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class NetworkSet:
    nets: tuple[str, ...]
    labels: FrozenMap[str]
    profile_ids: tuple[str, ...] = ()
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class IPPool:
    cidr: str
    ipip_mode: str
    vxlan_mode: str
    masquerade: bool
    disabled: bool
    disable_bgp_export: bool = False
    allowed_uses: tuple[str, ...] = ("Workload", "Tunnel")
    assignment_mode: str = "Automatic"
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class AllocationBlock:
    cidr: str
    affinity: str
    allocations: tuple[int | None, ...] = ()
    attributes: tuple[Mapping[str, object], ...] = ()
    deleted: bool = False
    origin: Resource | None = _origin()

    @property
    def host(self) -> str:
        kind, _, host = self.affinity.partition(":")
        return host if kind == "host" else ""


@attrs.frozen(weakref_slot=False)
class Wireguard:
    public_key: str = ""
    interface_ipv4_addr: str = ""
    public_key_v6: str = ""
    interface_ipv6_addr: str = ""
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class ConfigValue:
    """A Felix parameter as text, as Felix's config keys carry it (durations in seconds)."""

    value: str
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class ReadyFlag:
    ready: bool
    origin: Resource | None = _origin()


@attrs.frozen(weakref_slot=False)
class Passthrough:
    """A v3 resource the graph consumes as is; equal when the resources are equal."""

    resource: Resource

    @property
    def origin(self) -> Resource:
        return self.resource


ModelKey = (
    WorkloadEndpointKey
    | HostEndpointKey
    | PolicyKey
    | TierKey
    | ProfileRulesKey
    | ProfileLabelsKey
    | NetworkSetKey
    | IPPoolKey
    | BlockKey
    | HostIPKey
    | HostIPv6Key
    | HostNetworkKey
    | HostNetworkV6Key
    | HostConfigKey
    | GlobalConfigKey
    | ReadyFlagKey
    | WireguardKey
    | ResourceKey
)
