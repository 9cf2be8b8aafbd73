"""Immutable values shared by the resource model, Felix's model and the messages: a hashable
mapping and a port. A leaf module, so the messages the dataplane reads depend on nothing of the
resource layer.
"""

from __future__ import annotations

import re
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, TypeVar, overload

import attrs

T = TypeVar("T")
D = TypeVar("D")

_RANGE = re.compile(r"^(\d+):(\d+)$")
_NUMBER = re.compile(r"^\d+$")


class FrozenMap(Mapping[str, T]):
    """An immutable, hashable mapping so resources stay usable as dict keys."""

    __slots__ = ("_data", "_hash")
    _EMPTY: FrozenMap[Any] | None = None

    def __new__(cls, data: Mapping[str, T] | None = None) -> FrozenMap[T]:
        # Most resources' annotations (and many labels) are empty: they share one map.
        if not data and cls is FrozenMap:
            empty = FrozenMap._EMPTY
            if empty is None:
                empty = FrozenMap._EMPTY = object.__new__(cls)
                empty._data, empty._hash = {}, None
            return empty
        return object.__new__(cls)

    def __init__(self, data: Mapping[str, T] | None = None) -> None:
        if not data:
            return  # the shared empty map, set up once by __new__
        self._data: dict[str, T] = dict(data)
        self._hash: int | None = None

    @classmethod
    def adopt(cls, data: dict[str, T]) -> FrozenMap[T]:
        """A map over ``data`` itself, not a copy: for a dict just built that nothing else
        holds (the converter's labels)."""
        if not data:
            return cls()
        result = object.__new__(cls)
        result._data, result._hash = data, None
        return result

    @classmethod
    def shared(cls, data: dict[str, T]) -> FrozenMap[T]:
        """``adopt(data)``, or the map made earlier for an equal dict if it is among the last
        ``SHARED_KEPT`` distinct ones: the endpoints of one workload (a ReplicaSet's pods)
        carry the same labels, and one map then serves them all (bench/RESULTS.md)."""
        made = cls.adopt(data)
        kept = _SHARED.get(made)
        if kept is not None:
            return kept
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()  # bounded: a churning cluster's old label sets are not held
        _SHARED[made] = made
        return made

    def __getitem__(self, key: str) -> T:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # The dict's own views and lookups: Mapping's generic ones run in Python, and labels are
    # read on every index and selector evaluation.
    def items(self) -> ItemsView[str, T]:
        return self._data.items()

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def values(self) -> ValuesView[T]:
        return self._data.values()

    @overload
    def get(self, key: str, /) -> T | None: ...

    @overload
    def get(self, key: str, /, default: T | D) -> T | D: ...

    def get(self, key: str, /, default: Any = None) -> Any:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def plain_dict(mapping: Mapping[str, T]) -> Mapping[str, T]:
    """The dict a FrozenMap holds (to be read, never changed), else ``mapping`` itself: what
    C reads at C's speed (``{**a, **b}`` of a FrozenMap calls its ``keys`` and
    ``__getitem__`` in Python, and a selector's every ``get`` too)."""
    return mapping._data if type(mapping) is FrozenMap else mapping


#: How many distinct maps ``FrozenMap.shared`` remembers (a few MB of table at most).
SHARED_KEPT = 1 << 16
_SHARED: dict[FrozenMap[Any], FrozenMap[Any]] = {}
_SHARED_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}


def shared_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names``, or an equal tuple given earlier among the last ``SHARED_KEPT`` distinct
    ones: the endpoints of a namespace name the same profiles, and a tuple of them for each
    of 250,000 was 13 MB."""
    kept = _SHARED_NAMES.setdefault(names, names)
    if kept is names and len(_SHARED_NAMES) > SHARED_KEPT:
        _SHARED_NAMES.clear()  # bounded, as FrozenMap.shared
    return kept


@attrs.frozen
class Port:
    """A port, a ``"min:max"`` range, or a named port (resolved per endpoint by Felix)."""

    min_port: int = 0
    max_port: int = 0
    name: str = ""

    @classmethod
    def parse(cls, value: int | str) -> Port:
        """Parse Calico's numorstring.Port; raises ValueError for anything else."""
        if isinstance(value, bool):
            raise ValueError(f"invalid port {value!r}")  # noqa: TRY004 (a value problem for users)
        if isinstance(value, int):
            return cls(value, value)
        value = value.strip()
        if _NUMBER.match(value):
            return cls(int(value), int(value))
        match = _RANGE.match(value)
        if match:
            return cls(int(match.group(1)), int(match.group(2)))
        if not value or ":" in value:
            raise ValueError(f"invalid port range {value!r}: expected N, N:M or a port name")
        return cls(name=value)

    @property
    def is_named(self) -> bool:
        return bool(self.name)

    def __str__(self) -> str:
        if self.name:
            return self.name
        if self.min_port == self.max_port:
            return str(self.min_port)
        return f"{self.min_port}:{self.max_port}"
