"""Namespaces and service accounts straight from their document to the profile Kubernetes'
conversion makes of them, skipping the v3 object; and the dry-run's direct path, which takes
plain endpoints (``plain_workloads``), plain pods (``plain_pods``), plain namespaces and plain
service accounts.

A cluster of isolated tenants has a namespace for every few pods, and the general path
decodes each field by field (10 us) before converting it. Nearly every namespace is *plain*:
a name, labels, annotations and the bookkeeping Kubernetes adds (uid, resourceVersion,
creationTimestamp, the ``kubernetes`` finalizer, phase Active), each a string, each valid.
For such a document :func:`plain_namespace_fields` gives its name and labels, checked as
``check_metadata`` checks them; for anything else None, and the general path names every
problem. The profile's values record no ``origin``: only the validation filter reads it, and
the dry-run validates beforehand. A service account is plainer still (a name and labels),
and as many. tests/test_plain_namespaces.py checks both paths agree for both kinds.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from pyfelix.resources.loader import Identity, TextReader
from pyfelix.syncer.plain_pods import (
    PodFields,
    is_pod_fields,
    plain_pod_fields,
    pod_entry,
    pod_identity,
)
from pyfelix.syncer.plain_policies import (
    PolicyFields,
    is_policy_fields,
    policy_entry,
    policy_identity,
)
from pyfelix.syncer.plain_workloads import (
    PlainFields,
    from_fields,
    plain_fields,
    plain_workload_identity,
)
from pyfelix.syncer.processors import KV, namespace_kvs, service_account_kvs
from pyfelix.validation.common import good_annotations, good_labels, name_accepted
from pyfelix.validation.kinds import plain_metadata_valid

_KIND = "Namespace"
_TOP_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_METADATA_KEYS = frozenset(
    {"name", "uid", "resourceVersion", "creationTimestamp", "labels", "annotations"}
)

#: A plain namespace's fields, checked: the kind (what tells them from an endpoint's), its
#: name and its labels. A tuple of strings and a dict: it marshals, for the dry-run's child.
NamespaceFields = tuple[str, str, dict[str, str]]


def plain_namespace_fields(
    document: dict[str, Any], *, validate: bool = True
) -> NamespaceFields | None:
    """A plain Namespace document's kind, name and labels, checked, or None if it is not one
    (another kind, another field, a type or value the general path would report)."""
    if document.get("kind") != _KIND or document.get("apiVersion") != "v1":
        return None
    if not document.keys() <= _TOP_KEYS:
        return None
    metadata = document.get("metadata")
    if type(metadata) is not dict or not metadata.keys() <= _METADATA_KEYS:
        return None
    spec, status = document.get("spec", {}), document.get("status", {})
    if type(spec) is not dict or type(status) is not dict:
        return None
    if not (spec.keys() <= {"finalizers"} and status.keys() <= {"phase"}):
        return None
    finalizers = spec.get("finalizers", [])
    labels, annotations = metadata.get("labels", {}), metadata.get("annotations", {})
    if type(finalizers) is not list or type(labels) is not dict or type(annotations) is not dict:
        return None
    name = metadata.get("name", "")
    try:  # every value a string: one join checks them all, in C
        "".join(
            [
                *(name, metadata.get("uid", ""), metadata.get("resourceVersion", "")),
                *(metadata.get("creationTimestamp", ""), status.get("phase", "")),
                *finalizers,
                *labels,
                *labels.values(),
                *annotations,
                *annotations.values(),
            ]
        )
    except TypeError:
        return None
    if validate and not (
        name_accepted(name, label=True)
        and good_labels(labels)
        and (not annotations or good_annotations(annotations))
    ):
        return None
    return (_KIND, sys.intern(name), labels)


_ACCOUNT = "ServiceAccount"
_ACCOUNT_TOP_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "secrets",
        "imagePullSecrets",
        "automountServiceAccountToken",
    }
)
_ACCOUNT_METADATA_KEYS = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels", "annotations"}
)
#: A plain service account's fields, checked: the kind, its namespace, name and labels.
AccountFields = tuple[str, str, str, dict[str, str]]


def plain_account_fields(
    document: dict[str, Any], *, validate: bool = True
) -> AccountFields | None:
    """A plain ServiceAccount document's kind, namespace, name and labels, checked, or None
    if it is not one (another kind, another field, a type or value the general path would
    report)."""
    if document.get("kind") != _ACCOUNT or document.get("apiVersion") != "v1":
        return None
    if not document.keys() <= _ACCOUNT_TOP_KEYS:
        return None
    metadata = document.get("metadata")
    if type(metadata) is not dict or not metadata.keys() <= _ACCOUNT_METADATA_KEYS:
        return None
    if type(document.get("secrets", [])) is not list:
        return None
    if type(document.get("imagePullSecrets", [])) is not list:
        return None
    if type(document.get("automountServiceAccountToken", False)) is not bool:
        return None
    labels, annotations = metadata.get("labels", {}), metadata.get("annotations", {})
    if type(labels) is not dict or type(annotations) is not dict:
        return None
    name, namespace = metadata.get("name", ""), metadata.get("namespace", "")
    try:  # every value a string: one join checks them all, in C
        "".join(
            [
                *(name, namespace, metadata.get("uid", "")),
                *(metadata.get("resourceVersion", ""), metadata.get("creationTimestamp", "")),
                *labels,
                *labels.values(),
                *annotations,
                *annotations.values(),
            ]
        )
    except TypeError:
        return None
    if not namespace:
        return None  # the general path decides where it belongs
    if validate and not plain_metadata_valid(name, namespace, labels, annotations):
        return None
    return (_ACCOUNT, sys.intern(namespace), sys.intern(name), labels)


def account_entry(fields: AccountFields) -> tuple[Identity, tuple[KV, ...]]:
    """The identity and the model (key, value) pairs of a plain service account's checked
    fields: its profile's labels and (no) rules."""
    _, namespace, name, labels = fields
    return (_ACCOUNT, namespace, name), tuple(service_account_kvs(namespace, name, labels, None))


