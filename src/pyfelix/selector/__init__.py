"""Calico's label-selector language: parse, print canonically, evaluate, index.

>>> sel = parse_selector("role == 'db' && has(tier)")
>>> str(sel)
'(role == "db" && has(tier))'
>>> sel.evaluate({"role": "db", "tier": "x"})
True
"""

from pyfelix.selector.ast import LabelRestriction
from pyfelix.selector.parser import Selector, make_unique_id, parse_selector
from pyfelix.selector.tokenizer import SelectorError, valid_label

__all__ = [
    "LabelRestriction",
    "Selector",
    "SelectorError",
    "make_unique_id",
    "parse_selector",
    "valid_label",
]
