"""A plain WorkloadEndpoint's fields decoded straight from its JSON text.

The dry-run's validating child parsed a file of endpoints with the standard library, a dict
and its strings for each, then checked each dict's keys and types by hand
(``plain_fields``): for 250,000 endpoints the parse alone was a third of the child's time.
msgspec decodes an endpoint's text into the few typed fields ``plain_fields`` reads, checking
on the way what it checks by hand: each key is a known one, each value a string (or a list
or map of strings), the four top-level fields present. What it refuses (an unknown field,
a wrong type, text its decoder does not take) goes to the pure path, which parses the text
with the standard library and decides as before; so the output never depends on msgspec,
only the time does. tests/test_plain_workloads.py holds the two paths equal, document by
generated document.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pyfelix.resources.meta import CALICO_API_VERSION
from pyfelix.syncer.plain_workloads import (
    METADATA_STRINGS,
    SPEC_STRINGS,
    SPEC_UNREAD_STRINGS,
    PlainFields,
    checked_fields,
)

#: What a decode of text this module cannot take raises (msgspec's errors, and too deep).
_REFUSED = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def _strict(name: str, fields: list[tuple[str, Any] | tuple[str, Any, Any]]) -> Any:
    # An unknown key is refused, as plain_fields refuses it: the general path names it.
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True)


_Metadata = _strict(
    "_Metadata",
    [
        *[(name, str, "") for name in METADATA_STRINGS],
        ("labels", dict[str, str], {}),
        ("annotations", dict[str, str], {}),
    ],
)
_SPEC_STRINGS = (*SPEC_STRINGS, *SPEC_UNREAD_STRINGS)
_Spec = _strict(
    "_Spec",
    [
        *[(name, str, "") for name in _SPEC_STRINGS],
        ("ipNetworks", list[str], []),
        ("profiles", list[str], []),
    ],
)
_Endpoint = _strict(
    "_Endpoint",
    [("apiVersion", str), ("kind", str), ("metadata", _Metadata), ("spec", _Spec)],
)
_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Endpoint)


def typed_workload_fields(text: bytes) -> PlainFields | None:
    """``plain_fields(json.loads(text))`` (validating), or None where that gives None and
    wherever msgspec refuses the text (the caller then takes the pure path)."""
    if b'"WorkloadEndpoint"' not in text:
        return None  # none (or its kind escaped: the pure path decides)
    try:
        endpoint = _DECODER.decode(text)
    except _REFUSED:
        return None
    if endpoint.kind != "WorkloadEndpoint" or endpoint.apiVersion != CALICO_API_VERSION:
        return None
    metadata, spec = endpoint.metadata, endpoint.spec
    return checked_fields(
        metadata.name,
        metadata.namespace,
        labels=metadata.labels,
        annotations=metadata.annotations,
        names=(
            spec.orchestrator,
            spec.node,
            spec.endpoint,
            spec.workload,
            spec.pod,
            spec.serviceAccountName,
            spec.interfaceName,
            spec.mac,
        ),
        networks=spec.ipNetworks,
        profile_list=spec.profiles,
        validate=True,
    )
