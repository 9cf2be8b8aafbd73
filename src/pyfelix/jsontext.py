"""JSON text to Python values and back: orjson where it can, the standard library where it
cannot.

orjson parses etcd's values and responses in half the time (bench/RESULTS.md). It refuses
what Python's parser accepts beyond the JSON standard (NaN and Infinity, a byte-order mark,
UTF-16 text, lone surrogates); those go to the standard parser, so what loads and every error
message stay the standard library's. Integers beyond 64 bits become floats, as Go's JSON
decoder (so Calico) reads them into untyped fields.

Written, orjson's indented text is the standard library's byte for byte as long as it is
plain ASCII without DEL (the standard library escapes the rest) and every key is a string;
the dry-run's largest views (130 MB) take 0.1 s where the standard library takes 2.4 s.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import orjson

_INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def dumps_indented(value: Any) -> bytes:
    """``json.dumps(value, indent=2, sort_keys=True)`` and a newline, as ASCII: the same
    text, but for a float's exponent (orjson writes ``1e-9`` and ``1e16`` where the standard
    library writes ``1e-09`` and ``1e+16``: the same numbers)."""
    try:
        text = orjson.dumps(value, option=_INDENTED)
    except TypeError:
        text = b""
    if not text or not text.isascii() or b"\x7f" in text:
        return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("ascii")
    return text


@attrs.frozen
class TextPieces:
    """A string of a view too long to hold beside the rest, made piece by piece as it is
    written (``str`` joins the pieces): ``write_indented`` writes it as the string it
    joins to, never holding more than a piece."""

    make: Callable[[], Iterable[str]]

    def __str__(self) -> str:
        return "".join(self.make())


def _write_pieces(value: TextPieces, write: Callable[[bytes | memoryview], object]) -> None:
    """The JSON string of ``value``'s text: each piece escaped as ``dumps_indented`` would
    escape the whole (a character's escape never depends on its neighbours)."""
    write(b'"')
    for piece in value.make():
        try:
            text = orjson.dumps(piece)
        except TypeError:
            text = b""
        if not text or not text.isascii() or b"\x7f" in text:
            text = json.dumps(piece).encode("ascii")
        write(memoryview(text)[1:-1])
    write(b'"')


#: How much of a worker's text is copied at a time.
_COPY_BYTES = 1 << 20


class WrittenAhead:
    """A value of a view whose text a forked worker writes while this process writes what
    comes before it; ``write_indented`` copies the worker's text in its place, or, if there is
    no worker or it failed, writes the value itself: the same text either way. A dry-run's
    IPv6 tables (a third of its writing, rendered from the same state as the IPv4 ones) are
    so made on the second core, idle by then."""

    __slots__ = ("_depth", "_file", "_pid", "value")

    def __init__(self, value: Any, depth: int) -> None:
        """Fork the worker now (none where another thread runs: a forked copy of it would
        not run, and could hold a lock the worker needs). ``depth``: where the value is."""
        self.value, self._depth = value, depth
        self._pid, self._file = 0, -1
        if threading.active_count() > 1:
            return
        try:
            file = os.memfd_create("pyfelix-ahead", os.MFD_CLOEXEC)
        except (OSError, AttributeError):
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(file)
            return
        if pid == 0:  # the worker: write, leave without running any cleanup
            status = 1
            try:
                with open(file, "wb", buffering=_COPY_BYTES, closefd=False) as out:
                    _write(value, depth, out.write)
                status = 0
            finally:
                os._exit(status)
        self._pid, self._file = pid, file

    def write_to(self, depth: int, write: Callable[[bytes | memoryview], object]) -> None:
        """The value's text: the worker's once it has written it all, else made here."""
        assert depth == self._depth, "written ahead for another place"
        file, self._file = self._file, -1
        if not self._pid:
            _write(self.value, depth, write)
            return
        _, status = os.waitpid(self._pid, 0)
        self._pid = 0
        try:
            if status != 0:
                _write(self.value, depth, write)
                return
            os.lseek(file, 0, os.SEEK_SET)
            while chunk := os.read(file, _COPY_BYTES):
                write(chunk)
        finally:
            os.close(file)


def write_indented(value: Any, write: Callable[[bytes | memoryview], object]) -> None:
    """``dumps_indented(value)`` handed to ``write`` in pieces: a dict's values one by one
    (a dict among them so too), and a list among them item by item, so that the whole text
    is never held at once (a dry-run's 130 MB view was its process's peak). Each piece is
    written as ``dumps_indented`` writes it, the standard library's where orjson's would not
    be the same, so the text is ``dumps_indented``'s, but that a float's exponent can be
    written either way in one text."""
    _write(value, 0, write)
    write(b"\n")


def _write(value: Any, depth: int, write: Callable[[bytes | memoryview], object]) -> None:
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        inner = b"  " * (depth + 1)
        write(b"{\n")
        last = len(value) - 1
        for i, (key, item) in enumerate(sorted(value.items())):
            write(inner)
            write(_nested(key, 0))
            write(b": ")
            if isinstance(item, list) and item:
                write(b"[\n")
                end = len(item) - 1
                for j, element in enumerate(item):
                    write(inner + b"  ")
                    write(_nested(element, depth + 2))
                    write(b",\n" if j < end else b"\n")
                write(inner + b"]")
            else:
                _write(item, depth + 1, write)
            write(b",\n" if i < last else b"\n")
        write(b"  " * depth + b"}")
    elif isinstance(value, TextPieces):
        _write_pieces(value, write)
    elif isinstance(value, WrittenAhead):
        value.write_to(depth, write)
    else:
        write(_nested(value, depth))


def _nested(value: Any, depth: int) -> bytes | memoryview:
    """``value``'s indented text as it reads ``depth`` levels into a document, copied at most
    once (a dry-run's ipset restore script is one string of 60 MB, its iptables 18 MB)."""
    text = dumps_indented(value)
    end = len(text) - 1
    if text.find(b"\n", 0, end) != -1:
        # The last newline takes the indent too, sliced off below: no third copy.
        indent = b"  " * depth
        text = text.replace(b"\n", b"\n" + indent)
        end = len(text) - 1 - len(indent)
    return memoryview(text)[:end]


def loads(data: bytes | str) -> Any:
    """The value of a JSON text; raises json.JSONDecodeError (or UnicodeDecodeError)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
