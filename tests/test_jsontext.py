"""The dry-run's JSON text: written by orjson where that gives the standard library's text,
held to ``json.dumps(indent=2, sort_keys=True)`` byte for byte on any value without floats
(whose exponents orjson writes shorter), and to the same numbers with them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pyfelix.jsontext import TextPieces, dumps_indented, write_indented

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
