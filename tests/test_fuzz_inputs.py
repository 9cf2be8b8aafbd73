"""Any bytes in, a clear error or a valid resource out: the manifest loader and the etcd value
decoder under hypothesis, with bounded time and memory. These are the doors a file, a client or
a datastore value comes in by; none may raise anything but its documented error."""

from __future__ import annotations

import json
import resource
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyfelix.datastore.layout import decode
from pyfelix.errors import ManifestError, Problem
from pyfelix.resources import Resource
from pyfelix.resources.loader import load_text

# Fragments real manifests are made of, so the fuzzer gets past the parser often.
FRAGMENTS = [
    "apiVersion: projectcalico.org/v3\n",
    "kind: GlobalNetworkPolicy\n",
    "kind: WorkloadEndpoint\n",
    "kind: NetworkSet\n",
    "metadata: {name: x, namespace: y}\n",
    "spec:\n",
    "  selector: all()\n",
    "  nets: [10.0.0.0/8, 'fe80::1%eth0/128']\n",
    "  ingress: [{action: Allow, source: {selector: a == 'b'}}]\n",
    "  order: .nan\n",
    "&a [*a, *a]\n",
    "---\n",
    "[[[[[[[[",
    "{",
    "\x07",
    "\t",
    "- ",
]
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=12).map("".join)
KEYS = [
    "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/x",
    "/calico/resources/v3/projectcalico.org/workloadendpoints/ns/x",
    "/calico/resources/v3/projectcalico.org/tiers/t",
    "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0-26",
    "/calico/resources/v3/projectcalico.org/tiers/\udcff",
]
# Peak RSS may grow by this much over a whole test: a bomb grows by gigabytes.
MEMORY_BUDGET_MB = 200


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, as_json=st.booleans())
def test_loader_gives_resources_or_problems(text: str, as_json: bool) -> None:
    started = time.monotonic()
    result = load_text(text, "fuzz.json" if as_json else "fuzz.yaml")
    assert time.monotonic() - started < 2
    assert all(isinstance(p, Problem) and p.source.startswith("fuzz") for p in result.problems)
    assert all(isinstance(item.resource, Resource) for item in result.resources)


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from(KEYS),
    value=st.binary(max_size=200)
    | texts.map(str.encode)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=30,
    ).map(lambda v: json.dumps(v).encode()),
)
def test_etcd_decoder_gives_a_resource_or_a_manifest_error(key: str, value: bytes) -> None:
    problems: list[Problem] | None = None
    try:
        resource_ = decode(key, value, 7)
    except ManifestError as exc:
        problems, resource_ = exc.problems, None
    assert problems is None or problems, "an error names its problems"
    assert resource_ is None or isinstance(resource_, Resource)


def test_memory_stays_bounded_over_hostile_inputs() -> None:
    """The worst inputs the fuzzers aim at, once each, within a memory budget."""
    before = _rss_mb()
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    for text, source in (
        (bomb, "bomb.yaml"),
        ("[" * 100_000 + "]" * 100_000, "deep.json"),
        ("a: " + "[" * 5000, "deep.yaml"),
    ):
        assert load_text(text, source).problems
    assert _rss_mb() - before < MEMORY_BUDGET_MB


def _pure_items(text: str) -> list[object] | None:
    """What the Python paths make of a JSON List's or array's items: each one's fields
    (``plain_digest``), None for an item they do not take; None for text that is no JSON
    List or array."""
    from pyfelix.syncer.plain_namespaces import plain_digest  # noqa: PLC0415

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    items = data.get("items") if type(data) is dict else data
    if type(items) is not list:
        return None
    return [plain_digest(item) if type(item) is dict else None for item in items]


#: A dump of a pod, a WorkloadEndpoint and another pod, which the edits below corrupt.
_DUMP = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": "prod", "labels": {"app": "web"}},
                "spec": {
                    "nodeName": "node-a",
                    "containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "h"}]}],
                },
                "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd::1"}]},
            },
            {
                "apiVersion": "projectcalico.org/v3",
                "kind": "WorkloadEndpoint",
                "metadata": {"name": "node--a-k8s-web--1-eth0", "namespace": "prod"},
                "spec": {
                    "node": "node-a",
                    "pod": "web-1",
                    "endpoint": "eth0",
                    "interfaceName": "cali1",
                    "ipNetworks": ["10.0.0.1/32"],
                },
            },
        ],
    }
)
_EDIT_CHARACTERS = ' {}[]:,"\\/.-019aefuAEFnullPodWorkloadEndpoint\n\t\x01é'
#: A few characters replaced, deleted or inserted, each at a fraction of the text's length.
EDITS = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.sampled_from(["replace", "delete", "insert"]),
        st.sampled_from(_EDIT_CHARACTERS),
    ),
    min_size=1,
    max_size=4,
)


