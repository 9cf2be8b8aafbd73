"""What a label index pays the first time a selector asks about a label no selector asked
about before: one pass over its items, filing that label (the item side files only the
labels selectors ask about). Items carry a pod's labels under a namespace's profile.

Run: .venv/bin/python bench/bench_label_pass.py [ITEMS]
"""

from __future__ import annotations

import sys
import time

from pyfelix.calc.labelindex import LabelIndex
from pyfelix.selector import parse_selector


def _ignore(selector: object, item: object) -> None:
    """A match callback that keeps nothing (the index's own work is what is timed)."""


def main(items: int) -> None:
    index = LabelIndex(_ignore, _ignore)
    for n in range(min(items, 1000)):
        index.update_parent_labels(f"kns.ns{n}", {"pcns.team": f"t{n % 7}"})
    for n in range(items):
        labels = {"app": f"a{n % 50}", "one-in-10": f"v{n % 10}", "role": "x"}
        index.update_item(n, labels, (f"kns.ns{n % 1000}",))
    index.update_selector("first", parse_selector('app == "a1"'))  # files the item side
    start = time.perf_counter()
    index.update_selector("new-label", parse_selector('role == "y"'))
    passed = time.perf_counter() - start
    start = time.perf_counter()
    index.update_selector("same-label", parse_selector('role == "z"'))
    again = time.perf_counter() - start
    print(f"{items} items: a new label's pass {passed:.3f} s, the same label again {again:.4f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 250_000)
