"""The model's immutable values: a map, a dict that refuses change, hashable and equal by
content; a rule, a value of every field though it keeps only those it sets."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from pyfelix import model, values
from pyfelix.values import FrozenMap, Port
from tests.conftest import REPO


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


def test_empty_maps_are_one_map_and_a_dict_given_is_copied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert FrozenMap() is FrozenMap({}) is FrozenMap(None)
    made = {"app": "web"}
    labels = FrozenMap(made)
    made["app"] = "db"
    assert labels == {"app": "web"}
    monkeypatch.setattr(values, "_SHARING", values._Sharing())  # as a process starts
    assert FrozenMap.shared({"x": "1"}) is FrozenMap.shared({"x": "1"})


def test_sharing_pauses_where_equal_maps_are_rare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Maps that almost never repeat (a dump's pods, each with labels of its own) are not
    looked for after several windows of them, for a while; then they are again. A cluster's
    first maps, all new, do not pause it while a later window finds its equals."""
    monkeypatch.setattr(values, "_SHARING", values._Sharing())
    monkeypatch.setattr(values, "SHARED_WINDOW", 4)
    monkeypatch.setattr(values, "SHARED_RARE", 2)
    monkeypatch.setattr(values, "SHARED_POOR", 2)
    monkeypatch.setattr(values, "SHARED_PAUSE", 3)

    def share(n: int) -> FrozenMap[str]:
        return FrozenMap.shared({"pod": str(n)})

    for n in range(4):  # one poor window: still looking
        share(n)
    assert share(0) is share(0)
    for n in range(10, 12):  # the window's end: 2 found in 4, not poor
        share(n)
    for n in range(20, 28):  # two poor windows in a row: a pause
        share(n)
    paused = [share(1) for _ in range(3)]
    assert paused[0] == paused[1] == paused[2] == {"pod": "1"}
    assert paused[0] is not paused[1] is not paused[2]
    assert share(1) is share(1)  # looking again


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


#: Each kept-hash class's value, hashed in a process of its own, with the compiled module or
#: without it (``pure``): what each hash is, and whether it is kept in C.
_KEPT_HASHES = """
import copy, json, pickle, sys
if sys.argv[1] == "pure":
    sys.modules["pyfelix._native"] = None  # as where it is not built
import attrs
from pyfelix import model
values = [
    model.WorkloadEndpointKey("node", "k8s", "ns/pod", "eth0"),
    model.HostEndpointKey("node", "eth0"),
    model.PolicyKey("p", "ns", "NetworkPolicy", "default"),
    model.HostConfigKey("node", "LogSeverityScreen"),
    model.ReadyFlagKey(),
    model.ResourceKey("Node", "", "node"),
    model.Policy("ns", "default", 1.0, (), (), "all()", origin="where it came from"),
]
out = []
for value in values:
    cls = type(value)
    eq = [getattr(value, f.name) for f in attrs.fields(cls) if f.eq]
    fields = eq[0] if len(eq) == 1 else tuple(eq)
    again = pickle.loads(pickle.dumps(value))
    other = attrs.evolve(value, **{f.name: "x" for f in attrs.fields(cls)[:1]}) if eq else None
    out.append({
        "class": cls.__name__,
        "hash is the fields'": hash(value) == hash(fields) == hash(value),
        "equal copies hash alike": hash(copy.deepcopy(value)) == hash(again) == hash(value)
        and again == value,
        "another differs": other is None
        or (other != value and hash(other) == hash(attrs.evolve(other))),
        "in C": type(cls.__dict__["__hash__"]).__name__ == "wrapper_descriptor",
    })
print(json.dumps(out))
"""


@pytest.mark.parametrize("build", ["compiled", "pure"])
def test_a_kept_hash_is_the_hash_of_the_fields_equality_compares(build: str) -> None:
    """The keys (and policies) keep their hash: the hash of the fields their equality
    compares (a policy's origin is not one), the same for equal values however made; kept
    and read in C by the compiled base, or by Python where that is not built."""
    run = subprocess.run(
        [sys.executable, "-c", _KEPT_HASHES, build],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    found = json.loads(run.stdout)
    assert [v["class"] for v in found] == [
        "WorkloadEndpointKey",
        "HostEndpointKey",
        "PolicyKey",
        "HostConfigKey",
        "ReadyFlagKey",
        "ResourceKey",
        "Policy",
    ]
    for value in found:
        assert value["hash is the fields'"], value
        assert value["equal copies hash alike"], value
        assert value["another differs"], value
        assert value["in C"] == (build == "compiled"), value
