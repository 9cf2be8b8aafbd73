"""Manifests parsed by yaml-rs (a Rust parser, about ten times libyaml's speed) wherever its
reading is the strict loader's.

yaml-rs reads YAML 1.2's core schema; Kubernetes, calicoctl and pyfelix's strict loader
(loader.py) read YAML 1.1. The two readings differ only on some plain scalars (``yes``,
``on``, ``1e3``, ``010``, ``0o17``, ``1:20``, ``=``), on node properties (tags, anchors,
aliases, merge keys) and directives, and on what the strict loader bounds (aliases, depth).
yaml-rs also crashes on very deep nesting instead of refusing it. So a file goes to yaml-rs
only when its text shows none of those, judged conservatively from the text alone; any other
file, any document that is a list (its items' lines are wanted), and every file yaml-rs
refuses, go to the strict loader, whose results, errors and lines are the reference
(tests/test_fast_yaml.py compares the two readings).

What this leaves to the strict loader: every error message, and every document shape the
text checks cannot prove plain.
"""

from __future__ import annotations

import itertools
import logging
import re
from typing import Any

import yaml_rs

from pyfelix.resources.containment import contained

log = logging.getLogger(__name__)

#: Where a YAML node (a key, a value, an item) may start: after a line's indentation and any
#: block indicators, or after a flow indicator or a key's colon.
_NODE_START = r"(?:^(?:---[ ]+)?[ ]*(?:[-?:][ ]+)*|[:,\[\{][ ]*)"
#: Where a plain scalar may end.
_SCALAR_END = r"[ ]*(?:$|\#|,|\]|\}|:(?:[ ]|$))"
#: Plain scalars that YAML 1.1 and 1.2 (or yaml-rs) read differently, and what only the
#: strict loader handles: tags, anchors and aliases (and so merges), directives, merge keys.
_DIFFERENT = re.compile(
    _NODE_START
    + r"(?:[!&*%]|<<[ \t]*:|(?:"
    + "|".join(
        (
            r"yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|=|<<",
            # Leading zeros (1.1: octal, or a string when a digit is 8 or 9) and 0o.
            r"[-+]?0[0-9_]+|[-+]?0o[0-7_]+",
            # An exponent (1.1: only after a dot and with a sign).
            r"[-+]?[0-9.][0-9_.]*[eE][-+]?[0-9]+",
            # Base 60.
            r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?",
            # A sign before a bare fraction (1.1: a string).
            r"[-+]\.[0-9][0-9_]*",
            # Underscores in what may be a number (yaml-rs reads "_1" as 1).
            r"[-+]?[0-9a-fA-FxXoObB._:]*_[0-9a-fA-FxXoObB._:]*",
            # Block scalars: yaml-rs keeps a line break where an empty one has none.
            r"[|>][-+0-9]*[ ]*(?:\#[^\n]*)?",
        )
    )
    + ")"
    + _SCALAR_END
    + ")",
    re.MULTILINE,
)
#: Characters the strict loader refuses (PyYAML's printable set), a byte-order mark, the
#: line breaks of YAML 1.1 only (NEL, LS, PS), tabs and carriage returns.
_UNUSUAL = re.compile(
    "[^\x0a\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
#: Where a scalar may end, for the suspects below.
_END = r"[ ]*(?:\n|\#|,|\]|\}|:[ \n])"
#: Each finds, fast (a literal first, the context after it), lines that may hold one of
#: _DIFFERENT's scalars; _DIFFERENT then judges those lines alone.
_SUSPECTS = tuple(
    re.compile(pattern)
    for pattern in (
        *(rf"\{c}(?<=[\n :\[\{{,-]\{c})" for c in "!*%|>"),
        r"&(?<=[\n :\[\{,-]&)(?!&)",
        r"<<",
        r"=(?<=[\n :\[\{,]=)" + _END,
        r"_(?<=[-+0-9a-fA-FxXoObB.:\n :\[\{,]_)[0-9a-fA-FxXoObB._:]*" + _END,
        r"0(?<![0-9A-Za-z.]0)[0-9o_][0-9a-fA-F_]*" + _END,
        r":(?<=[0-9]:)[0-5]?[0-9](?:\.[0-9_]*)?" + _END,
        r"-\.[0-9]",
        r"\+\.[0-9]",
    )
)
#: Suspects found in the text reversed, so that the literal at their end comes first: YAML
#: 1.1's booleans that YAML 1.2 reads as strings, and numbers with an exponent.
_SUSPECTS_REVERSED = re.compile(
    r"[\n:#,\]\}][ ]*(?:sey|seY|SEY|on|oN|ON|no|nO|NO|ffo|ffO|FFO|[0-9]+[-+]?[eE][0-9.])"
)
#: Shapes the strict loader bounds, or where yaml-rs accepts more than YAML 1.1: lines
#: indented deeper than 24 columns, five block indicators on one line ("- - - - - a"),
#: complex keys ("? key" and ": value" lines), and document end markers.
_SHAPES = re.compile(
    r"\n(?:[ ]{25}|[ ]*(?:[-?][ ]+){5}|(?:---[ ]+)?[ ]*(?:-[ ]+)*[?:](?:[ ]|\n)|\.\.\.(?:[ ]|\n))"
)
#: A flow collection as a key ("[]: x"): yaml-rs makes a tuple of it, YAML 1.1 refuses it.
_FLOW_KEY = re.compile(r"[\]}][ ]*:[ \n]")
#: A flow collection with something in it: yaml-rs accepts more than YAML 1.1 there.
_FLOW = re.compile(r"[\[{](?![\]}])")
#: Document starts after the first line: a line that is, or starts with, ``---``.
_START = re.compile(r"\n---(?=[ \n]|$)")
#: A line with content: not blank, not only a comment.
_CONTENT = re.compile(r"^[ ]*[^ \n#]", re.MULTILINE)
#: YAML 1.1's booleans that YAML 1.2 reads as strings (as in _DIFFERENT).
_WORDS = "yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF"
#: Lines plain at a glance, the bulk of a CNI-written manifest's lines found nowhere else (a
#: name, a pod, an interface, an address): a key and a value that are words starting with a
#: letter, neither one of _WORDS (a value of letters, digits and ``-./``), or an IPv4
#: address as a list item, indented at most 24 columns, one block indicator at most. None of
#: the checks below can find anything in them (tests/test_fast_yaml.py generates such lines
#: and asks the checks); they are taken out before the checks run.
_SIMPLE = re.compile(
    rf"[ ]{{0,24}}(?:-[ ])?(?!(?:{_WORDS}):)[A-Za-z][A-Za-z0-9]*:"
    rf"[ ](?!(?:{_WORDS})$)[A-Za-z][-A-Za-z0-9./]*"
    r"|[ ]{0,24}-[ ][0-9]{1,3}(?:\.[0-9]{1,3}){3}(?:/[0-9]{1,2})?"
)
#: Lines found plain already, in any file (each check is about one line): manifests repeat
#: most of theirs. Bounded: once full, new lines are checked every time they come.
_PLAIN_LINES: set[str] = set()
_PLAIN_LINES_LIMIT = 100_000


def _suspect_lines(lines: str) -> list[str]:
    """The lines of ``lines`` (each between line breaks) where a suspect was found, each once:
    a long line with many suspects is one line to judge, not one copy per suspect (an 82 KB
    line of them took 3 GB)."""
    starts: set[int] = set()
    for suspect in _SUSPECTS:
        for match in suspect.finditer(lines):
            starts.add(lines.rfind("\n", 0, match.start()) + 1)
    backwards = lines[::-1]
    last = len(lines) - 1
    for match in _SUSPECTS_REVERSED.finditer(backwards):
        # The suspect's literal ends just before the delimiter matched first (backwards).
        at = last - (match.start() + 1)
        starts.add(lines.rfind("\n", 0, at + 1) + 1)
    return [lines[start : lines.find("\n", start)] for start in sorted(starts)]


def _plain_text(text: str) -> bool:
    """Whether nothing in ``text`` may read differently, or go deeper than the strict
    loader allows (its 64 levels: 24 columns of indentation nest at most 26 levels, four
    indicators on a line four more; parse_plain takes no flow collection but ``{}`` and
    ``[]``). Each check is about one line, so lines seen plain before are not checked, nor
    are lines plain at a glance (``_SIMPLE``)."""
    fresh = set(text.split("\n"))
    fresh.difference_update(_PLAIN_LINES)
    if not fresh:
        return True
    simple = _SIMPLE.fullmatch
    rest = [line for line in fresh if not simple(line)]
    if rest and not _lines_plain("\n" + "\n".join(rest) + "\n"):
        return False
    if len(_PLAIN_LINES) + len(fresh) <= _PLAIN_LINES_LIMIT:
        _PLAIN_LINES.update(fresh)
    return True


def _lines_plain(lines: str) -> bool:
    """The checks of ``_plain_text`` on ``lines`` (lines between line breaks)."""
    if _UNUSUAL.search(lines) or _SHAPES.search(lines) or _FLOW_KEY.search(lines):
        return False
    suspects = _suspect_lines(lines)
    return not (suspects and _DIFFERENT.search("\n".join(suspects)))


def _marked(text: str, start: int) -> bool:
    """Whether the document at ``start`` begins with a ``---`` marker (``---#`` is a plain
    scalar)."""
    return text.startswith("---", start) and text[start + 3 : start + 4] in ("", " ", "\n")


def _first_content_line(text: str, start: int, end: int, line: int) -> int | None:
    """The line where the document in ``text[start:end]`` (starting on ``line``, with its
    ``---`` marker if it has one) has its content, as the strict loader reports it (the
    marker's own line when content follows the marker there); None when it has none."""
    if _marked(text, start):
        after = text[start + 3 : start + 5]
        if after[:1] == "\n" and after[1:] not in ("", " ", "\n", "#"):
            return line + 1  # the usual layout: the content right under the marker
        rest = text[start + 3 : end].split("\n", 1)[0].split("#", 1)[0]
        if rest.strip():
            return line
        start += 3
    found = _CONTENT.search(text, start, end)
    if found is None:
        return None
    return line + text.count("\n", start, found.start())


#: Texts longer than this are parsed by yaml-rs in a child process, unless this process is a
#: worker already (containment.py): yaml-rs ends the process on a failed allocation (about
#: eight bytes per byte of text, up front), which a 42 MB manifest near the memory limit met.
#: A child costs about 60 ms, a few percent of such a text's parse.
IN_PROCESS_LIMIT = 4 << 20
#: The child: the text on stdin, yaml-rs's documents marshalled on stdout.
_CHILD = (
    "import marshal, sys, yaml_rs\n"
    "text = sys.stdin.buffer.read().decode()\n"
    "try:\n"
    "    loaded = yaml_rs.loads(text, parse_datetime=False)\n"
    "except (yaml_rs.YAMLDecodeError, ValueError, TypeError, OverflowError):\n"
    "    sys.exit(3)\n"
    "sys.stdout.buffer.write(marshal.dumps(loaded))\n"
)
_FAILED: Any = object()


def _loads_in_a_child(text: str) -> Any:
    """``yaml_rs.loads(text)`` in a child process; _FAILED when it refused the text, crashed
    (logged: the strict loader parses the text instead), or gave what does not unmarshal."""
    import marshal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=text.encode(),
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        log.warning("cannot start a YAML parsing child (%s): the strict loader parses", exc)
        return _FAILED
    if done.returncode < 0 or done.returncode not in (0, 3):
        log.warning(
            "yaml-rs ended its child with %s on a %d-byte text (a native crash, kept out of"
            " this process): the strict loader parses it; %s",
            f"signal {-done.returncode}" if done.returncode < 0 else f"status {done.returncode}",
            len(text),
            (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1],
        )
        return _FAILED
    if done.returncode == 3:
        return _FAILED
    try:
        return marshal.loads(done.stdout)
    except (EOFError, ValueError, TypeError):
        return _FAILED


def parse_plain(text: str) -> list[tuple[Any, int, list[int]]] | None:
    """The documents of ``text`` with their start lines, as the strict loader gives them,
    or None where that cannot be shown from the text (the caller uses the strict loader)."""
    if not _plain_text(text) or (("[" in text or "{" in text) and _FLOW.search(text)):
        return None
    if len(text) > IN_PROCESS_LIMIT and not contained():
        loaded = _loads_in_a_child(text)
        if loaded is _FAILED:
            return None
    else:
        try:
            loaded = yaml_rs.loads(text, parse_datetime=False)
        except (yaml_rs.YAMLDecodeError, ValueError, TypeError, OverflowError):
            return None
    # Where each document starts (yaml-rs counts one per marker, and one before the first
    # marker if there is content there), and on which line.
    starts = [0, *(match.start() + 1 for match in _START.finditer(text))]
    starts.append(len(text))
    found: list[tuple[int | None, int]] = []  # (content line or None, the document's line)
    line = 1
    for start, end in itertools.pairwise(starts):
        first = _first_content_line(text, start, end, line)
        if first is not None or _marked(text, start):
            found.append((first, line))
        line += text.count("\n", start, end)
    values: list[Any]
    if not found:
        return []
    if len(found) == 1:
        values = [loaded]
    elif isinstance(loaded, list) and len(loaded) == len(found):
        values = loaded
    else:
        return None
    # An empty document is placed, as the strict loader places it, where the next one starts.
    after = [at for _, at in found[1:]] + [line]
    parsed: list[tuple[Any, int, list[int]]] = []
    for (first, _), data, next_start in zip(found, values, after, strict=True):
        if type(data) is list or (type(data) is dict and str(data.get("kind")).endswith("List")):
            return None  # the strict loader gives their items' lines
        parsed.append((data, next_start if first is None else first, []))
    return parsed
