"""Immutable values shared by the resource model, Felix's model and the messages: a hashable
mapping and a port. A leaf module, so the messages the dataplane reads depend on nothing of the
resource layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, NoReturn, TypeVar

import attrs

T = TypeVar("T")
D = TypeVar("D")

_RANGE = re.compile(r"^(\d+):(\d+)$")
_NUMBER = re.compile(r"^\d+$")


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError("a FrozenMap cannot be changed")


class FrozenMap(dict[str, T]):
    """An immutable, hashable mapping so resources stay usable as dict keys.

    A dict itself, whose changing methods refuse: C reads it at a dict's speed (selectors'
    ``get``, ``{**a, **b}``), and a wrapper around a dict was 32 bytes more for each of a
    cluster's label maps (300,000 of a cluster of tenants). What changes a dict from C
    without its methods (``dict.__setitem__(m, ...)``) is not refused: nothing here does."""

    __slots__ = ("_hash",)
    _hash: int | None
    _EMPTY: ClassVar[FrozenMap[Any] | None] = None

    def __new__(cls, data: Mapping[str, T] | None = None) -> FrozenMap[T]:
        # Most resources' annotations (and many labels) are empty: they share one map.
        if not data and cls is FrozenMap:
            empty = FrozenMap._EMPTY
            if empty is None:
                empty = FrozenMap._EMPTY = dict.__new__(cls)
                empty._hash = None
            return empty
        made = dict.__new__(cls)
        if data:
            dict.update(made, data)
        made._hash = None
        return made

    def __init__(self, data: Mapping[str, T] | None = None) -> None:
        """Filled by ``__new__`` (a dict's own would fill it again)."""

    @classmethod
    def shared(cls, data: dict[str, T]) -> FrozenMap[T]:
        """A map of ``data``, or the map made earlier for an equal dict if it is among the last
        ``SHARED_KEPT`` distinct ones: the endpoints of one workload (a ReplicaSet's pods)
        carry the same labels, and one map then serves them all (bench/RESULTS.md). Where
        almost none is found (fewer than one in ``SHARED_RARE`` in each of the last
        ``SHARED_POOR`` windows of ``SHARED_WINDOW`` maps), the next ``SHARED_PAUSE`` maps
        are made without looking: a dump of pods whose every label set differs shared 1% of
        them, at the cost of hashing each (7% of its computing process). Several windows,
        as the first maps of a cluster of equal ones are all new."""
        sharing = _SHARING
        if sharing.paused:
            sharing.paused -= 1
            return cls(data)
        made = cls(data)
        kept = _SHARED.get(made)
        sharing.asked += 1
        if kept is not None:
            sharing.found += 1
        if sharing.asked >= SHARED_WINDOW:
            if sharing.found * SHARED_RARE >= sharing.asked:
                sharing.poor = 0
            else:
                sharing.poor += 1
                if sharing.poor >= SHARED_POOR:
                    sharing.paused, sharing.poor = SHARED_PAUSE, 0
            sharing.asked = sharing.found = 0
        if kept is not None:
            return kept
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()  # bounded: a churning cluster's old label sets are not held
        _SHARED[made] = made
        return made

    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = __ior__ = _immutable

    def __hash__(self) -> int:  # type: ignore[override]
        if self._hash is None:
            self._hash = hash(frozenset(self.items()))
        return self._hash

    def __reduce__(self) -> tuple[type[FrozenMap[T]], tuple[dict[str, T]]]:
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenMap({dict.__repr__(self)})"


#: How many distinct maps ``FrozenMap.shared`` remembers (a few MB of table at most).
SHARED_KEPT = 1 << 16
#: How many maps ``FrozenMap.shared`` judges its finds over, how rare they must be, in how
#: many windows in a row, for it to pause, and for how many maps.
SHARED_WINDOW = 4096
SHARED_RARE = 32
SHARED_POOR = 4
SHARED_PAUSE = 16 * SHARED_WINDOW


class _Sharing:
    """How ``FrozenMap.shared`` has fared: asked and found in the current window, the poor
    windows in a row before it, and how many maps are left to make without looking."""

    __slots__ = ("asked", "found", "paused", "poor")

    def __init__(self) -> None:
        self.asked = self.found = self.paused = self.poor = 0


_SHARING = _Sharing()
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
