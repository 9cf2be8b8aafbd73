"""What the compiled reader of whole files (syncer/plain_native.py) gives for one item,
for the tests that hold it to the Python paths item by item."""

from __future__ import annotations

from pyfelix.syncer.plain_native import native_splitter

SPLIT = native_splitter()


def compiled_item(text: str) -> object:
    """What the compiled reader gives for a List holding the one item ``text``: its fields'
    tuple, or its text back (as bytes)."""
    assert SPLIT is not None  # make builds it
    split = SPLIT('{"apiVersion": "v1", "kind": "List", "items": [' + text + "]}")
    assert split is not None
    assert split[0] == {"apiVersion": "v1", "kind": "List", "items": None}
    [item] = split[1]
    return item
