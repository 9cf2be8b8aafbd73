"""The selector language: grammar, Calico's semantics for missing labels, canonical form, ids,
label restrictions and error positions."""

from __future__ import annotations

import base64
import hashlib

import pytest

from pyfelix.selector import LabelRestriction, SelectorError, parse_selector


def calico_id(canonical: str) -> str:
    digest = hashlib.sha224(f"s:{canonical}".encode()).digest()
    return "s:" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", "all()"),
        ("   ", "all()"),
        ("all()", "all()"),
        ("( all( ) )", "all()"),
        ("global()", "global()"),
        ("a=='b'", 'a == "b"'),
        ('a != "b"', 'a != "b"'),
        ("has( a.b/c-d_e )", "has(a.b/c-d_e)"),
        ("!has(a)", "!has(a)"),
        ("!!has(a)", "has(a)"),
        ("! ! ! has(a)", "!has(a)"),
        ("!(!has(a))", "has(a)"),
        ("!(!(a == 'x') && has(b))", '!(!a == "x" && has(b))'),
        ("a in {'z', \"b\", 'b',}", 'a in {"b", "z"}'),
        ("a in {}", "a in {}"),
        ("a not in {'x'}", 'a not in {"x"}'),
        ("a notin {'x'}", 'a not in {"x"}'),
        ("a contains 'x'", 'a contains "x"'),
        ("a startswith 'x'", 'a starts with "x"'),
        ("a starts   with 'x'", 'a starts with "x"'),
        ("a ends with 'x'", 'a ends with "x"'),
        ("a == '\"quoted\"'", "a == '\"quoted\"'"),
        ("a in {'\"', 'b'}", 'a in {\'"\', "b"}'),
        ("a == 'x' && b == 'y' && c == 'z'", '(a == "x" && b == "y" && c == "z")'),
        ("a == 'x' || b == 'y' && c == 'z'", '(a == "x" || (b == "y" && c == "z"))'),
        ("(a == 'x' || b == 'y') && c == 'z'", '((a == "x" || b == "y") && c == "z")'),
        ("!(a == 'x' && has(b))", '!(a == "x" && has(b))'),
        ("!(a == 'x')", '!a == "x"'),
        ("in == 'x' && all == 'y'", '(in == "x" && all == "y")'),
        ("a\t==\t'b'", 'a == "b"'),
    ],
)
def test_canonical_form_and_id(text: str, canonical: str) -> None:
    """Parsing normalises to Calico's canonical text, and the id hashes that text."""
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert selector.unique_id == calico_id(canonical)
    assert parse_selector(canonical).unique_id == selector.unique_id


def test_all_id_matches_felix() -> None:
    """The id of all() is the one Felix uses for its all-endpoints IP set."""
    assert parse_selector("").unique_id == "s:5y5I3VdRZfDU01O--xXAPx2yxCQQqMf0M6IWug"


