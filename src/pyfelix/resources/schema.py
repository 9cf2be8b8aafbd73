"""Declarative JSON <-> attrs mapping for manifest types.

A spec class is an ``@attrs.frozen`` class whose fields carry a JSON name and a :class:`Codec`
(see :func:`field`). :func:`decode` reads a JSON-like mapping into such a class, collecting every
structural problem (unknown field, wrong type) with its path instead of stopping at the first;
:func:`encode` writes it back, omitting empty values the way calicoctl's ``omitempty`` does.

Decoding first takes a fast path that builds the same objects without tracking paths, and
gives up (``Slow``) at the first thing that is not plainly right; the reporting decoder then
runs again on that part, so problems are found and worded in one place only.

Structure only: whether a value is *allowed* (a CIDR parses, a port is in range) is the
validation stage's business, so that a structurally sound but invalid resource can still be
named and reported with all its problems.
"""

from __future__ import annotations

import marshal
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, cast

import attrs

from pyfelix.errors import FieldProblem, PyfelixError, excerpt
from pyfelix.values import FrozenMap

T = TypeVar("T")
JSON = Any


class Context:
    """Where the decoder is (a field path, built only when a problem needs it) and what it has
    found wrong so far. Decoding touches every field, so descending must be cheap."""

    __slots__ = ("_key", "_parent", "problems")

    def __init__(
        self,
        path: str | int = "",
        problems: list[FieldProblem] | None = None,
        *,
        parent: Context | None = None,
    ) -> None:
        self._key: str | int = path
        self._parent = parent
        self.problems: list[FieldProblem] = [] if problems is None else problems

    @property
    def path(self) -> str:
        if self._parent is None:
            return str(self._key)
        base = self._parent.path
        if isinstance(self._key, int):
            return f"{base}[{self._key}]"
        return f"{base}.{self._key}" if base else str(self._key)

    def at(self, key: str | int) -> Self:
        return type(self)(key, self.problems, parent=self)

    def error(self, message: str) -> None:
        """Record a problem, once (two checks may find the same thing wrong with a field)."""
        problem = FieldProblem(self.path, message)
        if problem not in self.problems:
            self.problems.append(problem)


class Missing:
    """Marker for "decode failed"; callers substitute the field default."""


MISSING = Missing()


class Slow(Exception):
    """The fast path met something not plainly right: the reporting decoder takes over."""


class Codec(Protocol[T]):
    def decode(self, value: JSON, ctx: Context) -> T | Missing: ...

    def encode(self, value: T) -> JSON: ...


def fast_of(codec: Codec[T]) -> Callable[[JSON], T]:
    """The codec's fast decoder (``fast``), or its reporting one run without a path."""
    fast = getattr(codec, "fast", None)
    if fast is not None:
        return cast(Callable[[JSON], T], fast)

    def checked(value: JSON) -> T:
        ctx = Context()
        decoded = codec.decode(value, ctx)
        if ctx.problems or isinstance(decoded, Missing):
            raise Slow
        return decoded

    return checked


def type_name(value: JSON) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list"}
    if isinstance(value, Mapping):
        return "mapping"
    return names.get(type(value), type(value).__name__)


