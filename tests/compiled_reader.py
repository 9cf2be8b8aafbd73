"""What the compiled reader of whole files and of listing pages (syncer/plain_native.py)
gives for one item, for the tests that hold it to the Python paths item by item."""

from __future__ import annotations

from typing import Any

from pyfelix.syncer.plain_native import listing_reader, native_splitter

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


#: What an API server adds to an object created through it (a listing holds it).
MANAGED_FIELDS = [
    {
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
        "manager": "kubectl-create",
        "operation": "Update",
        "time": "2026-01-05T09:23:21Z",
    }
]


def listed_form(doc: dict[str, Any]) -> dict[str, Any]:
    """A document as an API server lists it: no kind or apiVersion, its managedFields."""
    listed = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    if type(listed.get("metadata")) is dict:
        listed["metadata"] = {**listed["metadata"], "managedFields": MANAGED_FIELDS}
    return listed


def listed_item(text: str, kind: str = "Pod") -> object:
    """What the compiled reader of an API server's listing of ``kind`` gives for a page
    holding the one item ``text``: (its resourceVersion, its fields' tuple), or the item
    parsed."""
    read_page = listing_reader(kind)
    assert read_page is not None  # make builds it
    page = read_page(
        (
            f'{{"kind": "{kind}List", "apiVersion": "v1", "metadata": {{"resourceVersion": "7"}},'
            ' "items": [' + text + "]}"
        ).encode()
    )
    assert page is not None
    assert page["metadata"] == {"resourceVersion": "7"}
    [item] = page["items"]
    return item
