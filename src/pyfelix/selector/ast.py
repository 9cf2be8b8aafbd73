"""Selector syntax tree: canonical text, label restrictions and Python source for evaluation.

Each node knows three things, all deliberately matching Calico:

* ``canonical()`` -- the text Felix prints and hashes (``&&``/``||`` groups in parentheses,
  ``!`` glued to its operand, set literals sorted and de-duplicated, values quoted with ``"``
  unless they contain one);
* ``restrictions()`` -- what any matching label set must satisfy, used to index selectors;
* ``source()`` -- a Python expression over ``labels`` that the compiler turns into one function.

Missing labels follow Calico: ``==``, ``in``, ``contains``, ``starts with`` and ``ends with`` are
false, ``!=`` and ``not in`` are true.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from types import CodeType

import attrs

ConstPool = list[object]


@attrs.frozen
class LabelRestriction:
    """What one label must look like for a selector to match.

    ``values`` is None when any value will do, otherwise the set the value must be in
    (an empty set means the selector cannot match at all).
    """

    must_be_present: bool = False
    must_be_absent: bool = False
    values: frozenset[str] | None = None

    @property
    def satisfiable(self) -> bool:
        if self.must_be_present and self.must_be_absent:
            return False
        return self.values is None or bool(self.values)


Restrictions = Mapping[str, LabelRestriction]


def _quote(value: str) -> str:
    quote = "'" if '"' in value else '"'
    return f"{quote}{value}{quote}"


def _const(pool: ConstPool, value: object) -> str:
    pool.append(value)
    return f"_c{len(pool) - 1}"


class Node:
    """Base class of the selector tree. It has no slots of its own, so that its subclasses'
    nodes are their slots alone: without it, each kept a dictionary's place and a weak
    reference's (16 bytes more of each of 100,000 scoped policies' nodes)."""

    __slots__ = ()

    def canonical(self) -> str:
        raise NotImplementedError

    def restrictions(self) -> Restrictions:
        return {}

    def source(self, pool: ConstPool) -> str:
        raise NotImplementedError

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        """A copy of this tree with every label name passed through ``rename``."""
        return self


@attrs.frozen
class AllNode(Node):
    def canonical(self) -> str:
        return "all()"

    def source(self, pool: ConstPool) -> str:
        return "True"


@attrs.frozen
class GlobalNode(Node):
    """``global()`` matches everything here; the policy converter rewrites it before use."""

    def canonical(self) -> str:
        return "global()"

    def source(self, pool: ConstPool) -> str:
        return "True"


@attrs.frozen
class HasNode(Node):
    label: str

    def canonical(self) -> str:
        return f"has({self.label})"

    def restrictions(self) -> Restrictions:
        return {self.label: LabelRestriction(must_be_present=True)}

    def source(self, pool: ConstPool) -> str:
        return f"({_const(pool, self.label)} in labels)"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return HasNode(rename(self.label))


@attrs.frozen
class CompareNode(Node):
    """``label <op> "value"`` for ==, !=, contains, starts with, ends with."""

    label: str
    op: str
    value: str

    def canonical(self) -> str:
        return f"{self.label} {self.op} {_quote(self.value)}"

    def restrictions(self) -> Restrictions:
        if self.op == "==":
            return {self.label: LabelRestriction(True, False, frozenset({self.value}))}
        if self.op == "!=":
            return {}
        return {self.label: LabelRestriction(must_be_present=True)}

    def source(self, pool: ConstPool) -> str:
        get = f"labels.get({_const(pool, self.label)})"
        value = _const(pool, self.value)
        if self.op == "==":
            return f"({get} == {value})"
        if self.op == "!=":
            return f"({get} != {value})"
        return f"{_const(pool, _STRING_CHECKS[self.op])}({get}, {value})"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return CompareNode(rename(self.label), self.op, self.value)


def _contains(value: str | None, arg: str) -> bool:
    return value is not None and arg in value


def _starts_with(value: str | None, arg: str) -> bool:
    return value is not None and value.startswith(arg)


def _ends_with(value: str | None, arg: str) -> bool:
    return value is not None and value.endswith(arg)


_STRING_CHECKS = {"contains": _contains, "starts with": _starts_with, "ends with": _ends_with}


@attrs.frozen
class InSetNode(Node):
    """``label in {...}`` or ``label not in {...}``; ``values`` is sorted and de-duplicated."""

    label: str
    values: tuple[str, ...]
    negated: bool = False

    @classmethod
    def build(cls, label: str, values: Iterable[str], negated: bool) -> InSetNode:
        return cls(label, tuple(sorted(set(values))), negated)

    def canonical(self) -> str:
        op = "not in" if self.negated else "in"
        return f"{self.label} {op} {{{', '.join(_quote(v) for v in self.values)}}}"

    def restrictions(self) -> Restrictions:
        if self.negated:
            return {}
        return {self.label: LabelRestriction(True, False, frozenset(self.values))}

    def source(self, pool: ConstPool) -> str:
        op = "not in" if self.negated else "in"
        label = _const(pool, self.label)
        return f"(labels.get({label}) {op} {_const(pool, frozenset(self.values))})"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return InSetNode(rename(self.label), self.values, self.negated)


@attrs.frozen
class NotNode(Node):
    operand: Node

    def canonical(self) -> str:
        return "!" + self.operand.canonical()

    def restrictions(self) -> Restrictions:
        if isinstance(self.operand, HasNode):
            return {self.operand.label: LabelRestriction(must_be_absent=True)}
        return {}

    def source(self, pool: ConstPool) -> str:
        return f"(not {self.operand.source(pool)})"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return NotNode(self.operand.map_labels(rename))


@attrs.frozen
class AndNode(Node):
    operands: tuple[Node, ...]

    def canonical(self) -> str:
        return "(" + " && ".join(op.canonical() for op in self.operands) + ")"

    def restrictions(self) -> Restrictions:
        merged: dict[str, LabelRestriction] = {}
        for op in self.operands:
            for label, r in op.restrictions().items():
                base = merged.get(label, LabelRestriction())
                if base.values is None:
                    values = r.values
                elif r.values is None:
                    values = base.values
                else:
                    values = base.values & r.values
                merged[label] = LabelRestriction(
                    base.must_be_present or r.must_be_present,
                    base.must_be_absent or r.must_be_absent,
                    values,
                )
        return merged

    def source(self, pool: ConstPool) -> str:
        return "(" + " and ".join(op.source(pool) for op in self.operands) + ")"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return AndNode(tuple(op.map_labels(rename) for op in self.operands))


@attrs.frozen
class ScopedNode(Node):
    """``(inner) && label == "value"``, the AndNode of the two as one object: a namespaced
    policy's selector scoped to its namespace, which a cluster of tenants holds for every
    policy (the AndNode, its tuple and the comparison were 13 MB for 100,000). It prints,
    restricts and evaluates as that AndNode does, whose parts it makes when asked."""

    inner: Node
    label: str
    value: str

    @property
    def operands(self) -> tuple[Node, ...]:
        return (self.inner, CompareNode(self.label, "==", self.value))

    def canonical(self) -> str:
        return f"({self.inner.canonical()} && {self.label} == {_quote(self.value)})"

    def restrictions(self) -> Restrictions:
        return AndNode(self.operands).restrictions()

    def source(self, pool: ConstPool) -> str:
        return AndNode(self.operands).source(pool)

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return AndNode(self.operands).map_labels(rename)


@attrs.frozen
class OrNode(Node):
    operands: tuple[Node, ...]

    def canonical(self) -> str:
        return "(" + " || ".join(op.canonical() for op in self.operands) + ")"

    def restrictions(self) -> Restrictions:
        """Only what every alternative requires survives."""
        merged = dict(self.operands[0].restrictions())
        for op in self.operands[1:]:
            other = op.restrictions()
            for label, r in list(merged.items()):
                o = other.get(label, LabelRestriction())
                present = r.must_be_present and o.must_be_present
                absent = r.must_be_absent and o.must_be_absent
                values = None
                if present and r.values is not None and o.values is not None:
                    values = r.values | o.values
                if present or absent:
                    merged[label] = LabelRestriction(present, absent, values)
                else:
                    del merged[label]
        return merged

    def source(self, pool: ConstPool) -> str:
        return "(" + " or ".join(op.source(pool) for op in self.operands) + ")"

    def map_labels(self, rename: Callable[[str], str]) -> Node:
        return OrNode(tuple(op.map_labels(rename) for op in self.operands))


Evaluator = Callable[[Mapping[str, str]], bool]


@functools.lru_cache(maxsize=1 << 10)
def _compiled(body: str) -> CodeType:
    return compile(f"def evaluate(labels):\n    return {body}\n", "<selector>", "exec")


def compile_node(node: Node) -> Evaluator:
    """Turn the tree into a single Python function, so evaluation walks no tree.

    Every label name and value is a constant of the function's namespace, not of its code, so
    selectors of one shape (a cluster's thousands of ``projectcalico.org/namespace == "..."``)
    share one compiled code object: compiling was most of the cost of a new selector."""
    pool: ConstPool = []
    body = node.source(pool)
    namespace: dict[str, object] = {f"_c{index}": value for index, value in enumerate(pool)}
    exec(_compiled(body), namespace)
    evaluate: Evaluator = namespace["evaluate"]  # type: ignore[assignment]
    return evaluate
