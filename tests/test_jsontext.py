"""The dry-run's JSON text: written by orjson where that gives the standard library's text,
held to ``json.dumps(indent=2, sort_keys=True)`` byte for byte on any value without floats
(whose exponents orjson writes shorter), and to the same numbers with them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyfelix.jsontext import TextPieces, WrittenAhead, dumps_indented, write_indented
from tests.conftest import REPO

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.text()
    | st.text(st.characters(max_codepoint=0x7F))
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(st.characters(max_codepoint=0x7F)) | st.text(), inner, max_size=4)
    ),
    max_leaves=20,
)


def standard(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()


@given(_VALUES)
def test_the_text_is_the_standard_librarys(value: Any) -> None:
    assert dumps_indented(value) == standard(value)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(), max_size=4))
def test_floats_are_the_same_numbers(value: list[float]) -> None:
    assert json.loads(dumps_indented(value)) == value


def test_keys_that_are_not_strings_are_written_as_the_standard_library_writes_them() -> None:
    value = {"b": {2: "x", 1: [True, None]}, "a": ()}
    assert dumps_indented(value) == standard(value)


@given(_VALUES | st.dictionaries(st.text(), st.lists(_VALUES, max_size=3) | _VALUES, max_size=4))
def test_the_text_written_in_pieces_is_the_same(value: Any) -> None:
    pieces: list[bytes | memoryview] = []
    write_indented(value, pieces.append)
    assert b"".join(pieces) == standard(value)


def test_a_views_lists_are_written_item_by_item() -> None:
    pieces: list[bytes | memoryview] = []
    write_indented({"items": [{"n": 1}, {"n": 2}], "name": "x"}, pieces.append)
    assert b'{\n      "n": 1\n    }' in pieces
    assert b"".join(pieces) == standard({"items": [{"n": 1}, {"n": 2}], "name": "x"})


@given(
    st.lists(st.text() | st.text(st.characters(max_codepoint=0x7F)), max_size=5),
    st.dictionaries(st.text(st.characters(max_codepoint=0x7F)), _SCALARS, max_size=3),
)
def test_a_string_made_in_pieces_is_written_as_the_whole_string(
    parts: list[str], rest: dict[str, Any]
) -> None:
    """A view's long script, made piece by piece as it is written, is the text of the string
    the pieces join to (escapes of quotes, control characters, DEL and beyond ASCII
    included), and is made only when written."""
    made: list[int] = []

    def make() -> list[str]:
        made.append(1)
        return parts

    value = {**rest, "script": {"ipv4": TextPieces(make)}}
    assert not made
    pieces: list[bytes | memoryview] = []
    write_indented(value, pieces.append)
    assert b"".join(pieces) == standard({**rest, "script": {"ipv4": "".join(parts)}})
    assert str(TextPieces(make)) == "".join(parts)


#: Writes a view whose last tables are written ahead, then the pids that made them; run in a
#: process of its own, as the dry-run is (no other thread: the worker is forked).
_AHEAD = """
import os, sys
from pyfelix.jsontext import TextPieces, WrittenAhead, write_indented
parent = os.getpid()
made = []
def make():
    with open(sys.argv[1], "a") as log:
        log.write(f"{os.getpid()}\\n")
    if sys.argv[2] == "fail" and os.getpid() != parent:
        raise RuntimeError("the worker fails")
    return ["-A a \\"quoted\\"\\n", "\u00e9\\t\\n"]
tables = {"ipv4": {"filter": "x"}, "ipv6": {"filter": TextPieces(make), "raw": "y"}}
ahead = WrittenAhead(tables["ipv6"], depth=2)
write_indented({"a": 1, "iptables": {**tables, "ipv6": ahead}}, sys.stdout.buffer.write)
print(parent, file=sys.stderr)
"""


@pytest.mark.parametrize("worker", ["writes", "fail"])
def test_a_value_written_ahead_is_made_by_a_worker_with_the_same_text(
    tmp_path: Path, worker: str
) -> None:
    """The tables written ahead are made once, in another process, and read as the whole
    view's text; a worker that fails costs time, not text: the value is made here then."""
    log = tmp_path / "made"
    run = subprocess.run(
        [sys.executable, "-c", _AHEAD, str(log), worker],
        capture_output=True,
        cwd=REPO,
        check=True,
    )
    script = '-A a "quoted"\n\u00e9\t\n'
    expected = {"ipv4": {"filter": "x"}, "ipv6": {"filter": script, "raw": "y"}}
    assert run.stdout == standard({"a": 1, "iptables": expected})
    parent = run.stderr.split()[-1].decode()
    made = log.read_text().split()
    if worker == "writes":
        assert len(made) == 1
        assert made[0] != parent
    else:
        assert len(made) == 2
        assert made[0] != parent
        assert made[1] == parent


def test_a_value_written_ahead_in_place_is_its_text() -> None:
    """Whether or not a worker could be forked here (this process may run threads), the text
    in its place is the value's own."""
    value = {"ipv6": {"filter": TextPieces(lambda: ["-A x\n"])}}
    ahead = {"ipv6": WrittenAhead(value["ipv6"], depth=2)}
    pieces: list[bytes | memoryview] = []
    write_indented({"iptables": ahead}, pieces.append)
    assert b"".join(pieces) == standard({"iptables": {"ipv6": {"filter": "-A x\n"}}})
