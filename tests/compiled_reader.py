"""What the compiled reader of whole files and of listing pages (syncer/plain_native.py)
gives for one item, for the tests that hold it to the Python paths item by item."""

from __future__ import annotations

from pyfelix.syncer.plain_native import listing_reader, native_splitter

SPLIT = native_splitter()
READ_PAGE = listing_reader()


def compiled_item(text: str) -> object:
    """What the compiled reader gives for a List holding the one item ``text``: its fields'
    tuple, or its text back (as bytes)."""
    assert SPLIT is not None  # make builds it
    split = SPLIT('{"apiVersion": "v1", "kind": "List", "items": [' + text + "]}")
    assert split is not None
    assert split[0] == {"apiVersion": "v1", "kind": "List", "items": None}
    [item] = split[1]
    return item


def listed_item(text: str) -> object:
    """What the compiled reader of an API server's pod listing gives for a page holding the
    one item ``text``: (its resourceVersion, its fields' tuple), or the item parsed."""
    assert READ_PAGE is not None  # make builds it
    page = READ_PAGE(
        (
            '{"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},'
            ' "items": [' + text + "]}"
        ).encode()
    )
    assert page is not None
    assert page["metadata"] == {"resourceVersion": "7"}
    [item] = page["items"]
    return item
