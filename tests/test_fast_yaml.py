"""yaml-rs reads a manifest only where its reading is the strict loader's (YAML 1.1, duplicate
keys refused, lines kept): the two compared on generated and mutated manifests, on each of
the scalars where YAML 1.1 and 1.2 part, and on the input that crashes yaml-rs itself."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.resources import fast_yaml
from pyfelix.resources.fast_yaml import parse_plain
from pyfelix.resources.loader import load_text, parse_strict, parse_yaml
from tests.conftest import REPO

#: Words where YAML 1.1 and 1.2 (or yaml-rs) part, and words that look like them.
TRICKY = [
    *("yes", "No", "ON", "off", "y", "n", "true", "False", "=", "~", "null", "Null"),
    *("010", "09", "0o17", "0x1F", "0b11", "1_000", "_1", "1e3", "1.5e3", "1.0e+3", "-.5"),
    *("+.5", ".inf", "-.Inf", ".NaN", "1:20", "190:20:30.15", "12:34:56", "80:90", "0", "-0"),
    *("10.0.0.1/32", "fd00::1", "02:42:ac:11:00:02", "ee:ee:ee:ee:ee:ee", "cali0000001e3"),
    *("has(x) && y == 'z'", "!has(x)", "a != b", "cali*", "&x", "*x", "<<", "|", ">-"),
    *("2001-12-14", "a #b", "#c", "x: y", "- z", "", " lead", "trail ", "multi\nline", "é"),
]
scalars = (
    st.sampled_from(TRICKY)
    | st.integers(-100, 100_000)
    | st.sampled_from([0.5, 1e3, -2.25, float("inf"), True, False, None])
    | st.text(alphabet="ab0:-_.e# '\"\n|>!&*%=~", max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=20,
)
manifests = st.lists(
    st.fixed_dictionaries({"kind": st.sampled_from(["NetworkSet", "X"]), "spec": values}),
    min_size=1,
    max_size=3,
)
MUTATIONS = [*"ab0: -?,[]{}#&*!|>'\"\n%=._e\t\x85", "---", "...", "<<", "\n  ", "\n- "]


def readings(text: str) -> tuple[Any, Any]:
    """(what parse_yaml gives, what the strict loader gives): a value, or the error's type."""

    def reading(parse: Any) -> Any:
        try:
            return repr([(data, line) for data, line, _ in parse(text) if data is not None])
        except yaml.YAMLError as exc:
            return type(exc).__name__

    return reading(parse_yaml), reading(parse_strict)


@settings(max_examples=400, deadline=None)
@given(
    manifests,
    st.sampled_from([False, False, None]),
    st.booleans(),
    st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATIONS)), max_size=4),
)
def test_yaml_rs_reads_what_the_strict_loader_reads(
    documents: list[Any], flow: bool | None, start: bool, edits: list[tuple[int, str]]
) -> None:
    text = yaml.safe_dump_all(documents, default_flow_style=flow, explicit_start=start)
    for where, inserted in edits:
        at = where % (len(text) + 1)
        text = text[:at] + inserted + text[at:]
    fast, strict = readings(text)
    assert fast == strict, text


@settings(max_examples=3000, deadline=None)
@given(st.from_regex(fast_yaml._SIMPLE, fullmatch=True))
def test_lines_plain_at_a_glance_pass_every_check(line: str) -> None:
    """What the glance takes out of the checks, the checks would have passed."""
    assert fast_yaml._lines_plain("\n" + line + "\n"), line


