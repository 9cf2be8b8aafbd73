"""The direct decoder of plain WorkloadEndpoints agrees with decode + validate + convert."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix import model
from pyfelix.datastore.layout import list_prefix
from pyfelix.resources import WorkloadEndpoint
from pyfelix.resources.meta import load_document
from pyfelix.syncer import plain_workloads
from pyfelix.syncer.plain_namespaces import plain_entry
from pyfelix.syncer.plain_workloads import plain_workload
from pyfelix.syncer.plain_workloads_typed import typed_workload_fields
from pyfelix.syncer.processors import convert
from pyfelix.validation.kinds import ValidationContext, check_resource
from tests.compiled_reader import compiled_item

Doc = dict[str, Any]

BASE: Doc = {
    "apiVersion": "projectcalico.org/v3",
    "kind": "WorkloadEndpoint",
    "metadata": {
        "name": "node--a-k8s-web--1-eth0",
        "namespace": "prod",
        "labels": {"app": "web"},
    },
    "spec": {
        "orchestrator": "k8s",
        "node": "node-a",
        "pod": "web-1",
        "endpoint": "eth0",
        "ipNetworks": ["10.65.0.7/32"],
        "profiles": ["kns.prod"],
        "interfaceName": "cali0123456789a",
    },
}
ABSENT = object()
NAMES = ["node-a", "Node", "a" * 64, "pod.x", "-x", "k8s", "", "eth0", "a_b", None, 7]
#: Each field with the values it may take instead of the base document's (ABSENT: left out).
CHANGES: dict[str, list[Any]] = {
    "name": ["n-k8s-p-eth0", "web", "node--a-k8s-web--1", "a-b-c-d-e", "", 7, ABSENT],
    "namespace": [*NAMES, ABSENT],
    "labels": [
        {},
        {"bad key!": "v"},
        {"a/b": "c", "k": ""},
        {"projectcalico.org/namespace": "x"},
        {"pcsa.x": "y", "k": "-v"},
        {"k": 3},
        [],
        ABSENT,
    ],
    "annotations": [{}, {"a": "b"}, {"bad key!": "v"}, {"a": 1}, None],
    "uid": ["u-1", 5],
    "creationTimestamp": ["2026-12-01T10:00:00Z"],
    "generation": [2],
    "node": [*NAMES, ABSENT],
    "orchestrator": ["openstack", "", "K8S", None, ABSENT],
    "pod": [*NAMES, ABSENT],
    "workload": [*NAMES],
    "endpoint": ["", "Eth0", "eth1", ABSENT],
    "serviceAccountName": [*NAMES],
    "containerID": ["abc", 12],
    "interfaceName": ["cali1", "", "-bad", "x" * 16, "eth.0", None, ABSENT],
    "ipNetworks": [
        [],
        ["10.0.0.1"],
        ["10.0.0.1/32", "10.0.0.2/32"],
        ["10.0.0.0/24"],
        ["fd00::1/128"],
        ["300.1.1.1"],
        ["010.0.0.1"],
        [4],
        "10.0.0.1",
        ABSENT,
    ],
    "profiles": [[], ["ksa.a.b", "kns.a"], ["Bad!"], [""], [1], ABSENT],
    "mac": ["", "ee:ee:ee:ee:ee:ee", "EE-EE-EE-EE-EE-EE", "nope"],
    "ports": [[{"name": "http", "protocol": "TCP", "port": 80}]],
    "ipv4Gateway": ["10.0.0.254"],
    "ipNATs": [[]],
}
META = ("name", "namespace", "labels", "annotations", "uid", "creationTimestamp", "generation")
TOP = ["status", "spec", "metadata", "apiVersion"]
FIELDS = st.dictionaries(
    st.sampled_from(sorted(CHANGES)),
    st.integers(min_value=0, max_value=20),
    max_size=3,
)


def document(changes: dict[str, int], top: str | None = None) -> Doc:
    """The base document with each named field changed to one of its alternatives."""
    doc = copy.deepcopy(BASE)
    for field, index in changes.items():
        section = doc["metadata"] if field in META else doc["spec"]
        choices = CHANGES[field]
        value = choices[index % len(choices)]
        if value is ABSENT:
            section.pop(field, None)
        else:
            section[field] = value
    if top == "status":
        doc["status"] = {}
    elif top is not None:
        doc[top] = None if top != "apiVersion" else "projectcalico.org/v1"
    return doc


def general_path(doc: Doc) -> list[tuple[object, object]] | None:
    """What decode + validate + convert give, or None where either refuses the document."""
    resource, _ = load_document(copy.deepcopy(doc), "<test>", expected=WorkloadEndpoint)
    if resource is None or check_resource(resource, ValidationContext()).problems:
        return None
    return list(convert(resource))


@settings(max_examples=1500, deadline=None)
@given(changes=FIELDS, top=st.one_of(st.none(), st.sampled_from(TOP)))
def test_the_direct_path_gives_what_the_general_path_gives(
    changes: dict[str, int], top: str | None
) -> None:
    """Where the direct decoder answers, the general path accepts the document and converts it
    to the same key and value; where it does not, the general path decides (it may accept
    documents with other fields, such as named ports)."""
    doc = document(changes, top)
    direct = plain_workload(copy.deepcopy(doc))
    entry = plain_entry(copy.deepcopy(doc))
    identity = plain_workloads.plain_workload_identity(copy.deepcopy(doc))
    # The validating child's identity-only path takes what the direct path takes.
    assert (identity is None) == (entry is None) == (direct is None)
    if direct is None:
        return
    assert entry is not None
    assert identity == (entry[0], None)
    general = general_path(doc)
    assert general == [direct] == list(entry[1])
    assert [str(key) for key, _ in general] == [str(direct[0])]


@settings(max_examples=1500, deadline=None)
@given(changes=FIELDS, top=st.one_of(st.none(), st.sampled_from(TOP)))
def test_the_typed_decoder_of_the_text_takes_what_the_direct_path_takes(
    changes: dict[str, int], top: str | None
) -> None:
    """The dry-run's validating child reads an endpoint from its JSON text: it gives the
    fields the direct path gives of the parsed document, and none where that gives none.
    The compiled reader gives the same fields, or the endpoint's text back."""
    doc = document(changes, top)
    fields = plain_workloads.plain_fields(copy.deepcopy(doc))
    assert typed_workload_fields(json.dumps(doc).encode()) == fields
    for text in (json.dumps(doc), json.dumps(doc, indent=1, sort_keys=True)):
        assert compiled_item(text) in (fields, text.encode())


