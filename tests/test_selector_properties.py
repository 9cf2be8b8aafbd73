"""Property tests: any selector text we can generate round-trips through its canonical form,
and the compiled evaluator agrees with a direct reading of the expression."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix.selector import parse_selector
from pyfelix.selector.parser import Selector, _Parser

Labels = Mapping[str, str]
Expr = tuple[str, Callable[[Labels], bool]]

LABELS = st.sampled_from(["a", "b", "app.kubernetes.io/name", "x-y_z", "in", "all"])
VALUES = st.sampled_from(["", "x", "y", "web", "we", "b'q", 'say "hi"'])
SPACE = st.sampled_from(["", " ", "  ", "\t"])


def quote(value: str) -> str:
    return f"'{value}'" if '"' in value else f'"{value}"'


@st.composite
def leaf(draw: st.DrawFn) -> Expr:
    label, value, sp = draw(LABELS), draw(VALUES), draw(SPACE)
    kind = draw(
        st.sampled_from(["eq", "ne", "has", "in", "notin", "contains", "starts", "ends", "all"])
    )
    if kind == "all":
        return f"all({sp})", lambda labels: True
    if kind == "has":
        return f"has({sp}{label}{sp})", lambda labels: label in labels
    if kind in ("in", "notin"):
        values = draw(st.lists(VALUES, max_size=3))
        body = ", ".join(quote(v) for v in values)
        op = "in" if kind == "in" else draw(st.sampled_from(["not in", "notin"]))
        inside = set(values)
        if kind == "in":
            return f"{label} {op} {{{body}}}", lambda labels: labels.get(label) in inside
        return f"{label} {op} {{{body}}}", lambda labels: labels.get(label) not in inside
    ops: dict[str, tuple[str, Callable[[str], bool]]] = {
        "eq": ("==", lambda v: v == value),
        "ne": ("!=", lambda v: v != value),
        "contains": ("contains", lambda v: value in v),
        "starts": ("starts with", lambda v: v.startswith(value)),
        "ends": ("ends with", lambda v: v.endswith(value)),
    }
    op, test = ops[kind]
    missing = kind == "ne"

    def evaluate(labels: Labels) -> bool:
        return missing if label not in labels else test(labels[label])

    # Word operators need a space after the label; == and != do not.
    gap = sp if op in ("==", "!=") else " "
    return f"{label}{gap}{op}{sp}{quote(value)}", evaluate


def combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    @st.composite
    def build(draw: st.DrawFn) -> Expr:
        kind = draw(st.sampled_from(["and", "or", "not", "paren"]))
        left = draw(children)
        if kind == "not":
            text, fn = left
            return f"!({text})", lambda labels: not fn(labels)
        if kind == "paren":
            return f"( {left[0]} )", left[1]
        right = draw(children)
        if kind == "and":
            return (
                f"({left[0]}) && ({right[0]})",
                lambda labels: left[1](labels) and right[1](labels),
            )
        return f"({left[0]}) || ({right[0]})", lambda labels: left[1](labels) or right[1](labels)

    return build()


EXPRESSIONS = st.recursive(leaf(), combine, max_leaves=8)
LABEL_SETS = st.dictionaries(LABELS, VALUES, max_size=4)


@settings(max_examples=300)
@given(EXPRESSIONS)
def test_canonical_form_round_trips(expr: Expr) -> None:
    """Re-parsing the canonical form gives the same canonical text and the same id."""
    selector = parse_selector(expr[0])
    again = parse_selector(str(selector))
    assert str(again) == str(selector)
    assert again.unique_id == selector.unique_id


@settings(max_examples=300)
@given(EXPRESSIONS, st.lists(LABEL_SETS, min_size=1, max_size=5))
def test_compiled_evaluation_matches_meaning(expr: Expr, label_sets: list[dict[str, str]]) -> None:
    """The compiled function, and its canonical re-parse, give the expression's meaning."""
    text, meaning = expr
    selector = parse_selector(text)
    canonical = parse_selector(str(selector))
    for labels in label_sets:
        assert selector.evaluate(labels) == meaning(labels)
        assert canonical.evaluate(labels) == meaning(labels)


@settings(max_examples=300)
@given(EXPRESSIONS, st.lists(LABEL_SETS, min_size=1, max_size=5))
def test_label_restrictions_hold_for_every_match(
    expr: Expr, label_sets: list[dict[str, str]]
) -> None:
    """Whatever matches satisfies the reported restrictions (so indexing never loses a match)."""
    selector = parse_selector(expr[0])
    for labels in label_sets:
        if not selector.evaluate(labels):
            continue
        for label, restriction in selector.label_restrictions.items():
            if restriction.must_be_present:
                assert label in labels
            if restriction.must_be_absent:
                assert label not in labels
            if restriction.values is not None:
                assert labels.get(label) in restriction.values


@settings(max_examples=300)
@given(
    EXPRESSIONS,
    VALUES.filter(lambda v: "'" not in v),
    st.sampled_from(["a/b", "in/x", "p.q/r"]),
    st.lists(LABEL_SETS, min_size=1, max_size=5),
)
def test_scoped_selectors_parse_as_the_parser_parses_them(
    expr: Expr, value: str, label: str, label_sets: list[dict[str, str]]
) -> None:
    """The shortcut for ``(inner) && label == 'value'`` (every namespaced policy) gives what
    the full parser gives: the same text and id, restrictions, evaluation and labels renamed
    (its one node stands for the full parser's And of the two)."""
    text = f"({expr[0]}) && {label} == '{value}'"
    shortcut = parse_selector(text)
    full = Selector(_Parser(text).parse())
    assert shortcut.canonical == full.canonical
    assert shortcut.unique_id == full.unique_id
    assert shortcut.label_restrictions == full.label_restrictions
    prefixed = full.with_label_prefix("pre.")
    assert shortcut.with_label_prefix("pre.").root == prefixed.root
    for labels in [*label_sets, *({**s, label: value} for s in label_sets)]:
        assert shortcut.evaluate(labels) == full.evaluate(labels)
