"""The manifest YAML loader gives what PyYAML's safe loader gives (timestamps aside, which stay
strings as in Go), including for the features its fast path hands to PyYAML's constructor."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.resources import loader
from pyfelix.resources.loader import LoadResult, load_paths, load_text, parse_yaml

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(["yes", "off", "0x1f", "0o17", "1_000", "~", ".inf", "1e3", "2024-05-01"])
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
    ),
    max_leaves=25,
)


def only(text: str) -> Any:
    ((data, _, _),) = parse_yaml(text)
    return data


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from([False, True, None]))
def test_any_dumped_document_loads_back_unchanged(data: Any, flow: bool | None) -> None:
    assert only(yaml.safe_dump(data, default_flow_style=flow)) == data


SAFE_LOADER_CASES = [
    "a: &x {b: 1}\nc: *x\n",
    "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "list: [&n 5, *n, *n]\n",
    "blob: !!binary aGVsbG8=\n",
    "ints: [0x1F, 0o17, 1_000, -12, 190:20:30]\n",
    "floats: [.inf, -.INF, 1.5e3, 6.8523015e+5]\n",
    "bools: [yes, No, on, OFF, true]\n",
    "nulls: [~, null, '']\n",
    "set: !!set {a, b}\n",
    "pairs: !!omap [a: 1, b: 2]\n",
    "quoted: ['1', \"true\", '~']\n",
    "explicit: !!str 123\n",
]


@pytest.mark.parametrize("text", SAFE_LOADER_CASES)
def test_matches_the_safe_loader(text: str) -> None:
    assert only(text) == yaml.safe_load(text)


def test_timestamps_stay_strings() -> None:
    assert only("when: 2024-05-01T10:00:00Z\n") == {"when": "2024-05-01T10:00:00Z"}


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", "duplicate key 'c'", 4),
        ("base: &b {x: 1}\nd:\n  <<: *b\n  z: 1\n  z: 2\n", "duplicate key 'z'", 5),
        ("? {a: 1}\n: x\n", "found unhashable key", 1),
        ("? [a, b]\n: x\n", "found unhashable key", 1),
        ("a: !custom 1\n", "could not determine a constructor", 1),
    ],
)
def test_errors_name_the_line(text: str, message: str, line: int) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        parse_yaml(text)
    assert message in str(caught.value)
    mark = getattr(caught.value, "problem_mark", None)
    assert mark is not None
    assert mark.line + 1 == line


def test_recursive_anchor_is_an_error_not_a_hang() -> None:
    with pytest.raises(yaml.YAMLError, match="recursive"):
        parse_yaml("a: &x [1, *x]\n")


BOMB = """
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.parametrize(
    ("text", "source", "message"),
    [
        ("[" * 1000 + "]" * 1000, "deep.json", "nested more than 64 levels deep"),
        ("a: " + "[" * 600 + "]" * 600, "deep.yaml", "nested more than 64 levels deep"),
        ("a: " + "{b: " * 100 + "1" + "}" * 100, "deep-map.yaml", "nested more than 64 levels"),
        (BOMB, "bomb.yaml", "aliases expand the document too far"),
        (
            "root:\n  <<: {k: 1}\n" + BOMB.replace("\n", "\n  "),
            "merge.yaml",
            "aliases expand the document too far",
        ),
        ("&a [*a]", "cycle.yaml", "cannot parse YAML"),
    ],
    ids=["json-depth", "yaml-depth", "yaml-map-depth", "alias-bomb", "bomb-via-merge", "cycle"],
)
def test_hostile_documents_are_refused_quickly(text: str, source: str, message: str) -> None:
    """Deep nesting and alias bombs are clear errors naming the file (bounded time), and the
    file is unparsable (a watcher keeps its last resources)."""
    started = time.monotonic()
    result = load_text(text, source)
    assert time.monotonic() - started < 2
    assert [p.source for p in result.problems] == [source]
    assert message in result.problems[0].message, result.problems
    assert result.unparsable == {source}


def test_hostile_documents_are_refused_deep_in_a_stack() -> None:
    """The agent parses inside Trio, many frames deep: the same input still ends in an error."""

    def nest(levels: int) -> LoadResult:
        if levels:
            return nest(levels - 1)
        return load_text("[" * 900 + "]" * 900, "deep.json")

    assert "nested" in nest(800).problems[0].message


def test_free_form_values_are_bounded() -> None:
    """A value kept verbatim (a namespace's status conditions) may not nest without bound."""
    doc = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "ns"},
        "status": {"conditions": json.loads("[" * 40 + "]" * 40)},
    }
    result = load_text(json.dumps(doc), "pod.json")
    assert any("nested more than 32 levels deep" in p.message for p in result.problems)


def test_oversized_file_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_FILE_BYTES", 1 << 20)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    result = load_paths([tmp_path])
    assert result.problems[0].source == str(big)
    assert "larger than 1 MiB" in result.problems[0].message


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_an_order_must_be_a_finite_number(value: str) -> None:
    """YAML can write NaN and infinity; Calico's JSON cannot, and sorting by them is
    meaningless."""
    text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t}\n"
    text += f"spec: {{order: {value}}}\n"
    result = load_text(text, "tier.yaml")
    assert [(p.field, p.line) for p in result.problems] == [("spec.order", 1)]
    assert "expected a finite number" in result.problems[0].message


def test_a_control_character_is_located_by_line() -> None:
    text = "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: \x07t}\n"
    (problem,) = load_text(text, "tier.yaml").problems
    assert problem.line == 3
    assert "'\\x07'" in problem.message


KIND_PER_MODULE = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: p}
spec: {selector: all()}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: h}
spec: {node: n, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.0.0.0/16}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicyList
items:
- metadata: {name: k, namespace: default}
  spec: {podSelector: {}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns}
"""


def test_a_process_that_imported_only_the_loader_knows_every_kind() -> None:
    """`pyfelix run` forks its first read's child having imported only the loader (the
    package imports each kind's module on first use): loading must still know every kind,
    lists of them included, whatever was imported before."""
    script = (
        "import sys\n"
        "from pyfelix.resources.loader import load_text\n"
        "result = load_text(sys.stdin.read(), 'kinds.yaml')\n"
        "print(result.problems)\n"
        "print(sorted(item.resource.KIND for item in result.resources))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=KIND_PER_MODULE,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "()",
        "['GlobalNetworkPolicy', 'HostEndpoint', 'IPPool', 'KubernetesNetworkPolicy', 'Namespace']",
    ]