def namespace_entry(fields: NamespaceFields) -> tuple[Identity, tuple[KV, ...]]:
    """The identity (Kind, namespace, name) and the model (key, value) pairs of a plain
    namespace's checked fields: its profile's labels and rules."""
    _, name, labels = fields
    return (_KIND, "", name), tuple(namespace_kvs(name, labels, None))


# ---------------------------------------------------------------- the dry-run's direct path


Fields = PlainFields | NamespaceFields | AccountFields | PodFields | PolicyFields


def plain_digest(document: dict[str, Any], *, validate: bool = True) -> Fields | None:
    """A plain endpoint's, pod's, namespace's or service account's fields, checked (what the
    dry-run's child hands on in their document's place), or None to leave the document as
    it is. ``validate=False`` trusts the values (a child checks the same files)."""
    kind = document.get("kind")
    if kind == "WorkloadEndpoint":
        return plain_fields(document, validate=validate)
    if kind == "Pod":
        return plain_pod_fields(document, validate=validate)
    if kind == _KIND:
        return plain_namespace_fields(document, validate=validate)
    if kind == _ACCOUNT:
        return plain_account_fields(document, validate=validate)
    return None


def plain_text_digest() -> TextReader | None:
    """``plain_digest``'s counterpart for a document's JSON text (a pod's, the bulk of a
    dump, or a WorkloadEndpoint's, each read by its typed decoder), for the dry-run's
    validating child: imported there, so that a load without one never imports the
    decoders; with the compiled reader of whole files of pods where it is built. None without
    msgspec: documents are then parsed whole, with the same result."""
    try:
        from pyfelix.syncer.plain_pods_typed import typed_pod_fields  # noqa: PLC0415
        from pyfelix.syncer.plain_workloads_typed import (  # noqa: PLC0415
            typed_workload_fields,
        )
    except ImportError:
        return None

    def typed_fields(text: bytes) -> Fields | None:
        return typed_pod_fields(text) or typed_workload_fields(text)

    from pyfelix.syncer.plain_native import native_splitter  # noqa: PLC0415

    return TextReader(('"Pod"', '"WorkloadEndpoint"'), typed_fields, native_splitter())


def plain_entry(
    document: dict[str, Any] | Fields, *, validate: bool = True
) -> tuple[Identity, tuple[KV, ...]] | None:
    """The dry-run's direct decoder: a plain endpoint's, pod's, namespace's or service
    account's identity and all it stands for in the model, from its document or from the
    fields ``plain_digest`` gave (or a policy's, from those ``policy_fields`` gave).
    ``validate=False`` trusts the values (a child checks the same files)."""
    fields = document if isinstance(document, tuple) else plain_digest(document, validate=validate)
    if fields is None:
        return None
    if is_policy_fields(fields):
        return policy_entry(cast("PolicyFields", fields))
    if len(fields) == 3:
        return namespace_entry(fields)
    if len(fields) == 4:
        return account_entry(fields)
    if is_pod_fields(fields):
        identity, kv = pod_entry(cast("PodFields", fields))
    else:
        identity, kv = from_fields(cast("PlainFields", fields))
    return identity, (kv,)


def plain_identity(document: dict[str, Any] | Fields) -> tuple[Identity, None] | None:
    """``plain_entry``'s identity without the model values, for the load that only checks
    (the dry-run's validating child): a document's fields are checked in full."""
    fields = document if isinstance(document, tuple) else plain_digest(document)
    if fields is None:
        return None
    if is_policy_fields(fields):
        return policy_identity(cast("PolicyFields", fields)), None
    if len(fields) == 3:
        return (_KIND, "", fields[1]), None
    if len(fields) == 4:
        return (_ACCOUNT, fields[1], fields[2]), None
    if is_pod_fields(fields):
        return pod_identity(cast("PodFields", fields)), None
    return plain_workload_identity(cast("PlainFields", fields))
