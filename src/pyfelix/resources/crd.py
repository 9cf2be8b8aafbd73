"""Calico's kinds as ``crd.projectcalico.org/v1`` custom resources, read as their v3 twins.

On the Kubernetes API datastore without Calico's API server, Calico's objects are custom
resources of group crd.projectcalico.org, and ``kubectl get globalnetworkpolicies -o yaml``
prints them so. Their specs are the v3 specs (libcalico-go decodes them into the v3 types);
what differs is the metadata, which Calico's client keeps in the ``projectcalico.org/metadata``
annotation, and one field of BlockAffinity. ``v3_document`` turns such a document into the v3
document the loader then decodes, as libcalico-go's ``ConvertK8sResourceToCalicoResource``
does:

- the annotation's labels and annotations are laid over the object's own, and the annotation
  itself is dropped;
- the name is the object's, except that a policy of the default tier written by an older
  client (``default.<name>``, with an annotation that names nothing) loses that prefix;
- the uid is the object's with the bits of each byte reversed (Calico never reuses the
  custom resource's uid as the v3 object's);
- BlockAffinity's ``deleted`` is a string there (``"false"``), read as Go's ParseBool reads it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from pyfelix.errors import FieldProblem
from pyfelix.resources.meta import CALICO_API_VERSION, CRD_API_VERSION

METADATA_ANNOTATION = "projectcalico.org/metadata"

#: The kinds pyfelix reads that Calico keeps as custom resources (libcalico-go/config/crd).
CRD_KINDS = frozenset(
    {
        "BGPConfiguration",
        "BlockAffinity",
        "ClusterInformation",
        "FelixConfiguration",
        "GlobalNetworkPolicy",
        "GlobalNetworkSet",
        "HostEndpoint",
        "IPAMBlock",
        "IPPool",
        "NetworkPolicy",
        "NetworkSet",
        "StagedGlobalNetworkPolicy",
        "StagedKubernetesNetworkPolicy",
        "StagedNetworkPolicy",
        "Tier",
    }
)
_POLICY_KINDS = frozenset(
    {"GlobalNetworkPolicy", "NetworkPolicy", "StagedGlobalNetworkPolicy", "StagedNetworkPolicy"}
)
#: What Go's strconv.ParseBool reads as true, and as false.
GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def is_crd(doc: Mapping[str, Any]) -> bool:
    return doc.get("apiVersion") == CRD_API_VERSION and doc.get("kind") in CRD_KINDS


def v3_document(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[FieldProblem]]:
    """The v3 document a custom resource stands for, and what in it cannot be converted
    (each problem makes the resource invalid)."""
    problems: list[FieldProblem] = []
    out = {**doc, "apiVersion": CALICO_API_VERSION}
    metadata = doc.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = _metadata(str(doc.get("kind")), metadata, doc.get("spec"), problems)
    if doc.get("kind") == "BlockAffinity" and isinstance(doc.get("spec"), Mapping):
        spec = dict(doc["spec"])
        deleted = spec.get("deleted")
        if isinstance(deleted, str):
            if deleted in GO_TRUE | _FALSE:
                spec["deleted"] = deleted in GO_TRUE
            elif deleted == "":
                spec.pop("deleted")
            else:
                problems.append(FieldProblem("spec.deleted", f"not a boolean: {deleted!r}"))
                spec.pop("deleted")
        out["spec"] = spec
    return out, problems


def _metadata(
    kind: str, metadata: Mapping[str, Any], spec: Any, problems: list[FieldProblem]
) -> dict[str, Any]:
    out = dict(metadata)
    uid = metadata.get("uid")
    if isinstance(uid, str) and uid:
        converted = converted_uid(uid)
        if converted is None:
            problems.append(FieldProblem("metadata.uid", f"not a UUID: {uid!r}"))
        else:
            out["uid"] = converted
    annotations = metadata.get("annotations")
    if not isinstance(annotations, Mapping) or METADATA_ANNOTATION not in annotations:
        return out
    try:
        stored = json.loads(annotations[METADATA_ANNOTATION])
    except (TypeError, ValueError):
        problems.append(
            FieldProblem(f"metadata.annotations.{METADATA_ANNOTATION}", "not a JSON object")
        )
        return out
    if not isinstance(stored, Mapping):
        problems.append(
            FieldProblem(f"metadata.annotations.{METADATA_ANNOTATION}", "not a JSON object")
        )
        return out
    rest = {k: v for k, v in annotations.items() if k != METADATA_ANNOTATION}
    labels = dict(metadata.get("labels") or {})
    for field in ("labels", "annotations"):
        if not isinstance(stored.get(field) or {}, Mapping):
            where = f"metadata.annotations.{METADATA_ANNOTATION}"
            problems.append(FieldProblem(where, f"its {field} are not a mapping"))
            return out
    labels.update(stored.get("labels") or {})
    rest.update(stored.get("annotations") or {})
    out["labels"], out["annotations"] = labels, rest
    for field in ("labels", "annotations"):
        if not out[field]:
            del out[field]
    name = stored.get("name")
    if not name and kind in _POLICY_KINDS:
        tier = spec.get("tier", "") if isinstance(spec, Mapping) else ""
        name = _policy_name(str(metadata.get("name", "")), tier)
    if name:
        out["name"] = name
    if stored.get("creationTimestamp"):  # else the object's own
        out["creationTimestamp"] = stored["creationTimestamp"]
    return out


def crd_document(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A v3 document as the custom resource Calico's client writes on the Kubernetes API
    datastore (``ConvertCalicoResourceToK8sResource``): its labels and annotations in the
    metadata annotation (and its labels on the object too), no uid or creation time (the API
    server's own), the resourceVersion kept for an update, BlockAffinity's ``deleted`` as
    text. ``v3_document`` reads it back as the same v3 document."""
    metadata = manifest.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    stored = {"labels": labels, "annotations": annotations}
    out_meta: dict[str, Any] = {
        "name": metadata["name"],
        "annotations": {METADATA_ANNOTATION: json.dumps(stored, sort_keys=True)},
    }
    for key in ("namespace", "resourceVersion"):
        if metadata.get(key):
            out_meta[key] = metadata[key]
    if labels:
        out_meta["labels"] = dict(labels)
    spec = dict(manifest.get("spec") or {})
    if manifest.get("kind") == "BlockAffinity" and "deleted" in spec:
        spec["deleted"] = "true" if spec["deleted"] else "false"
    return {
        "apiVersion": CRD_API_VERSION,
        "kind": manifest["kind"],
        "metadata": out_meta,
        "spec": spec,
    }


def _policy_name(name: str, tier: Any) -> str:
    """An older client's ``default.<name>`` for a policy of the default tier is ``<name>``."""
    if tier in ("default", ""):
        return name.removeprefix("default.")
    return name


_BIT_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def converted_uid(uid: str) -> str | None:
    """The v3 uid Calico derives from a custom resource's: the bits of each of its bytes
    reversed, but for the version and variant bytes (6 and 8); None for a uid that is no
    UUID (Calico then refuses the object)."""
    try:
        raw = uuid.UUID(uid).bytes
    except ValueError:
        return None
    converted = bytearray(raw.translate(_BIT_REVERSED))
    converted[6], converted[8] = raw[6], raw[8]
    return str(uuid.UUID(bytes=bytes(converted)))
