"""The direct path of plain Pods agrees with decode + validate + convert, document by
generated document, the documents shaped as a cluster's dump holds them."""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import json
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyfelix import model, values
from pyfelix.resources.meta import load_document
from pyfelix.resources.pods import Pod
from pyfelix.syncer import plain_native, plain_pods
from pyfelix.syncer.kubernetes import WATCHED, listed_document
from pyfelix.syncer.plain_namespaces import plain_digest, plain_entry, plain_identity
from pyfelix.syncer.plain_pods import plain_pod_fields, pod_entry
from pyfelix.syncer.plain_pods_typed import typed_pod_fields
from pyfelix.syncer.processors import convert
from pyfelix.validation.kinds import ValidationContext, check_resource
from tests.compiled_reader import (
    MANAGED_FIELDS,
    SPLIT,
    compiled_item,
    listed_form,
    listed_item,
)

Doc = dict[str, Any]

#: A pod as ``kubectl get pods -o json`` prints it: a Deployment's, scheduled and running.
BASE: Doc = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "annotations": {
            "cni.projectcalico.org/containerID": "e63c83fa",
            "cni.projectcalico.org/podIP": "10.0.15.131/32",
            "cni.projectcalico.org/podIPs": "10.0.15.131/32",
        },
        "creationTimestamp": "2026-01-05T09:23:21Z",
        "generateName": "web-7d4b9c-",
        "generation": 1,
        "labels": {"app": "web", "pod-template-hash": "7d4b9c"},
        "name": "web-7d4b9c-x2x8q",
        "namespace": "prod",
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": "web-7d4b9c",
                "uid": "0c0ffee0-0000-4000-8000-000000000002",
            }
        ],
        "resourceVersion": "21035",
        "uid": "2dbf9a06-c84b-4c26-a2b0-4133f3002f17",
    },
    "spec": {
        "containers": [
            {
                "image": "registry.example/app:1.0",
                "name": "app",
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "resources": {"requests": {"cpu": "50m"}},
                "volumeMounts": [{"mountPath": "/var/run/secrets", "name": "token"}],
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "nodeName": "node-a",
        "restartPolicy": "Always",
        "serviceAccount": "web",
        "serviceAccountName": "web",
        "tolerations": [{"effect": "NoExecute", "operator": "Exists"}],
        "volumes": [{"name": "token", "projected": {"sources": []}}],
    },
    "status": {
        "conditions": [{"lastProbeTime": None, "status": "True", "type": "Ready"}],
        "hostIP": "172.16.0.41",
        "phase": "Running",
        "podIP": "10.0.15.131",
        "podIPs": [{"ip": "10.0.15.131"}],
        "qosClass": "Burstable",
    },
}
ABSENT = object()


def _nested(depth: int) -> object:
    """A value nested ``depth`` levels deep (past the general decoder's free-form depth)."""
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    return value


PODS = next(w for w in WATCHED if w.kind == "Pod")
NAMES = ["node-a", "Node", "a" * 64, "pod.x", "-x", "", None, 7]
PORT = {"containerPort": 8080, "protocol": "TCP", "name": "http"}
#: Each field (section, name) with the values it may take instead of the base document's.
CHANGES: dict[tuple[str, str], list[Any]] = {
    ("metadata", "name"): ["web", "Web", "a" * 254, "", 7, ABSENT],
    ("metadata", "namespace"): [*NAMES, ABSENT],
    ("metadata", "labels"): [
        {},
        {"bad key!": "v"},
        {"a/b": "c", "k": ""},
        {"projectcalico.org/namespace": "x"},
        {"projectcalico.org/serviceaccount": "x", "projectcalico.org/orchestrator": "y"},
        {"pcsa.x": "y", "k": "-v"},
        {"k": 3},
        {"k": True},
        {"k": None},
        [],
        None,
        ABSENT,
    ],
    ("metadata", "annotations"): [
        {},
        {"bad key!": "v"},
        {"a": 1},
        {"cni.projectcalico.org/floatingIPs": '["1.2.3.4"]'},
        {"cni.projectcalico.org/allowedSourcePrefixes": '["10.1.0.0/16"]'},
        {"kubernetes.io/ingress-bandwidth": "10M"},
        {"cni.projectcalico.org/podIPs": "10.0.0.1/32,fd00::1/128"},
        {"cni.projectcalico.org/podIP": "10.0.0.0/24"},
        {"cni.projectcalico.org/podIP": "nope"},
        None,
        ABSENT,
    ],
    ("metadata", "ownerReferences"): [
        [],
        {},
        None,
        ABSENT,
        [{"kind": "Job", "name": "j", "controller": True, "uid": "u", "n": 1.5, "x": None}],
        [{"kind": {"nested": 1}}],
        [{"kind": [1]}],
        ["ReplicaSet"],
        [[]],
        [{"a": _nested(40)}],
    ],
    ("metadata", "uid"): ["u-1", 5],
    ("metadata", "deletionTimestamp"): ["2026-01-05T09:30:00Z"],
    ("metadata", "generation"): [2, 0, -1, 2**70, 1.0, True, "2", None, ABSENT],
    ("metadata", "selfLink"): ["/api/v1/x"],
    ("metadata", "finalizers"): [["x"]],
    ("spec", "nodeName"): [*NAMES, ABSENT],
    ("spec", "hostNetwork"): [True, False, None, "yes", 0],
    ("spec", "serviceAccountName"): [*NAMES, "s" * 63, ABSENT],
    ("spec", "containers"): [
        [],
        [{"name": "a"}],
        [{"name": "a", "ports": []}],
        [{"name": "a", "ports": [{"containerPort": 53, "protocol": "UDP", "name": "dns"}]}],
        [{"name": "a", "ports": [{"containerPort": 80}]}],
        [{"name": "a", "ports": [{"containerPort": 80, "name": "Bad_Name"}]}],
        [{"name": "a", "ports": [{"containerPort": 80, "name": "web", "protocol": "ICMP"}]}],
        [{"name": "a", "ports": [{"containerPort": 0, "name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": 70000, "name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": "80", "name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": 80.0, "name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": True, "name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": 2**70, "name": "web"}]}],
        [{"name": "a", "ports": [{"name": "web"}]}],
        [{"name": "a", "ports": [{"containerPort": 80, "name": "web", "hostPort": 8080}]}],
        [{"name": "a", "ports": [{"containerPort": 80, "protocol": ["TCP"]}]}],
        [{"name": "a", "ports": [PORT, {"containerPort": 9090, "name": "metrics"}]}],
        [{"name": "a", "unknownField": 1}],
        [{"name": 3}],
        "app",
    ],
    ("spec", "initContainers"): [
        [{"name": "init", "ports": [{"containerPort": 9000, "name": "init-web"}]}],
        [],
    ],
    ("spec", "priority"): [0],
    ("spec", "madeUp"): [1],
    ("status", "phase"): ["Pending", "Succeeded", "Failed", "Completed", "", 3, ABSENT],
    ("status", "podIP"): ["10.0.0.9", "", "fd00::9", "10.0.0.0/24", "bad", None, ABSENT],
    ("status", "podIPs"): [
        [],
        [{"ip": "10.0.0.9"}, {"ip": "fd00::9"}],
        [{"ip": "fd00::9"}],
        [{"ip": "10.0.15.131/32"}],
        [{"ip": "10.0.0.0/24"}],
        [{"ip": ""}],
        [{"ip": "fe80::1%eth0"}],
        [{"ip": 4}],
        [{"ip": "10.0.0.1", "extra": 1}],
        ["10.0.0.1"],
        None,
        ABSENT,
    ],
    ("status", "hostIPs"): [[{"ip": "172.16.0.41"}]],
    ("status", "wrongField"): [1],
}
FIELDS = st.dictionaries(
    st.sampled_from(sorted(CHANGES)), st.integers(min_value=0, max_value=20), max_size=4
)
TOP = ["status", "spec", "metadata", "apiVersion", "kind", "extra"]


def document(changes: dict[tuple[str, str], int], top: str | None = None) -> Doc:
    """The base pod with each named field changed to one of its alternatives."""
    doc = copy.deepcopy(BASE)
    for (section, field), index in changes.items():
        choices = CHANGES[(section, field)]
        value = choices[index % len(choices)]
        if value is ABSENT:
            doc[section].pop(field, None)
        else:
            doc[section][field] = copy.deepcopy(value)
    if top == "apiVersion":
        doc["apiVersion"] = "v2"
    elif top == "kind":
        doc["kind"] = "WorkloadEndpoint"
    elif top == "extra":
        doc["extra"] = {}
    elif top is not None:
        doc[top] = None
    return doc


def general_path(doc: Doc) -> list[tuple[object, object]] | None:
    """What decode + validate + convert give, or None where either refuses the document."""
    if doc.get("kind") != "Pod":
        return None
    resource, _ = load_document(copy.deepcopy(doc), "<test>", expected=Pod)
    if resource is None or check_resource(resource, ValidationContext()).problems:
        return None
    return list(convert(resource))


@settings(max_examples=2000, deadline=None)
@given(changes=FIELDS, top=st.one_of(st.none(), st.sampled_from(TOP)))
def test_the_direct_path_gives_what_the_general_path_gives(
    changes: dict[tuple[str, str], int], top: str | None
) -> None:
    """Where the direct path answers, the general path accepts the pod and converts it to the
    same key and value (origin aside: the direct path records none); where it does not, the
    general path decides. The fields the dry-run's child hands on give the same entry as the
    document, and the child's identity-only check takes what the direct path takes. The
    typed decoder of the pod's JSON text gives the same fields, or none where it gives none."""
    doc = document(changes, top)
    fields = plain_pod_fields(copy.deepcopy(doc))
    entry = plain_entry(copy.deepcopy(doc))
    identity = plain_identity(copy.deepcopy(doc))
    assert (fields is None) == (entry is None) == (identity is None)
    # The typed decoder of the pod's text takes exactly what the direct path takes; the
    # compiled reader gives the same fields, or the pod's text back.
    assert typed_pod_fields(json.dumps(doc).encode()) == fields
    for text in (json.dumps(doc), json.dumps(doc, indent=1, sort_keys=True)):
        assert compiled_item(text) in (fields, text.encode())
    # As an API server lists it: no kind or apiVersion, managedFields; the reader of a
    # listing's pages gives the fields the syncer's direct path gives, or the item parsed.
    listed = listed_form(doc)
    read = listed_item(json.dumps(listed))
    if read != listed:
        expected = plain_pod_fields(listed_document(PODS, listed))
        assert read == (listed["metadata"]["resourceVersion"], expected)
        assert expected is not None
    if fields is None:
        return
    assert entry is not None
    assert plain_digest(copy.deepcopy(doc)) == fields
    assert plain_entry(fields) == entry
    assert plain_identity(fields) == identity == (entry[0], None)
    assert entry[0] == ("Pod", doc["metadata"]["namespace"], doc["metadata"]["name"])
    general = general_path(doc)
    assert general is not None
    assert [(key, _without_origin(value)) for key, value in general] == list(entry[1])
    assert [str(key) for key, _ in general] == [str(key) for key, _ in entry[1]]


def _without_origin(value: object) -> object:
    return None if value is None else attrs.evolve(value, origin=None)  # type: ignore[misc]


def test_a_dumped_pod_takes_the_direct_path() -> None:
    """The pod a cluster's dump holds (an owner, containers, volumes, status) is plain: the
    direct path gives Felix's key, the veth Calico's CNI plugin names, the addresses from
    status.podIPs, the named port and the labels Felix matches on."""
    fields = plain_pod_fields(copy.deepcopy(BASE))
    assert fields is not None
    (_, (key, value)) = pod_entry(fields)
    assert str(key) == "/calico/v1/host/node-a/workload/k8s/prod%2fweb-7d4b9c-x2x8q/endpoint/eth0"
    assert isinstance(value, model.WorkloadEndpoint)
    assert value.name == "cali" + hashlib.sha1(b"prod.web-7d4b9c-x2x8q").hexdigest()[:11]
    assert value.ipv4_nets == ("10.0.15.131/32",)
    assert value.profile_ids == ("kns.prod", "ksa.prod.web")
    assert [(p.name, p.protocol, p.port) for p in value.ports] == [("http", "tcp", 8080)]
    assert dict(value.labels) == {
        "app": "web",
        "pod-template-hash": "7d4b9c",
        "projectcalico.org/namespace": "prod",
        "projectcalico.org/orchestrator": "k8s",
        "projectcalico.org/serviceaccount": "web",
    }
    assert general_path(BASE) == [(key, _with_origin(value))]


def _with_origin(value: object) -> object:
    resource, _ = load_document(copy.deepcopy(BASE), "<test>", expected=Pod)
    return attrs.evolve(value, origin=resource)  # type: ignore[misc]


def test_the_pod_an_api_server_lists_is_read_by_the_compiled_reader() -> None:
    """The dumped pod as a listing holds it (no kind or apiVersion, its managedFields): the
    reader of a listing's pages reads it, its resourceVersion beside the fields the direct
    path gives it; with a kind other than Pod, it leaves it to the Python path."""
    listed = {k: v for k, v in copy.deepcopy(BASE).items() if k not in ("apiVersion", "kind")}
    listed["metadata"]["managedFields"] = MANAGED_FIELDS
    fields = plain_pod_fields(listed_document(PODS, listed))
    assert fields is not None
    assert listed_item(json.dumps(listed)) == ("21035", fields)
    other = {"kind": "Secret", **listed}
    assert listed_item(json.dumps(other)) == other


def test_a_panic_of_the_listing_reader_leaves_the_page_to_python(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In the agent the compiled reader runs in its own process: a panic in it (which PyO3
    raises as a BaseException) is logged, and the page parsed in Python."""

    class PanicException(BaseException):  # PyO3 names its panics so
        pass

    class Panicking:
        def __init__(self, *_: object) -> None:
            pass

        def read_list(self, *_: object) -> None:
            raise PanicException("index out of bounds")

    monkeypatch.setattr(plain_native, "_COMPILED", Panicking)
    read = plain_native.listing_reader()
    assert read is not None
    assert read(b'{"kind": "PodList", "items": []}') is None
    assert "the compiled reader failed" in caplog.text


def test_what_only_the_general_path_handles_is_left_to_it() -> None:
    """Floating IPs, a deletion, a host port, an invalid name: the direct path declines, so the
    general path's handling (and its errors, naming the field) is what a user gets."""
    assert plain_pod_fields(copy.deepcopy(BASE)) is not None
    for section, field, value in (
        ("metadata", "annotations", {"cni.projectcalico.org/floatingIPs": '["1.2.3.4"]'}),
        ("metadata", "deletionTimestamp", "2026-01-05T09:30:00Z"),
        ("spec", "containers", [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}]}]),
        ("spec", "hostNetwork", True),
        ("metadata", "name", "Web"),
        ("status", "podIPs", [{"ip": "10.0.0.300"}]),
    ):
        doc = copy.deepcopy(BASE)
        doc[section][field] = value
        assert plain_pod_fields(doc) is None, (section, field)


