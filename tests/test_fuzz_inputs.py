"""Any bytes in, a clear error or a valid resource out: the manifest loader and the etcd value
decoder under hypothesis, with bounded time and memory. These are the doors a file, a client or
a datastore value comes in by; none may raise anything but its documented error."""

from __future__ import annotations

import json
import resource
import time

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
