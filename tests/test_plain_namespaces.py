"""The dry-run's direct path for namespaces agrees with decode + validate + convert."""

from __future__ import annotations

import copy
import json
import marshal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix import model
from pyfelix.resources.meta import load_document
from pyfelix.syncer.kubernetes import WATCHED, listed_document
from pyfelix.syncer.plain_namespaces import (
    plain_digest,
    plain_entry,
    plain_identity,
    plain_namespace_fields,
)
from pyfelix.syncer.processors import convert
from pyfelix.validation.kinds import ValidationContext, check_resource
from tests.compiled_reader import listed_form, listed_item

Doc = dict[str, Any]
ABSENT = object()

NAMES = ["tenant-1", "kube-system", "Upper", "", "a" * 63, "a" * 64, "-x", "a.b", 7, None]
LABELS = [
    ABSENT,
    {},
    {"team": "a", "example.com/tier": "gold"},
    {"bad key!": "x"},
    {"team": "bad value!"},
    {"team": 3},
    ["team"],
    None,
]
ANNOTATIONS = [ABSENT, {}, {"note": "anything at all"}, {"bad key!": "x"}, {"n": 1}, "x"]
EXTRA_METADATA = [
    ABSENT,
    ("uid", "0c0ffee0-0000-4000-8000-000000000001"),
    ("resourceVersion", "12"),
    ("creationTimestamp", "2026-12-01T10:00:00Z"),
    ("namespace", "default"),
    ("generation", 2),
    ("uid", 5),
]
SPECS = [ABSENT, {}, {"finalizers": ["kubernetes"]}, {"finalizers": "kubernetes"}, None, []]
STATUSES = [ABSENT, {}, {"phase": "Active"}, {"phase": 1}, {"conditions": []}]
TOPS = [ABSENT, ("apiVersion", "v2"), ("kind", "NamespaceList"), ("extra", 1)]


def document(name: object, *choices: object) -> Doc:
    labels, annotations, extra, spec, status, top = choices
    metadata: Doc = {"name": name}
    doc: Doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    for section, field, value in [
        (metadata, "labels", labels),
        (metadata, "annotations", annotations),
        (doc, "spec", spec),
        (doc, "status", status),
    ]:
        if value is not ABSENT:
            section[field] = copy.deepcopy(value)
    if isinstance(extra, tuple):
        metadata[extra[0]] = extra[1]
    if isinstance(top, tuple):
        doc[top[0]] = top[1]
    return doc


DOCUMENTS = st.builds(
    document,
    st.sampled_from(NAMES),
    st.sampled_from(LABELS),
    st.sampled_from(ANNOTATIONS),
    st.sampled_from(EXTRA_METADATA),
    st.sampled_from(SPECS),
    st.sampled_from(STATUSES),
    st.sampled_from(TOPS),
)


def general_path(doc: Doc) -> tuple[tuple[str, str, str], list[Any]] | None:
    """The identity and what decode + validate + convert give, or None where either refuses."""
    resource, _ = load_document(copy.deepcopy(doc), "<test>")
    if resource is None or check_resource(resource, ValidationContext()).problems:
        return None
    return (resource.KIND, resource.namespace, resource.name), list(convert(resource))


def assert_the_paths_agree(doc: Doc) -> None:
    """Where the direct path takes a document, the general path accepts it with the same
    identity and (key, value) pairs; the child's identity and its handed-on fields, marshalled
    as the pipe carries them, give the same."""
    entry = plain_entry(copy.deepcopy(doc))
    identity = plain_identity(copy.deepcopy(doc))
    fields = plain_digest(copy.deepcopy(doc))
    assert (entry is None) == (identity is None) == (fields is None)
    if entry is None:
        return
    assert fields is not None
    general = general_path(doc)
    assert general is not None, "the direct path took a document the general path refuses"
    assert entry[0] == general[0]
    assert identity == (general[0], None)
    assert list(entry[1]) == general[1]
    assert plain_entry(marshal.loads(marshal.dumps(fields))) == entry


def assert_the_listing_reader_agrees(doc: Doc, kind: str) -> None:
    """As an API server lists the object (no kind or apiVersion, its managedFields), the
    compiled reader of a listing's pages gives the fields the syncer's direct path gives
    the document it makes of it, with its resourceVersion; and the item parsed where that
    path declines it."""
    listed = listed_form(doc)
    read = listed_item(json.dumps(listed), kind)
    watched = next(w for w in WATCHED if w.kind == kind)
    expected = plain_digest(listed_document(watched, copy.deepcopy(listed)))
    if expected is None:
        assert read == listed
    else:
        assert read == (listed["metadata"].get("resourceVersion", ""), expected)


@settings(max_examples=2000, deadline=None)
@given(doc=DOCUMENTS)
def test_the_direct_path_gives_what_the_general_path_gives(doc: Doc) -> None:
    """Where the direct path takes a namespace, the general path accepts it and converts it
    to the same profile; where it does not, the general path decides. The fields the child
    hands on marshal and give the same, and the child's identity is the same; the reader of
    a listing's pages reads the namespace as the syncer's direct path does."""
    assert_the_paths_agree(doc)
    assert_the_listing_reader_agrees(doc, "Namespace")


