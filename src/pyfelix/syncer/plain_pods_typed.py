"""A plain pod's fields decoded straight from its JSON text, without building the rest.

Parsing a dump's 3 KB of JSON a pod into dicts and lists takes longer than everything the
dry-run then does with it, and nine tenths of what it builds (images, probes, volumes,
conditions) Calico never reads. msgspec decodes the text into the few typed fields
``plain_pod_fields`` reads and steps over the unread ones, checking on the way what that
function checks by hand: each key is a known one, each read value has its Kubernetes type.
What it refuses (an unknown field, a wrong type, text its decoder does not take) goes to the
pure path, which decodes the text with the standard library and decides as before; so the
output never depends on msgspec, only the time does. tests/test_plain_pods.py holds the two
paths equal, document by generated document.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pyfelix.resources.pods import CONTAINER_UNREAD, POD_SPEC_UNREAD, POD_STATUS_UNREAD
from pyfelix.syncer.plain_pods import (
    METADATA_STRINGS,
    SPECIAL_ANNOTATIONS,
    PodFields,
    checked_pod_fields,
    checked_port,
)

#: What a decode of text this module cannot take raises (msgspec's errors, and too deep).
_REFUSED = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def _unread(names: frozenset[str]) -> list[tuple[str, type, Any]]:
    """Known fields nobody reads: stepped over as raw text (any JSON value), never built."""
    return [(name, msgspec.Raw, None) for name in sorted(names)]


def _strict(name: str, fields: list[tuple[str, Any] | tuple[str, Any, Any]]) -> Any:
    # An unknown key is refused, as plain_pod_fields refuses it: the general path names it.
    return msgspec.defstruct(name, fields, forbid_unknown_fields=True)


_Port = _strict("_Port", [("containerPort", int), ("name", str, ""), ("protocol", str, "")])
_Container = _strict(
    "_Container",
    [("name", str, ""), ("ports", list[_Port], []), *_unread(CONTAINER_UNREAD)],  # type: ignore[valid-type]
)
_Metadata = _strict(
    "_Metadata",
    [
        *[(name, str, "") for name in METADATA_STRINGS],
        ("labels", dict[str, str], {}),
        ("annotations", dict[str, str], {}),
        # An owner's references are objects of scalars (as plain_pod_fields asks).
        ("ownerReferences", list[dict[str, str | int | float | bool | None]], []),
        ("generation", int, 0),
    ],
)
_Spec = _strict(
    "_Spec",
    [
        ("nodeName", str, ""),
        ("hostNetwork", bool, False),
        ("serviceAccountName", str, ""),
        ("containers", list[_Container], []),  # type: ignore[valid-type]
        ("initContainers", list[_Container], []),  # type: ignore[valid-type]
        *_unread(POD_SPEC_UNREAD),
    ],
)
_Address = _strict("_Address", [("ip", str)])
_Status = _strict(
    "_Status",
    [
        ("phase", str, ""),
        ("podIP", str, ""),
        ("podIPs", list[_Address], []),  # type: ignore[valid-type]
        *_unread(POD_STATUS_UNREAD),
    ],
)
_Pod = _strict(
    "_Pod",
    [
        ("apiVersion", str),
        ("kind", str),
        ("metadata", _Metadata),
        ("spec", _Spec),
        ("status", _Status, msgspec.field(default_factory=_Status)),
    ],
)
_DECODER: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Pod)


def typed_pod_fields(text: bytes) -> PodFields | None:
    """``plain_pod_fields(json.loads(text))`` (validating), or None where that gives None
    and wherever msgspec refuses the text (the caller then takes the pure path)."""
    if b'"Pod"' not in text:
        return None  # no pod (or its kind escaped: the pure path decides)
    try:
        pod = _DECODER.decode(text)
    except _REFUSED:
        return None
    if pod.kind != "Pod" or pod.apiVersion != "v1":
        return None
    metadata, spec, status = pod.metadata, pod.spec, pod.status
    if spec.hostNetwork or not spec.nodeName:
        return None  # no endpoint
    labels, annotations = metadata.labels, metadata.annotations
    if not annotations.keys().isdisjoint(SPECIAL_ANNOTATIONS):
        return None
    named = []
    for container in (*spec.containers, *spec.initContainers):
        for port in container.ports:
            checked = checked_port(port.containerPort, port.name, port.protocol, True)
            if checked is None:
                return None
            if port.name:
                named.append(checked)
    return checked_pod_fields(
        metadata.name,
        metadata.namespace,
        labels,
        annotations,
        node=spec.nodeName,
        account=spec.serviceAccountName,
        phase=status.phase,
        pod_ip=status.podIP,
        pod_ips=[address.ip for address in status.podIPs],
        ports=tuple(named),
        validate=True,
    )