def test_tricky_words_are_never_plain_at_a_glance_where_the_checks_object() -> None:
    words = [w for w in TRICKY if "\n" not in w] + ["a.b", "x1", "k8s", "ab-"]
    for key in words:
        for value in words:
            for indent in ("", "  ", "- ", "    - ", " " * 25):
                line = f"{indent}{key}: {value}"
                if fast_yaml._SIMPLE.fullmatch(line):
                    assert fast_yaml._lines_plain("\n" + line + "\n"), line
    assert fast_yaml._SIMPLE.fullmatch("  name: wep-4001")
    assert fast_yaml._SIMPLE.fullmatch("    - 10.0.15.161/32")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("enabled: yes\n", {"enabled": True}),
        ("enabled: Off\n", {"enabled": False}),
        ("mode: 010\n", {"mode": 8}),
        ("mode: 09\n", {"mode": "09"}),
        ("mode: 0o17\n", {"mode": "0o17"}),
        ("size: 1e3\n", {"size": "1e3"}),
        ("size: -.5\n", {"size": "-.5"}),
        ("size: _1\n", {"size": "_1"}),
        ("at: 1:20\n", {"at": 80}),
        ("at: 2001-12-14\n", {"at": "2001-12-14"}),
        ("note: |\n", {"note": ""}),
        ("---\na: 1\n--- 0o17\n", "0o17"),
    ],
)
def test_yaml_1_1_readings_are_kept(text: str, expected: Any) -> None:
    *_, (data, _, _) = parse_yaml(text)
    assert data == expected


def test_bulk_manifests_are_read_by_yaml_rs_with_their_lines() -> None:
    """What tools write (block style, plain values) goes the fast way, lines and all."""
    endpoint = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {"name": "wep-1", "namespace": "ns", "labels": {"app": "web-1"}},
        "spec": {
            "node": "node-1",
            "interfaceName": "cali0000001e3",
            "ipNetworks": ["10.0.0.1/32", "fd00::1/128"],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        },
    }
    text = "# generated\n" + yaml.safe_dump_all([endpoint, endpoint], explicit_start=True)
    fast = parse_plain(text)
    assert fast is not None
    assert fast == parse_strict(text)
    assert [line for _, line, _ in fast] == [3, 21]


def test_a_duplicate_key_is_refused_with_its_line() -> None:
    result = load_text("kind: NetworkSet\nmetadata:\n  name: a\n  name: b\n", "x.yaml")
    assert result.unparsable
    (problem,) = result.problems
    assert "duplicate key 'name'" in str(problem)
    assert problem.line == 4


def test_nesting_that_crashes_yaml_rs_is_refused(tmp_path: Path) -> None:
    """yaml-rs overflows its stack on deep block nesting (a crash, not an error): such a file
    never reaches it, and the command reports the depth."""
    manifest = tmp_path / "deep.yaml"
    manifest.write_text("kind: NetworkSet\nspec:\n" + "- " * 100_000 + "x\n")
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "validate", str(manifest)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "deep.yaml" in result.stdout
    assert "nest" in result.stdout, result.stdout


def test_many_suspects_on_long_lines_stay_within_the_texts_size() -> None:
    """A suspect is judged by its line; a long line holding thousands of them is judged once,
    not copied once per suspect (an 82 KB manifest of such lines took 3 GB and ended the
    agent at every start). The verdict is the strict loader's either way."""
    line = "note: " + " !x" * 12_000  # a tag suspect every three characters
    text = "".join(f"a{i}: b\n{line}\n" for i in range(3))
    tracemalloc.start()
    try:
        assert parse_plain(text) is None  # tags: for the strict loader
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * len(text)


_NEAR_THE_LIMIT = """
import resource, sys
from pyfelix.resources.fast_yaml import parse_plain
doc = "kind: WorkloadEndpoint\\nmetadata:\\n  name: pod{i}\\nspec:\\n  node: node1\\n"
text = "---\\n".join(doc.format(i=i) for i in range(560_000))  # 42 MB
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) << 10
limit = vm + (300 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print("parsed" if parse_plain(text) is not None else "left to the strict loader", flush=True)
"""


def test_a_native_crash_of_yaml_rs_cannot_take_the_process_down() -> None:
    """yaml-rs ends its process on a failed allocation (SIGSEGV or SIGABRT, never
    MemoryError), and reserves about eight bytes per byte of text: a 42 MB manifest with
    300 MB of address space left. A text that large is parsed in a child of its own, whose
    death leaves the text to the strict loader: this process lives on."""
    result = subprocess.run(
        [sys.executable, "-c", _NEAR_THE_LIMIT],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr[-1000:]
    assert result.stdout.strip() == "left to the strict loader"
    assert "yaml-rs ended its child with" in result.stderr