def _spelled(address: ipaddress.IPv4Address | ipaddress.IPv6Address, form: int) -> str:
    """An address in one of the spellings a CNI plugin or a person may write."""
    if form == 1:
        return address.exploded
    if form == 2:
        return str(address).upper()
    return str(address)


@settings(max_examples=1500, deadline=None)
@given(
    address=st.ip_addresses(),
    form=st.integers(min_value=0, max_value=2),
    prefix=st.one_of(st.none(), st.integers(min_value=0, max_value=130)),
)
def test_the_compiled_reader_reads_an_address_as_ipaddress_does(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, form: int, prefix: int | None
) -> None:
    """A pod's addresses, IPv4 or IPv6, bare or a CIDR (host bits set or not), spelled
    compressed, exploded or in capitals: the compiled reader gives the networks Python's
    ipaddress gives, or leaves the pod to the Python path."""
    text = _spelled(address, form) + ("" if prefix is None else f"/{prefix}")
    doc = copy.deepcopy(BASE)
    doc["status"]["podIPs"] = [{"ip": "10.0.15.131"}, {"ip": text}]
    fields = plain_pod_fields(copy.deepcopy(doc))
    item = compiled_item(json.dumps(doc))
    assert item in (fields, json.dumps(doc).encode())
    if fields is not None and address.version == 6 and not address.ipv4_mapped:
        assert item == fields  # a dual-stack pod is read, not only declined