def test_a_namespace_as_kubernetes_lists_it_takes_the_direct_path() -> None:
    """``kubectl get namespace -o json``'s bookkeeping (uid, finalizer, phase) is plain."""
    doc = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "prod",
            "uid": "0c0ffee0-0000-4000-8000-000000000001",
            "resourceVersion": "12",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"kubernetes.io/metadata.name": "prod", "team": "a"},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    entry = plain_entry(doc)
    assert entry is not None
    (labels_key, labels), (rules_key, rules) = entry[1]
    assert str(labels_key) == "/calico/v1/policy/profile/kns.prod/labels"
    assert str(rules_key) == "/calico/v1/policy/profile/kns.prod/rules"
    assert [rule.action for rule in rules.inbound_rules + rules.outbound_rules] == ["allow"] * 2  # type: ignore[union-attr]
    assert dict(labels.labels) == {  # type: ignore[union-attr]
        "pcns.kubernetes.io/metadata.name": "prod",
        "pcns.team": "a",
        "pcns.projectcalico.org/name": "prod",
    }
    assert entry == (general_path(doc)[0], tuple(general_path(doc)[1]))  # type: ignore[index]
    # As an API server lists it, the compiled reader of its listing reads it.
    read = listed_item(json.dumps(listed_form(doc)), "Namespace")
    assert read == ("12", plain_namespace_fields(doc))


def test_a_managed_namespace_is_left_to_the_general_path() -> None:
    """Fields the direct path does not know (managedFields, ownerReferences) go the long way."""
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "managedFields": []}}
    assert plain_namespace_fields(doc) is None
    assert general_path(doc) is not None


ACCOUNT_TOPS = [
    ABSENT,
    ("secrets", [{"name": "token"}]),
    ("secrets", {}),
    ("imagePullSecrets", [{"name": "registry"}]),
    ("automountServiceAccountToken", False),
    ("automountServiceAccountToken", "no"),
    ("apiVersion", "v2"),
    ("extra", 1),
    ("spec", {}),
]
ACCOUNT_NAMESPACES = ["prod", "", "Prod", "a" * 64, 7, None, ABSENT]


def account(name: object, namespace: object, *choices: object) -> Doc:
    labels, annotations, extra, top = choices
    metadata: Doc = {"name": name}
    doc: Doc = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}
    if namespace is not ABSENT:
        metadata["namespace"] = namespace
    for field, value in (("labels", labels), ("annotations", annotations)):
        if value is not ABSENT:
            metadata[field] = copy.deepcopy(value)
    if isinstance(extra, tuple) and extra[0] != "namespace":
        metadata[extra[0]] = extra[1]
    if isinstance(top, tuple):
        doc[top[0]] = copy.deepcopy(top[1])
    return doc


ACCOUNTS = st.builds(
    account,
    st.sampled_from(NAMES),
    st.sampled_from(ACCOUNT_NAMESPACES),
    st.sampled_from(LABELS),
    st.sampled_from(ANNOTATIONS),
    st.sampled_from(EXTRA_METADATA),
    st.sampled_from(ACCOUNT_TOPS),
)


@settings(max_examples=1500, deadline=None)
@given(doc=ACCOUNTS)
def test_a_service_account_s_direct_path_gives_what_the_general_path_gives(doc: Doc) -> None:
    """As for namespaces: where the direct path takes a service account, the general path
    accepts it and converts it to the same ksa. profile, and the child's fields give the
    same; and as for namespaces, the listing's reader agrees."""
    assert_the_paths_agree(doc)
    assert_the_listing_reader_agrees(doc, "ServiceAccount")


def test_a_service_account_as_kubernetes_lists_it_takes_the_direct_path() -> None:
    """``kubectl get serviceaccounts -o json`` gives metadata alone: the ksa. profile."""
    doc = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "web",
            "namespace": "prod",
            "uid": "0c0ffee0-0000-4000-8000-000000000003",
            "resourceVersion": "5088",
            "creationTimestamp": "2026-01-05T08:16:42Z",
            "labels": {"team": "a"},
        },
    }
    entry = plain_entry(doc)
    assert entry is not None
    assert entry[0] == ("ServiceAccount", "prod", "web")
    (labels_key, labels), (rules_key, rules) = entry[1]
    assert str(labels_key) == "/calico/v1/policy/profile/ksa.prod.web/labels"
    assert str(rules_key) == "/calico/v1/policy/profile/ksa.prod.web/rules"
    assert isinstance(rules, model.ProfileRules)
    assert rules.inbound_rules == rules.outbound_rules == ()
    assert isinstance(labels, model.ProfileLabels)
    assert dict(labels.labels) == {"pcsa.team": "a", "pcsa.projectcalico.org/name": "web"}
    assert general_path(doc) == (entry[0], list(entry[1]))
    read = listed_item(json.dumps(listed_form(doc)), "ServiceAccount")
    assert read == ("5088", plain_digest(doc))