@pytest.mark.parametrize(
    ("text", "matches", "misses"),
    [
        ('a == "b"', [{"a": "b"}, {"a": "b", "c": "d"}], [{}, {"a": "c"}, {"c": "b"}]),
        ('a != "b"', [{}, {"a": "c"}, {"c": "b"}], [{"a": "b"}]),
        ('a in {"x", "y"}', [{"a": "x"}, {"a": "y"}], [{}, {"a": "z"}]),
        ('a not in {"x", "y"}', [{}, {"a": "z"}], [{"a": "x"}]),
        ("a in {}", [], [{}, {"a": ""}]),
        ("a not in {}", [{}, {"a": "q"}], []),
        ("has(a)", [{"a": ""}, {"a": "x"}], [{}, {"b": "a"}]),
        ("!has(a)", [{}, {"b": "a"}], [{"a": ""}]),
        ('a contains "ell"', [{"a": "hello"}], [{}, {"a": "help"}]),
        ('a starts with "he"', [{"a": "hello"}], [{}, {"a": "the"}]),
        ('a ends with "lo"', [{"a": "hello"}], [{}, {"a": "lot"}]),
        ('!a == "b"', [{}, {"a": "c"}], [{"a": "b"}]),
        ('!a contains "x"', [{}, {"a": "y"}], [{"a": "xx"}]),
        ("all()", [{}, {"a": "b"}], []),
        ("global()", [{}, {"a": "b"}], []),
        (
            'a == "1" && (b == "2" || !has(c))',
            [{"a": "1", "b": "2", "c": "x"}, {"a": "1"}],
            [{"a": "1", "c": "x"}, {"b": "2"}],
        ),
    ],
)
def test_evaluation(text: str, matches: list[dict[str, str]], misses: list[dict[str, str]]) -> None:
    """Evaluation follows Calico, including what a missing label means for each operator."""
    selector = parse_selector(text)
    for labels in matches:
        assert selector.evaluate(labels), labels
    for labels in misses:
        assert not selector.evaluate(labels), labels


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("a ==", 4, "expected a quoted string"),
        ('a = "b"', 2, "expected =="),
        ('a == "b" & c', 9, "expected &&"),
        ('a == "b" | c', 9, "expected ||"),
        ('a == "b', 5, "unterminated string"),
        ("has(a", 0, "no closing ')' after has("),
        ("all(x)", 0, "no closing ')' after all("),
        ('(a == "b"', 9, "expected )"),
        ('a in {"b"', 9, "expected }"),
        ('a in "b"', 5, "expected a set literal"),
        ('a == "b" c', 9, "unexpected content after the end of the selector"),
        ('a foo "b"', 2, "expected an operator after label 'a'"),
        ('a\n== "b"', 1, "expected an operator after label 'a'"),
        ('"b"', 0, "unexpected 'string'"),
        ("!", 1, "unexpected 'end of selector'"),
        ("a == 'b' &&", 11, "unexpected 'end of selector'"),
        ("has(" + "x" * 513 + ")", 4, "label longer than 512 characters"),
        ("~a == 'b'", 0, "expected a label"),
        ("a ~ 'b'", 2, "expected an operator after label 'a'"),
    ],
)
def test_errors_name_the_position(text: str, position: int, reason: str) -> None:
    """Bad selectors raise SelectorError (a ValueError) saying what and where."""
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    assert isinstance(info.value, ValueError)
    assert info.value.position == position
    assert info.value.reason.startswith(reason)
    assert f"at position {position}" in str(info.value)


def test_parsing_is_cached() -> None:
    """The same text parses once: later calls return the very same object."""
    assert parse_selector('cache == "me"') is parse_selector('cache == "me"')


def test_equality_and_hash_follow_canonical_form() -> None:
    """Two spellings of one selector are equal and interchangeable as dict keys."""
    one, two = parse_selector("a=='x'&&has(b)"), parse_selector('(a == "x" && has(b))')
    assert one == two
    assert {one: 1}[two] == 1
    assert one != parse_selector("has(b) && a == 'x'")


def test_with_label_prefix() -> None:
    """Prefixing rewrites every label, as Calico does when folding namespace selectors."""
    selector = parse_selector("team == 'a' && has(env) && tier in {'x'}")
    prefixed = selector.with_label_prefix("pcns.")
    assert str(prefixed) == '(pcns.team == "a" && has(pcns.env) && pcns.tier in {"x"})'
    assert prefixed.evaluate({"pcns.team": "a", "pcns.env": "", "pcns.tier": "x"})


R = LabelRestriction


@pytest.mark.parametrize(
    ("text", "restrictions"),
    [
        ("all()", {}),
        ('a == "x"', {"a": R(True, False, frozenset({"x"}))}),
        ('a in {"x", "y"}', {"a": R(True, False, frozenset({"x", "y"}))}),
        ("has(a)", {"a": R(must_be_present=True)}),
        ("!has(a)", {"a": R(must_be_absent=True)}),
        ('a != "x"', {}),
        ('a not in {"x"}', {}),
        ('a contains "x"', {"a": R(must_be_present=True)}),
        ('!a == "x"', {}),
        (
            'a == "x" && has(b) && a in {"x", "y"}',
            {"a": R(True, False, frozenset({"x"})), "b": R(must_be_present=True)},
        ),
        ('a == "x" && a == "y"', {"a": R(True, False, frozenset())}),
        ('a == "x" || a == "y"', {"a": R(True, False, frozenset({"x", "y"}))}),
        ('a == "x" || has(a)', {"a": R(must_be_present=True)}),
        ('a == "x" || b == "y"', {}),
        ("!has(a) || !has(a)", {"a": R(must_be_absent=True)}),
    ],
)
def test_label_restrictions(text: str, restrictions: dict[str, LabelRestriction]) -> None:
    """Each selector reports the label constraints every match satisfies (for indexing)."""
    assert dict(parse_selector(text).label_restrictions) == restrictions


def test_unsatisfiable_selector_is_flagged() -> None:
    """A selector whose constraints contradict cannot match anything."""
    assert not parse_selector('a == "x" && a == "y"').can_match
    assert not parse_selector("has(a) && !has(a)").can_match
    assert parse_selector('a == "x"').can_match