def test_the_kind_named_here_is_the_class_s() -> None:
    assert plain_pods._KIND == Pod.KIND
    assert Pod.API_VERSION == "v1"


def test_the_typed_decoder_reads_odd_text_as_json_does_or_declines() -> None:
    """JSON text a serializer may write: a repeated key counts last (as the standard
    library's parser has it); an escaped kind, or a value msgspec refuses (NaN) in a field
    nobody reads, is left to the pure path, which decides as before."""
    text = json.dumps(BASE)
    repeated = [
        text.replace('"nodeName": "node-a"', '"nodeName": "node-b", "nodeName": "node-a"'),
        text.replace('"phase": "Running"', '"phase": "Succeeded", "phase": "Running"'),
        text.replace('"name": "http"', '"name": "Bad_Name", "name": "http"'),
    ]
    for odd in repeated:
        assert typed_pod_fields(odd.encode()) == plain_pod_fields(json.loads(odd)) is not None
    declined = [
        text.replace('"kind": "Pod"', '"kind": "\\u0050od"'),
        text.replace('"dnsPolicy": "ClusterFirst"', '"dnsPolicy": NaN'),
        text.replace('"phase": "Running"', '"phase": "\\ud800"'),
    ]
    for odd in declined:
        assert typed_pod_fields(odd.encode()) is None
    for odd in [text, *repeated, declined[0], declined[2]]:
        assert compiled_item(odd) in (plain_pod_fields(json.loads(odd)), odd.encode())
    assert compiled_item(text) == plain_pod_fields(json.loads(text)) is not None
    assert SPLIT is not None
    assert SPLIT(f"[{declined[1]}]") is None  # NaN: the whole file is left to the pure path
    assert plain_pod_fields(json.loads(declined[0])) is not None


def test_pods_with_the_same_labels_share_one_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload's pods carry the same labels: their endpoints hold one map between them
    (memory), and a pod with other labels gets its own, the others' untouched. The maps
    remembered are bounded: past the bound, equal maps are made again, still equal."""
    monkeypatch.setattr(values, "_SHARING", values._Sharing())  # as a process starts

    def labels_of(name: str, labels: dict[str, str]) -> Mapping[str, str]:
        doc = copy.deepcopy(BASE)
        doc["metadata"]["name"], doc["metadata"]["labels"] = name, labels
        fields = plain_pod_fields(doc)
        assert fields is not None
        value = pod_entry(fields)[1][1]
        assert isinstance(value, model.WorkloadEndpoint)
        return value.labels

    first = labels_of("web-1", {"app": "web"})
    assert labels_of("web-2", {"app": "web"}) is first
    other = labels_of("db-1", {"app": "db"})
    assert other is not first
    assert dict(first)["app"] == "web"
    assert dict(other)["app"] == "db"
    monkeypatch.setattr(values, "SHARED_KEPT", 1)
    labels_of("cache-1", {"app": "cache"})
    assert len(values._SHARED) == 1
    again = labels_of("web-3", {"app": "web"})
    assert again == first
    assert again is not first