def test_the_typed_decoder_reads_odd_text_as_json_does_or_declines() -> None:
    """JSON text a serializer may write: a repeated key counts last (as the standard
    library's parser has it); an escaped kind, a lone surrogate, or a value msgspec refuses
    is left to the pure path, which decides as before; and a plain endpoint is read."""
    text = json.dumps(BASE)
    assert typed_workload_fields(text.encode()) is not None
    repeated = [
        text.replace('"node": "node-a"', '"node": "node-b", "node": "node-a"'),
        text.replace('"app": "web"', '"app": "db", "app": "web"'),
        text.replace('"pod": "web-1"', '"pod": "Bad_Name", "pod": "web-1"'),
    ]
    for odd in repeated:
        fields = plain_workloads.plain_fields(json.loads(odd))
        assert typed_workload_fields(odd.encode()) == fields is not None
    declined = [
        text.replace('"kind": "WorkloadEndpoint"', '"kind": "\\u0057orkloadEndpoint"'),
        text.replace('"node": "node-a"', '"node": "\\ud800"'),
        text.replace('"endpoint": "eth0"', '"endpoint": "eth0", "ports": NaN'),
    ]
    for odd in declined:
        assert typed_workload_fields(odd.encode()) is None
    assert plain_workloads.plain_fields(json.loads(declined[0])) is not None
    kind_last = json.dumps({**{k: v for k, v in BASE.items() if k != "kind"}, "kind": BASE["kind"]})
    for odd in [text, *repeated, *declined[:2], kind_last]:
        assert compiled_item(odd) in (plain_workloads.plain_fields(json.loads(odd)), odd.encode())
    assert compiled_item(text) == plain_workloads.plain_fields(BASE)


