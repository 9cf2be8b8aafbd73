"""The first etcd listing by a child process (datastore/prefetch.py), against a real etcd:
the syncer ends with what its own listing gives, over several pages, with invalid values
treated as its own listing treats them; a child that cannot list hands over to the client."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import pytest
import trio

from pyfelix import cli
from pyfelix.datastore.etcd import EtcdClient, EtcdConfig
from pyfelix.datastore.layout import encode, resource_key
from pyfelix.datastore.prefetch import ListingPrefetch
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.etcd import EtcdSyncer
from tests.etcd_server import EtcdServer, free_port
from tests.test_etcd_syncer import State, tier

BAD_KEY = "/calico/resources/v3/projectcalico.org/tiers/broken"
WEP_PREFIX = "/calico/resources/v3/projectcalico.org/workloadendpoints/ns"


def endpoint(n: int, **spec: object) -> str:
    return json.dumps(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "WorkloadEndpoint",
            "metadata": {"name": f"node--1-k8s-pod{n}-eth0", "namespace": "ns"},
            "spec": {
                "node": "node-1",
                "orchestrator": "k8s",
                "pod": f"pod{n}",
                "endpoint": "eth0",
                "interfaceName": f"cali{n}",
                "ipNetworks": [f"10.0.{n // 250}.{n % 250}/32"],
                "profiles": ["kns.ns"],
                **spec,
            },
        }
    )


async def fill(url: str, tiers: int) -> None:
    async with EtcdClient(EtcdConfig.from_url(url)) as client:
        await client.put_many(
            [(resource_key(tier(f"t{n}", n)), encode(tier(f"t{n}", n))) for n in range(tiers)]
        )
        await client.put(BAD_KEY, "{not json")
        await client.put("/calico/felix/v1/host/node-1/status", "not ours")


async def synced(url: str, prefetch: ListingPrefetch | None, page_size: int) -> State:
    """A syncer's state at its first IN_SYNC, listing by the child when given one."""
    state = State()
    async with EtcdClient(EtcdConfig.from_url(url)) as client:
        syncer = EtcdSyncer(client, state, page_size=page_size, prefetch=prefetch)
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            nursery.cancel_scope.cancel()
    return state


def updates_of(state: State) -> dict[object, object]:
    """What the listing gave (the default-allow profile every syncer holds left out)."""
    return {k: v for k, v in state.values.items() if "projectcalico-default-allow" not in str(k)}


@pytest.mark.parametrize("tiers", [3, 12_000])
async def test_the_childs_listing_is_the_syncers_own(
    etcd: EtcdServer, tiers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Over one page and over several (the child lists in etcd's pages of 5,000): the same
    model values at IN_SYNC as the syncer's own listing, the value that is not JSON
    logged and absent in both."""
    await fill(etcd.etcd_url, tiers)
    prefetch = ListingPrefetch(etcd.etcd_url)
    assert prefetch.active
    with caplog.at_level(logging.WARNING):
        by_child = await synced(etcd.etcd_url, prefetch, page_size=5000)
    own = await synced(etcd.etcd_url, None, page_size=5000)
    assert by_child.statuses[-1] is SyncStatus.IN_SYNC
    assert updates_of(by_child) == updates_of(own)
    assert len(by_child.tiers()) == tiers
    child_warnings = [r.getMessage() for r in caplog.records]
    assert any(BAD_KEY in m and "not valid JSON" in m for m in child_warnings)
    assert not any("listing here" in m for m in child_warnings)


async def test_endpoints_checked_by_the_child_are_what_the_syncer_reads(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The child runs the plain endpoints' checks and hands their fields over: the model
    values at IN_SYNC are the syncer's own listing's, an endpoint with ports (not plain), one
    with an address that is not one (left to the validation filter by both), one at an
    endpoint's key that is another kind, and one under a key that is not UTF-8 included (the
    last two logged and absent in both)."""
    not_utf8 = (WEP_PREFIX.encode() + b"/\xff\xfe").decode("utf-8", "surrogateescape")
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        await client.put_many(
            [(f"{WEP_PREFIX}/node--1-k8s-pod{n}-eth0", endpoint(n)) for n in range(300)]
        )
        ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
        await client.put(f"{WEP_PREFIX}/ported", endpoint(300, ports=ports))
        await client.put(f"{WEP_PREFIX}/bad", endpoint(301, ipNetworks=["10.0.0.300/32"]))
        await client.put(f"{WEP_PREFIX}/tier", encode(tier("t", 1)))
        await client.put(not_utf8, endpoint(302))
    prefetch = ListingPrefetch(etcd.etcd_url, digest=cli._etcd_endpoint_checks)
    with caplog.at_level(logging.WARNING):
        by_child = await synced(etcd.etcd_url, prefetch, page_size=5000)
    child_warnings = sorted(r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        own = await synced(etcd.etcd_url, None, page_size=5000)
    assert updates_of(by_child) == updates_of(own)
    assert len(updates_of(own)) == 301
    assert child_warnings == sorted(r.getMessage() for r in caplog.records)
    assert len(child_warnings) == 2
    checked = ListingPrefetch(etcd.etcd_url, digest=cli._etcd_endpoint_checks)
    documents = [e[5] for page in checked.pages() if page is not None for e in page[2]]
    checked.close()
    assert sum(isinstance(d, tuple) for d in documents) == 300


async def test_a_child_that_cannot_list_hands_over_to_the_client(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The child lists an etcd that is not there: it fails, the syncer says so and lists
    through its client, and the result is the same."""
    await fill(etcd.etcd_url, 3)
    prefetch = ListingPrefetch(f"etcd://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.WARNING):
        state = await synced(etcd.etcd_url, prefetch, page_size=5000)
    assert state.tiers() == {"t0": 0.0, "t1": 1.0, "t2": 2.0}
    assert any("listing here" in r.getMessage() for r in caplog.records)


def test_the_pages_of_a_child_that_failed_end_in_none() -> None:
    """A child that exits without the last page (here: no etcd at all) hands over None,
    never a listing that stops short."""
    prefetch = ListingPrefetch("etcd://127.0.0.1:1")
    pages: Sequence[object] = list(prefetch.pages())
    prefetch.close()
    assert pages == [None]


async def test_a_page_arrives_in_one_batch_as_without_the_child(etcd: EtcdServer) -> None:
    """The child's listing is sent as the syncer's own is: each page in one call (here the
    only one), before IN_SYNC."""
    await fill(etcd.etcd_url, 10)
    calls: list[int] = []

    class Counting(State):
        def on_updates(self, updates: Sequence[Update]) -> None:
            if not all("projectcalico-default-allow" in str(u.key) for u in updates):
                calls.append(len(updates))
            super().on_updates(updates)

    state = Counting()
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        syncer = EtcdSyncer(client, state, prefetch=ListingPrefetch(etcd.etcd_url))
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            nursery.cancel_scope.cancel()
    assert calls == [10]