@attrs.frozen
class Scalar(Generic[T]):
    """str, int, bool or float; an int is accepted where a float is wanted, never the reverse."""

    kind: type[T]
    name: str
    #: A string that repeats across resources (a namespace, a node, a profile): one copy kept.
    shared: bool = False

    def decode(self, value: JSON, ctx: Context) -> T | Missing:
        if self.shared and type(value) is str:
            return cast(T, sys.intern(value))
        ok = isinstance(value, self.kind) and not (self.kind is int and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return cast(T, float(value))
        if not ok:
            ctx.error(f"expected {self.name}, got {type_name(value)} {excerpt(value)}")
            return MISSING
        if isinstance(value, float) and not math.isfinite(value):
            # YAML can write .nan and .inf; Calico's JSON (and Go's float64 order) cannot.
            ctx.error(f"expected a finite number, got {excerpt(value)}")
            return MISSING
        return cast(T, value)

    def fast(self, value: JSON) -> T:
        kind = self.kind
        if self.shared and type(value) is str:
            return cast(T, sys.intern(value))
        if type(value) is kind:
            if kind is float and not math.isfinite(cast(float, value)):
                raise Slow
            return value
        if kind is float and type(value) is int:
            return cast(T, float(value))
        raise Slow

    def encode(self, value: T) -> JSON:
        # Go prints a float64 that holds a whole number without a fraction (order: 100).
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value


STR: Scalar[str] = Scalar(str, "a string")
#: Strings that repeat across a cluster's resources (namespaces, nodes, profiles) are interned
#: as they are decoded, so one copy is kept.
SHARED_STR: Scalar[str] = Scalar(str, "a string", shared=True)
INT: Scalar[int] = Scalar(int, "an integer")
BOOL: Scalar[bool] = Scalar(bool, "a boolean")
FLOAT: Scalar[float] = Scalar(float, "a number")


@attrs.frozen
class IntOrStr:
    """Calico's numorstring fields (ports, protocols): JSON number or string, kept as given."""

    def decode(self, value: JSON, ctx: Context) -> int | str | Missing:
        if isinstance(value, bool) or not isinstance(value, int | str):
            ctx.error(f"expected a number or a string, got {type_name(value)} {excerpt(value)}")
            return MISSING
        return value

    def fast(self, value: JSON) -> int | str:
        if type(value) is int or type(value) is str:
            return value
        raise Slow

    def encode(self, value: int | str) -> JSON:
        return value


INT_OR_STR = IntOrStr()


@attrs.frozen
class RawJSON:
    """Kept verbatim (HTTP matches, Kubernetes status blocks): carried, not interpreted."""

    def decode(self, value: JSON, ctx: Context) -> JSON:
        try:
            return freeze(value)
        except TooDeep as exc:
            ctx.error(str(exc))
            return MISSING

    def fast(self, value: JSON) -> JSON:
        try:
            return freeze(value)
        except TooDeep:
            raise Slow from None

    def encode(self, value: JSON) -> JSON:
        return thaw(value)


RAW = RawJSON()


@attrs.frozen
class ListOf(Generic[T]):
    item: Codec[T]
    _item_fast: Callable[[JSON], T] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_item_fast", fast_of(self.item))

    def fast(self, value: JSON) -> tuple[T, ...]:
        if type(value) is not list:
            raise Slow
        return tuple(map(self._item_fast, value))

    def decode(self, value: JSON, ctx: Context) -> tuple[T, ...] | Missing:
        if not isinstance(value, list):
            ctx.error(f"expected a list, got {type_name(value)} {excerpt(value)}")
            return MISSING
        out: list[T] = []
        for index, item in enumerate(value):
            decoded = self.item.decode(item, ctx.at(index))
            if not isinstance(decoded, Missing):
                out.append(decoded)
        return tuple(out)

    def encode(self, value: tuple[T, ...]) -> JSON:
        return [self.item.encode(v) for v in value]


@attrs.frozen
class MapOf(Generic[T]):
    """A string-keyed map (labels, annotations), decoded into a hashable :class:`FrozenMap`."""

    item: Codec[T]
    _item_fast: Callable[[JSON], T] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_item_fast", fast_of(self.item))

    def fast(self, value: JSON) -> FrozenMap[T]:
        if type(value) is not dict:
            raise Slow
        item = self._item_fast
        if isinstance(self.item, Scalar) and self.item.kind is str:
            # Labels and annotations: strings to strings.
            for key, text in value.items():
                if type(key) is not str or type(text) is not str:
                    raise Slow
            return FrozenMap(value)
        out: dict[str, T] = {}
        for key, text in value.items():
            if type(key) is not str:
                raise Slow
            out[key] = item(text)
        return FrozenMap(out)

    def decode(self, value: JSON, ctx: Context) -> FrozenMap[T] | Missing:
        if not isinstance(value, Mapping):
            ctx.error(f"expected a mapping, got {type_name(value)} {excerpt(value)}")
            return MISSING
        out: dict[str, T] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                ctx.error(f"expected string keys, got {excerpt(key)}")
                continue
            decoded = self.item.decode(item, ctx.at(key))
            if not isinstance(decoded, Missing):
                out[key] = decoded
        return FrozenMap(out)

    def encode(self, value: FrozenMap[T]) -> JSON:
        return {k: self.item.encode(v) for k, v in sorted(value.items())}


#: Free-form values (kept verbatim) nested deeper than this are refused: nothing Calico defines
#: comes close, and every later stage that walks them recursively stays far from Python's limit.
MAX_FREE_FORM_DEPTH = 32


class TooDeep(PyfelixError, ValueError):
    def __init__(self) -> None:
        super().__init__(f"nested more than {MAX_FREE_FORM_DEPTH} levels deep")


def freeze(value: JSON, depth: int = 0) -> JSON:
    """Make arbitrary JSON hashable (lists -> tuples, objects -> FrozenMap); raises TooDeep."""
    if depth > MAX_FREE_FORM_DEPTH:
        raise TooDeep
    if isinstance(value, Mapping):
        return FrozenMap({k: freeze(v, depth + 1) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v, depth + 1) for v in value)
    return value


def thaw(value: JSON) -> JSON:
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


STR_LIST: ListOf[str] = ListOf(STR)
STR_MAP: MapOf[str] = MapOf(STR)
SHARED_STR_LIST: ListOf[str] = ListOf(SHARED_STR)

S = TypeVar("S", bound="Spec")


class Spec:
    """Base of every declarative class; ``attrs`` fields made with :func:`field`.

    ``UNREAD`` names JSON keys that are accepted and left out: fields of another project's
    kind that Calico never reads (a Pod's containers' images, volumes, status conditions),
    which kept would be most of a cluster dump's memory."""

    __attrs_attrs__: ClassVar[tuple[attrs.Attribute[Any], ...]]
    UNREAD: ClassVar[frozenset[str]] = frozenset()


#: How many distinct values a ``Nested(..., shared=True)`` keeps decoded.
SHARED_VALUES = 16384


@attrs.frozen
class Nested(Generic[S]):
    cls: type[S]
    #: Values that repeat across resources (policies' rules: a cluster's thousands of policies
    #: hold a few hundred distinct ones) are decoded once per distinct JSON and shared: the
    #: values are frozen, and the JSON is keyed by its marshal form (equal forms, equal JSON).
    shared: bool = False
    _decoded: dict[bytes, S] = attrs.field(init=False, factory=dict, eq=False, repr=False)

    def decode(self, value: JSON, ctx: Context) -> S | Missing:
        return decode(self.cls, value, ctx)

    def fast(self, value: JSON) -> S:
        if not self.shared:
            return decode_fast(self.cls, value)
        try:
            key = marshal.dumps(value)
        except ValueError:  # not plain JSON
            return decode_fast(self.cls, value)
        decoded = self._decoded.get(key)
        if decoded is None:
            decoded = decode_fast(self.cls, value)
            if len(self._decoded) < SHARED_VALUES:
                self._decoded[key] = decoded
        return decoded

    def encode(self, value: S) -> JSON:
        return encode(value)


def field(
    json: str,
    codec: Codec[Any],
    *,
    default: Any = None,
    factory: Callable[[], Any] | None = None,
    keep_empty: bool = False,
) -> Any:
    """An attrs field bound to JSON key ``json``; empty values are omitted on output unless
    ``keep_empty`` (for fields where ``false``/``0`` means something different from unset)."""
    metadata = {"json": json, "codec": codec, "keep_empty": keep_empty}
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


_JSON_FIELDS: dict[type[Spec], dict[str, attrs.Attribute[Any]]] = {}


def json_fields(cls: type[Spec]) -> dict[str, attrs.Attribute[Any]]:
    """JSON name -> attrs field, computed once per class (decoding is on the hot path)."""
    known = _JSON_FIELDS.get(cls)
    if known is None:
        known = {a.metadata["json"]: a for a in attrs.fields(cls) if "json" in a.metadata}
        _JSON_FIELDS[cls] = known
    return known


_FAST_FIELDS: dict[type[Spec], dict[str, tuple[str, Callable[[JSON], Any]]]] = {}
#: The fast table's entry for an ``UNREAD`` key.
_SKIP: tuple[str, Callable[[JSON], Any]] = ("", lambda value: value)


def decode_fast(cls: type[S], value: JSON) -> S:
    """``cls`` from a mapping with nothing wrong in it; raises Slow at anything else."""
    if value is None:
        value = {}
    elif type(value) is not dict:
        raise Slow
    table = _FAST_FIELDS.get(cls)
    if table is None:
        if getattr(cls, "decode_json", None) is not None:
            return _checked_custom(cls, value)
        table = dict.fromkeys(cls.UNREAD, _SKIP)
        table.update(
            (key, (attribute.name, fast_of(attribute.metadata["codec"])))
            for key, attribute in json_fields(cls).items()
        )
        _FAST_FIELDS[cls] = table
    kwargs: dict[str, Any] = {}
    for key, item in value.items():
        entry = table.get(key)
        if entry is None:
            raise Slow
        if item is not None and entry is not _SKIP:
            kwargs[entry[0]] = entry[1](item)
    return cls(**kwargs)


def _checked_custom(cls: type[S], value: JSON) -> S:
    ctx = Context()
    decoded = decode(cls, value, ctx)
    if ctx.problems or isinstance(decoded, Missing):
        raise Slow
    return decoded


def decode(cls: type[S], value: JSON, ctx: Context) -> S | Missing:
    """Build ``cls`` from a mapping, recording unknown keys and wrong types in ``ctx``."""
    if getattr(cls, "decode_json", None) is None:
        try:
            return decode_fast(cls, value)
        except Slow:
            pass
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        ctx.error(f"expected a mapping, got {type_name(value)} {excerpt(value)}")
        return MISSING
    custom = getattr(cls, "decode_json", None)
    if custom is not None:
        return cast(S | Missing, custom(value, ctx))
    known = json_fields(cls)
    kwargs: dict[str, Any] = {}
    for key, item in value.items():
        attribute = known.get(key)
        if attribute is None:
            if key not in cls.UNREAD:
                ctx.at(str(key)).error("unknown field")
            continue
        if item is None:
            continue
        decoded = attribute.metadata["codec"].decode(item, ctx.at(key))
        if not isinstance(decoded, Missing):
            kwargs[attribute.name] = decoded
    return cls(**kwargs)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, bool | int | float):
        return not value
    if isinstance(value, str | tuple | Mapping):
        return len(value) == 0
    return False


def encode(obj: Spec) -> dict[str, JSON]:
    """The JSON form of ``obj``, keys in declaration order, empty values left out."""
    custom = getattr(obj, "encode_json", None)
    if custom is not None:
        return cast(dict[str, JSON], custom())
    out: dict[str, JSON] = {}
    for attribute in attrs.fields(type(obj)):
        if "json" not in attribute.metadata:
            continue
        value = getattr(obj, attribute.name)
        # Fields defaulting to None are Go pointers: only "unset" is omitted, 0 and false print.
        pointer = attribute.default is None
        if value is None or (
            not pointer and _is_empty(value) and not attribute.metadata["keep_empty"]
        ):
            continue
        encoded = attribute.metadata["codec"].encode(value)
        if isinstance(encoded, dict) and not encoded and not attribute.metadata["keep_empty"]:
            continue
        out[attribute.metadata["json"]] = encoded
    return out
