"""Selector benchmark: parse cost (cold and cached) and evaluation cost, compiled against a
plain tree walk over the same syntax tree.

Run: .venv/bin/python bench/bench_selector.py
"""

from __future__ import annotations

import functools
import timeit
from collections.abc import Callable, Mapping

from pyfelix.selector import parse_selector
from pyfelix.selector.ast import (
    AllNode,
    AndNode,
    CompareNode,
    GlobalNode,
    HasNode,
    InSetNode,
    Node,
    NotNode,
    OrNode,
)
from pyfelix.selector.parser import parse_uncached

SELECTORS = [
    'app == "web"',
    'app in {"web", "api", "db"} && env == "prod"',
    '(role == "db" || role == "cache") && !has(canary) && tier starts with "back"',
    'projectcalico.org/namespace == "shop" && app.kubernetes.io/name != "debug"',
]
LABELS = {
    "app": "web",
    "env": "prod",
    "role": "cache",
    "tier": "backend",
    "projectcalico.org/namespace": "shop",
    "app.kubernetes.io/name": "web",
}


def walk(node: Node, labels: Mapping[str, str]) -> bool:
    """The interpreter a compiled selector replaces."""
    if isinstance(node, AllNode | GlobalNode):
        return True
    if isinstance(node, HasNode):
        return node.label in labels
    if isinstance(node, NotNode):
        return not walk(node.operand, labels)
    if isinstance(node, AndNode):
        return all(walk(op, labels) for op in node.operands)
    if isinstance(node, OrNode):
        return any(walk(op, labels) for op in node.operands)
    if isinstance(node, InSetNode):
        inside = labels.get(node.label) in node.values
        return not inside if node.negated else inside
    assert isinstance(node, CompareNode)
    value = labels.get(node.label)
    if node.op == "!=":
        return value != node.value
    if value is None:
        return False
    return {
        "==": value == node.value,
        "contains": node.value in value,
        "starts with": value.startswith(node.value),
        "ends with": value.endswith(node.value),
    }[node.op]


def per_call_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def main() -> None:
    cold_parse = parse_uncached
    print(f"{'selector':<72} {'parse':>9} {'cached':>8} {'compiled':>9} {'tree walk':>9}")
    for text in SELECTORS:
        selector = parse_selector(text)
        parse = per_call_us(functools.partial(cold_parse, text), 2_000)
        cached = per_call_us(functools.partial(parse_selector, text), 200_000)
        compiled = per_call_us(functools.partial(selector.evaluate, LABELS), 200_000)
        walked = per_call_us(functools.partial(walk, selector.root, LABELS), 200_000)
        print(
            f"{text[:72]:<72} {parse:>7.1f}us {cached:>6.2f}us {compiled:>7.2f}us {walked:>7.2f}us"
        )


if __name__ == "__main__":
    main()