def _corrupted(text: str, edits: list[tuple[float, str, str]]) -> str:
    for where, edit, character in edits:
        at = int(where * len(text))
        if edit == "replace":
            text = text[:at] + character + text[at + 1 :]
        elif edit == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + character + text[at:]
    return text


@settings(max_examples=1000, deadline=None)
@given(edits=EDITS)
def test_the_compiled_reader_agrees_on_corrupted_text_or_leaves_it(
    edits: list[tuple[float, str, str]],
) -> None:
    """A dump with a few characters replaced, deleted or inserted: where the compiled reader
    reads the file, the text is a JSON List or array, and every item it reads is what the
    Python paths make of it (the others it gives back as their texts)."""
    from tests.compiled_reader import SPLIT  # noqa: PLC0415

    assert SPLIT is not None
    text = _corrupted(_DUMP, edits)
    read = SPLIT(text)
    if read is None:
        return  # left to the Python paths whole
    expected = _pure_items(text)
    assert expected is not None
    assert len(read[1]) == len(expected)
    for item, fields in zip(read[1], expected, strict=True):
        assert type(item) is bytes or item == fields


#: A page of an API server's pod listing (no kind or apiVersion on its items), corrupted below.
def _page(kind: str, items: list[dict[str, object]]) -> str:
    return json.dumps(
        {
            "kind": f"{kind}List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "90", "continue": "abc"},
            "items": items,
        }
    )


_MANAGED = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
#: A page of each kind the compiled reader reads, as an API server lists them.
_PAGES = {
    "Pod": _page(
        "Pod",
        [
            {
                "metadata": {
                    "name": f"web-{i}",
                    "namespace": "prod",
                    "resourceVersion": f"{80 + i}",
                    "generation": 1,
                    "labels": {"app": "web"},
                    "managedFields": _MANAGED,
                },
                "spec": {"nodeName": "node-a", "serviceAccountName": "web"},
                "status": {"phase": "Running", "podIP": f"10.0.0.{i}"},
            }
            for i in (1, 2)
        ],
    ),
    "Namespace": _page(
        "Namespace",
        [
            {
                "metadata": {
                    "name": f"tenant-{i}",
                    "uid": "0c0ffee0-0000-4000-8000-000000000001",
                    "resourceVersion": f"{80 + i}",
                    "labels": {"kubernetes.io/metadata.name": f"tenant-{i}"},
                    "managedFields": _MANAGED,
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            for i in (1, 2)
        ],
    ),
    "ServiceAccount": _page(
        "ServiceAccount",
        [
            {
                "metadata": {
                    "name": "default",
                    "namespace": f"tenant-{i}",
                    "resourceVersion": f"{80 + i}",
                    "labels": {"team": "a"},
                    "managedFields": _MANAGED,
                },
                "secrets": [{"name": "token"}],
                "automountServiceAccountToken": False,
            }
            for i in (1, 2)
        ],
    ),
}


@pytest.mark.parametrize("kind", sorted(_PAGES))
@settings(max_examples=1000, deadline=None)
@given(edits=EDITS)
def test_the_listing_reader_agrees_on_corrupted_pages_or_leaves_them(
    kind: str, edits: list[tuple[float, str, str]]
) -> None:
    """A listing's page (of pods, namespaces or service accounts) with a few characters
    replaced, deleted or inserted: where the compiled reader reads it, every item it reads
    is what the syncer's direct path makes of the item as it parses it, with the item's
    resourceVersion."""
    from pyfelix.syncer.kubernetes import WATCHED, listed_document  # noqa: PLC0415
    from pyfelix.syncer.plain_namespaces import plain_digest  # noqa: PLC0415
    from pyfelix.syncer.plain_native import listing_reader  # noqa: PLC0415

    read_page = listing_reader(kind)
    assert read_page is not None
    watched = next(w for w in WATCHED if w.kind == kind)
    text = _corrupted(_PAGES[kind], edits)
    read = read_page(text.encode())
    if read is None:
        return  # parsed whole by the client
    items = json.loads(text)["items"]
    assert len(read["items"]) == len(items)
    for item, parsed in zip(read["items"], items, strict=True):
        if type(item) is tuple:
            assert type(parsed) is dict
            assert item == (
                parsed["metadata"]["resourceVersion"],
                plain_digest(listed_document(watched, parsed)),
            )
