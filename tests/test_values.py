"""The model's immutable values: a map, a dict that refuses change, hashable and equal by
content; a rule, a value of every field though it keeps only those it sets."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from pyfelix import model
from pyfelix.values import FrozenMap, Port


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.__setitem__("app", "db"),
        lambda m: m.__delitem__("app"),
        lambda m: m.update({"app": "db"}),
        lambda m: m.setdefault("tier", "x"),
        lambda m: m.pop("app"),
        lambda m: m.popitem(),
        lambda m: m.clear(),
    ],
)
def test_a_map_refuses_every_change(change: Callable[[FrozenMap[str]], Any]) -> None:
    labels = FrozenMap({"app": "web"})
    with pytest.raises(TypeError):
        change(labels)
    with pytest.raises(TypeError):
        labels |= {"app": "db"}
    assert labels == {"app": "web"}


def test_a_map_is_a_dict_equal_and_hashed_by_its_content() -> None:
    """Equal maps hash alike and find each other as keys; a map equals the dict it was made
    of, merges and reads as a dict does, and survives a copy and a pickle as itself."""
    first, second = FrozenMap({"a": "1", "b": "2"}), FrozenMap({"b": "2", "a": "1"})
    assert first == second
    assert hash(first) == hash(second)
    assert {first: "kept"}[second] == "kept"
    assert first == {"a": "1", "b": "2"}
    assert first != FrozenMap({"a": "1"})
    assert isinstance(first, dict)
    assert {**first, "c": "3"} == {"a": "1", "b": "2", "c": "3"}
    assert first.get("a") == "1"
    assert first.get("z", "none") == "none"
    for again in (copy.copy(first), copy.deepcopy(first), pickle.loads(pickle.dumps(first))):
        assert type(again) is FrozenMap
        assert again == first
        assert hash(again) == hash(first)
    assert repr(first) == "FrozenMap({'a': '1', 'b': '2'})"


def test_empty_maps_are_one_map_and_a_dict_given_is_copied() -> None:
    assert FrozenMap() is FrozenMap({}) is FrozenMap(None)
    made = {"app": "web"}
    labels = FrozenMap(made)
    made["app"] = "db"
    assert labels == {"app": "web"}
    assert FrozenMap.shared({"x": "1"}) is FrozenMap.shared({"x": "1"})


_RULE_VALUES: list[dict[str, Any]] = [
    {"action": "allow"},
    {"action": "allow", "src_selector": "app == 'a'", "original_src_selector": "app == 'a'"},
    {"action": "deny", "protocol": "tcp", "dst_ports": (Port(80, 80, ""),), "icmp_type": 0},
    {"action": "allow", "annotations": FrozenMap({"k": "v"}), "http": "x", "not_icmp_code": 3},
]


@pytest.mark.parametrize("fields", _RULE_VALUES)
def test_a_rule_is_a_value_of_every_field(fields: dict[str, Any]) -> None:
    """A rule keeps slots only for the fields it sets, but reads, compares, hashes, prints,
    copies and pickles as a value of all its fields; it refuses change."""
    rule = model.Rule(**fields)
    values = {name: getattr(rule, name) for name in model.RULE_FIELDS}
    assert {k: v for k, v in values.items() if k in fields} == fields
    assert values["src_nets"] == ()
    assert values["dst_selector"] == ""
    again = model.Rule.of(tuple(values.values()))
    assert again == rule
    assert hash(again) == hash(rule)
    for other in _RULE_VALUES:
        if other != fields:
            assert model.Rule(**other) != rule
    assert pickle.loads(pickle.dumps(rule)) == rule
    assert copy.deepcopy(rule) == rule
    assert repr(rule).startswith(f"Rule(action={fields['action']!r}, ip_version=")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        rule.action = "deny"
    # A field given its default is the same rule as one left out.
    assert model.Rule(**fields, not_src_nets=()) == rule
