"""JSON text to Python values: orjson where it can, the standard library where it cannot.

orjson parses etcd's values and responses in half the time (bench/RESULTS.md). It refuses
what Python's parser accepts beyond the JSON standard (NaN and Infinity, a byte-order mark,
UTF-16 text, lone surrogates); those go to the standard parser, so what loads and every error
message stay the standard library's. Integers beyond 64 bits become floats, as Go's JSON
decoder (so Calico) reads them into untyped fields.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """The value of a JSON text; raises json.JSONDecodeError (or UnicodeDecodeError)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
