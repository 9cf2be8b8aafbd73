"""A JSON manifest's documents as their own texts, for a decoder that reads text.

kubectl's dump of a cluster is one ``List`` a file, its items every pod, and the standard
library's parser builds all of each pod before anything can look at it. msgspec splits the
text into each item's own text without building the items (a tenth of the time), so a typed
decoder can read the few fields it needs from each (syncer/plain_pods_typed.py) and the
standard library decodes only the rest.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from pyfelix.resources.loader import is_list_document

_TOP: msgspec.json.Decoder[dict[str, msgspec.Raw] | list[msgspec.Raw]] = msgspec.json.Decoder(
    dict[str, msgspec.Raw] | list[msgspec.Raw]
)
_ITEMS: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


def split_items(text: str) -> tuple[dict[str, Any] | None, list[msgspec.Raw]] | None:
    """A top-level array's items' texts (and no fields), or a List document's own fields,
    decoded as ``json.loads`` decodes them (its ``items`` holding their place as None), and
    its items' texts; None for any other text, and for text msgspec refuses."""
    try:
        top = _TOP.decode(text)
        if type(top) is list:
            return None, top
        assert type(top) is dict
        if "items" not in top:
            return None
        fields = {
            key: None if key == "items" else json.loads(bytes(value)) for key, value in top.items()
        }
        if not is_list_document(fields):
            return None
        return fields, _ITEMS.decode(top["items"])
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError, ValueError):
        return None
