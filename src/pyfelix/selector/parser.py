"""Recursive-descent parser for selectors and the compiled :class:`Selector` value.

Grammar (Calico's; ``||`` binds loosest, a run of ``!`` collapses to its parity)::

    selector  := <empty> | or_expr
    or_expr   := and_expr ("||" and_expr)*
    and_expr  := operation ("&&" operation)*
    operation := "!"* ( "has(" label ")" | "all()" | "global()" | "(" or_expr ")"
                      | label ("==" | "!=" | "contains" | "starts with" | "ends with") string
                      | label ("in" | "not in") "{" [string ("," string)* [","]] "}" )
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import sys
from collections.abc import Callable, Mapping

import attrs

from pyfelix.selector.ast import (
    AllNode,
    AndNode,
    CompareNode,
    Evaluator,
    GlobalNode,
    HasNode,
    InSetNode,
    LabelRestriction,
    Node,
    NotNode,
    OrNode,
    ScopedNode,
    compile_node,
)
from pyfelix.selector.tokenizer import MAX_LABEL_LENGTH, Kind, SelectorError, Token, tokenize

_COMPARISONS = {
    Kind.EQ: "==",
    Kind.NE: "!=",
    Kind.CONTAINS: "contains",
    Kind.STARTS_WITH: "starts with",
    Kind.ENDS_WITH: "ends with",
}


def make_unique_id(prefix: str, content: str) -> str:
    """Felix's id scheme: prefix + ":" + unpadded base64url(SHA-224(prefix + ":" + content))."""
    digest = hashlib.sha224(f"{prefix}:{content}".encode()).digest()
    return f"{prefix}:" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


@attrs.frozen(eq=False, weakref_slot=False)
class Selector:
    """A parsed selector: equal (and hashed) by its canonical text. Nothing refers to one
    weakly: it has no slot for that (16 bytes of each of a cluster's policies' selectors)."""

    root: Node
    canonical: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "canonical", self.root.canonical())

    # The id and the compiled evaluator on first use: a cluster's namespaced policies and
    # rules each have a selector of their own, and most are never evaluated (the label index
    # finds them no candidate) nor become an IP set (their policy is not active here).
    @functools.cached_property
    def unique_id(self) -> str:
        return make_unique_id("s", self.canonical)

    @functools.cached_property
    def _evaluate(self) -> Evaluator:
        return compile_node(self.root)

    def evaluate(self, labels: Mapping[str, str]) -> bool:
        return self._evaluate(labels)

    @property
    def label_restrictions(self) -> Mapping[str, LabelRestriction]:
        """Per-label constraints that every matching label set satisfies.

        Labels not named are unconstrained. An index keyed on these (required keys and
        key=value sets) lets the calculation graph test a selector only against candidates.
        Computed on each call (the index files a selector once): kept, they were a tenth of
        the selectors' memory.
        """
        return self.root.restrictions()

    @property
    def is_one_restriction(self) -> bool:
        """Whether the selector says no more than its one label restriction (``has(k)``,
        ``k == "v"``, ``k in {...}``), or none (``all()``, ``global()``): whatever carries
        that label (with one of the values) matches, without evaluating the selector."""
        root = self.root
        if isinstance(root, HasNode | AllNode | GlobalNode):
            return True
        if isinstance(root, CompareNode):
            return root.op == "=="
        return isinstance(root, InSetNode) and not root.negated

    @property
    def can_match(self) -> bool:
        return all(r.satisfiable for r in self.label_restrictions.values())

    def with_label_prefix(self, prefix: str) -> Selector:
        """The same selector over labels renamed to ``prefix + name`` (pcns./pcsa. folding)."""
        return Selector(self.root.map_labels(lambda label: prefix + label))

    def __str__(self) -> str:
        return self.canonical

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.canonical == self.canonical

    def __hash__(self) -> int:
        return hash(self.canonical)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self) -> Token:
        token = self.tokens[self.index]
        if token.kind is not Kind.EOF:
            self.index += 1
        return token

    def fail(self, token: Token, reason: str) -> SelectorError:
        return SelectorError(self.text, token.position, reason)

    def parse(self) -> Node:
        if self.peek().kind is Kind.EOF:
            return AllNode()
        node = self.or_expr()
        if self.peek().kind is not Kind.EOF:
            raise self.fail(self.peek(), "unexpected content after the end of the selector")
        return node

    def _joined(
        self, op: Kind, inner: Callable[[], Node], make: Callable[[tuple[Node, ...]], Node]
    ) -> Node:
        nodes = [inner()]
        while self.peek().kind is op:
            self.take()
            nodes.append(inner())
        return nodes[0] if len(nodes) == 1 else make(tuple(nodes))

    def or_expr(self) -> Node:
        return self._joined(Kind.OR, self.and_expr, OrNode)

    def and_expr(self) -> Node:
        return self._joined(Kind.AND, self.operation, AndNode)

    def operation(self) -> Node:
        negated = False
        while self.peek().kind is Kind.NOT:
            self.take()
            negated = not negated
        token = self.take()
        node: Node
        if token.kind is Kind.HAS:
            node = HasNode(token.value)
        elif token.kind is Kind.ALL:
            node = AllNode()
        elif token.kind is Kind.GLOBAL:
            node = GlobalNode()
        elif token.kind is Kind.LPAREN:
            node = self.or_expr()
            closing = self.take()
            if closing.kind is not Kind.RPAREN:
                raise self.fail(closing, "expected )")
        elif token.kind is Kind.LABEL:
            node = self.label_operation(token.value)
        else:
            raise self.fail(token, f"unexpected {token.kind.value!r}")
        if not negated:
            return node
        # "!(!x)" is x. Calico would print it as "!!x", which re-parses as x: collapsing here
        # keeps the canonical form a fixed point (the only place we differ from Calico's text).
        return node.operand if isinstance(node, NotNode) else NotNode(node)

    def label_operation(self, label: str) -> Node:
        op = self.take()
        if op.kind in _COMPARISONS:
            value = self.take()
            if value.kind is not Kind.STRING:
                raise self.fail(value, "expected a quoted string")
            return CompareNode(label, _COMPARISONS[op.kind], value.value)
        if op.kind in (Kind.IN, Kind.NOT_IN):
            brace = self.take()
            if brace.kind is not Kind.LBRACE:
                raise self.fail(brace, "expected a set literal {...}")
            values: list[str] = []
            while self.peek().kind is Kind.STRING:
                values.append(self.take().value)
                if self.peek().kind is not Kind.COMMA:
                    break
                self.take()
            closing = self.take()
            if closing.kind is not Kind.RBRACE:
                raise self.fail(closing, "expected }")
            return InSetNode.build(label, values, negated=op.kind is Kind.NOT_IN)
        raise self.fail(op, f"expected an operator after label {label!r}")