def test_a_cni_written_endpoint_takes_the_direct_path() -> None:
    """The documents Calico's CNI plugin writes are plain: the direct path is the one taken,
    and it gives the key, addresses and labels Felix matches on."""
    doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {
            "name": "node--a-k8s-web--1-eth0",
            "namespace": "prod",
            "uid": "0c0ffee0-0000-4000-8000-000000000001",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "resourceVersion": "12",
            "labels": {"app": "web", "projectcalico.org/namespace": "prod"},
        },
        "spec": {
            "orchestrator": "k8s",
            "node": "node-a",
            "containerID": "4a1b",
            "pod": "web-1",
            "endpoint": "eth0",
            "serviceAccountName": "default",
            "ipNetworks": ["10.65.0.7/32"],
            "profiles": ["kns.prod", "ksa.prod.default"],
            "interfaceName": "cali0123456789a",
            "mac": "ee:ee:ee:ee:ee:ee",
        },
    }
    direct = plain_workload(copy.deepcopy(doc))
    assert direct is not None
    assert general_path(doc) == [direct]
    key, value = direct
    assert str(key) == "/calico/v1/host/node-a/workload/k8s/prod%2fweb-1/endpoint/eth0"
    assert value is not None
    assert value.ipv4_nets == ("10.65.0.7/32",)  # type: ignore[attr-defined]
    assert dict(value.labels) == {  # type: ignore[attr-defined]
        "app": "web",
        "projectcalico.org/namespace": "prod",
        "projectcalico.org/orchestrator": "k8s",
        "projectcalico.org/serviceaccount": "default",
    }


def test_endpoints_naming_the_same_profiles_share_one_tuple() -> None:
    """Two pods of a namespace, through the direct path, hold one tuple of profile names."""
    a, b = (
        plain_workload(
            {
                "apiVersion": "projectcalico.org/v3",
                "kind": "WorkloadEndpoint",
                "metadata": {"name": f"node--a-k8s-web--{n}-eth0", "namespace": "prod"},
                "spec": {
                    "orchestrator": "k8s",
                    "node": "node-a",
                    "pod": f"web-{n}",
                    "endpoint": "eth0",
                    "ipNetworks": [f"10.65.0.{n}/32"],
                    "profiles": ["kns.prod", "ksa.prod.default"],
                    "interfaceName": f"cali012345678{n}",
                },
            }
        )
        for n in (1, 2)
    )
    assert a is not None
    assert b is not None
    first, second = a[1], b[1]
    assert isinstance(first, model.WorkloadEndpoint)
    assert isinstance(second, model.WorkloadEndpoint)
    assert first.profile_ids == ("kns.prod", "ksa.prod.default")
    assert first.profile_ids is second.profile_ids


def test_anything_else_is_left_to_the_general_path() -> None:
    """A named port, a wrong type or an invalid value: the direct path declines, so the general
    path's errors (naming the field) are the ones a user sees."""
    base: Doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {"name": "web", "namespace": "prod"},
        "spec": {"node": "n", "interfaceName": "cali1", "ipNetworks": ["10.0.0.1/32"]},
    }
    assert plain_workload(copy.deepcopy(base)) is not None
    for path, value in (
        ("spec.ports", [{"name": "http", "protocol": "TCP", "port": 80}]),
        ("spec.ipNetworks", ["10.0.0.0/24"]),
        ("spec.interfaceName", 5),
        ("metadata.generation", 3),
        ("metadata.labels", {"bad key!": "v"}),
    ):
        doc = copy.deepcopy(base)
        section, _, field = path.partition(".")
        doc[section][field] = value
        assert plain_workload(doc) is None, path


def test_the_kinds_names_written_here_are_its_classes() -> None:
    """The decoder names WorkloadEndpoint's kind and etcd prefix without importing its class."""
    assert plain_workloads._KIND == WorkloadEndpoint.KIND
    assert WorkloadEndpoint.API_VERSION == "projectcalico.org/v3"
    assert list_prefix(WorkloadEndpoint) == plain_workloads._ETCD_PREFIX