# Selectors repeat heavily (every rule of every policy, every endpoint update); parsing once
# per distinct text keeps the calculation graph's cost proportional to distinct selectors.
_PARSE_CACHE_SIZE = 65536


_PREFIXED_LABEL = re.compile(r"[a-zA-Z0-9_.-]+/[a-zA-Z0-9_./-]*")


def _scoped(text: str) -> tuple[str, str, str] | None:
    """(selector, label, value) of ``(<selector>) && <label> == '<value>'``: how the converter
    scopes every namespaced policy and rule to its namespace. A cluster has one such selector
    per namespace and policy, each distinct, but the scoped part is shared and already parsed:
    only the comparison is new. The label must be prefixed (have a "/"), so it is never one of
    the grammar's words; anything unusual is left to the parser. The label and value are
    interned: the value is the namespace's name, which endpoints' labels already hold (a
    copy for each of 100,000 policies was 13 MB)."""
    if not (text.startswith("(") and text.endswith("'")):
        return None
    cut = text.rfind(") && ")
    label, sep, value = text[cut + 5 : -1].partition(" == '")
    inner = text[1:cut]
    if (
        cut < 0
        or not sep
        or "'" in value
        or not inner.strip()
        or len(label) > MAX_LABEL_LENGTH
        or not _PREFIXED_LABEL.fullmatch(label)
    ):
        return None
    return inner, sys.intern(label), sys.intern(value)


def parse_selector(text: str) -> Selector:
    """Parse ``text``; raises :class:`SelectorError` naming the position of the problem.

    A scoped selector is built anew each time, around its inner part parsed once: each
    namespace's is distinct and parsed once, so the cache kept them for no second use
    (65,536 entries of a cluster of tenants' 100,000, 9 MB), and building one from its
    inner part takes a few microseconds."""
    scoped = _scoped(text)
    if scoped is not None:
        inner, label, value = scoped
        try:
            # A text inside that parses has balanced parentheses: "(inner)" is one operand.
            root = parse_selector(inner).root
        except (SelectorError, RecursionError):
            pass  # not of that form after all: the parser says what is wrong
        else:
            return Selector(ScopedNode(root, label, value))
    return _parsed(text)


@functools.lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parsed(text: str) -> Selector:
    return parse_uncached(text)


def parse_uncached(text: str) -> Selector:
    """``text`` through the parser itself, neither cached nor taken apart as scoped."""
    try:
        return Selector(_Parser(text).parse())
    except RecursionError:
        raise SelectorError(text, 0, "selector is nested too deeply") from None
