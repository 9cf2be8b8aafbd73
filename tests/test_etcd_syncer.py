"""The etcd syncer against a real etcd: list then watch, invalid values, restarts, compaction,
and concurrent writers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from pyfelix import model
from pyfelix.datastore.etcd import EtcdClient, EtcdCompacted, EtcdConfig, EtcdUnavailable
from pyfelix.datastore.layout import encode, resource_key
from pyfelix.health import HealthAggregator
from pyfelix.resources import Tier, load_text
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.etcd import DATASTORE_WATCH, EtcdSyncer
from tests.etcd_server import EtcdServer

WAIT = 10.0


@attrs.define
class State:
    """Applies what the syncer sends, like the calc graph would."""

    values: dict[object, object] = attrs.Factory(dict)
    statuses: list[SyncStatus] = attrs.Factory(list)
    deletes: int = 0
    changed: trio.Event = attrs.Factory(trio.Event)

    def on_updates(self, updates: Sequence[Update]) -> None:
        for update in updates:
            if update.value is None:
                self.deletes += 1
                self.values.pop(update.key, None)
            else:
                self.values[update.key] = update.value
        self.changed.set()

    def on_status(self, status: SyncStatus) -> None:
        self.statuses.append(status)
        self.changed.set()

    async def until(self, predicate: Any) -> None:
        with trio.fail_after(WAIT):
            while not predicate():
                await self.changed.wait()
                self.changed = trio.Event()

    def tiers(self) -> dict[str, float | None]:
        return {
            k.name: v.order
            for k, v in self.values.items()
            if isinstance(k, model.TierKey) and isinstance(v, model.Tier)
        }


def tier(name: str, order: float) -> Tier:
    return Tier.from_manifest(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "Tier",
            "metadata": {"name": name},
            "spec": {"order": order},
        }
    )


async def put_tier(client: EtcdClient, name: str, order: float) -> int:
    resource = tier(name, order)
    return await client.put(resource_key(resource), encode(resource))


@asynccontextmanager
async def running(etcd: EtcdServer) -> AsyncIterator[tuple[EtcdClient, State, EtcdSyncer]]:
    state = State()
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        syncer = EtcdSyncer(client, state)
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            yield client, state, syncer
            nursery.cancel_scope.cancel()


async def test_list_then_watch(etcd: EtcdServer) -> None:
    """Existing resources arrive before IN_SYNC; later puts and deletes stream in."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as writer:
        await put_tier(writer, "a", 1)
        async with running(etcd) as (client, state, _):
            assert state.statuses[-1] is SyncStatus.IN_SYNC
            assert state.tiers() == {"a": 1.0}
            await put_tier(client, "b", 2)
            await put_tier(client, "a", 3)
            await state.until(lambda: state.tiers() == {"a": 3.0, "b": 2.0})
            await client.delete(resource_key(tier("b", 0)))
            await state.until(lambda: state.tiers() == {"a": 3.0})


async def test_the_default_allow_profile_is_held_across_resyncs(etcd: EtcdServer) -> None:
    """Calico's backends always hold projectcalico-default-allow (allow in and out; the
    automatic host endpoints of kube-controllers name it): on etcd as on the Kubernetes API,
    never written there, and no relisting deletes it."""
    key = model.ProfileRulesKey("projectcalico-default-allow")
    async with running(etcd) as (client, state, syncer):
        rules = state.values[key]
        assert isinstance(rules, model.ProfileRules)
        assert [r.action for r in (*rules.inbound_rules, *rules.outbound_rules)] == [
            "allow",
            "allow",
        ]
        assert (
            await client.get(
                "/calico/resources/v3/projectcalico.org/profiles/projectcalico-default-allow"
            )
            is None
        )
        await syncer._resync()
        assert key in state.values


async def test_invalid_values_are_absent_and_stream_goes_on(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A value that is not JSON, or not a valid resource, deletes that key; others still flow."""
    async with running(etcd) as (client, state, _):
        await put_tier(client, "a", 1)
        await state.until(lambda: state.tiers() == {"a": 1.0})
        key = resource_key(tier("a", 0))
        await client.put(key, "{not json")
        await state.until(lambda: state.tiers() == {})
        await client.put(key.replace("/a", "/bad"), '{"kind": "Tier", "spec": {"order": "x"}}')
        await put_tier(client, "c", 4)
        await state.until(lambda: state.tiers() == {"c": 4.0})
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "not valid JSON" in messages
    assert "spec.order" in messages


async def test_etcd_restart_during_watch(etcd: EtcdServer) -> None:
    """Stopping etcd deletes nothing; after a restart changes flow again."""
    async with running(etcd) as (client, state, syncer):
        await put_tier(client, "a", 1)
        await state.until(lambda: state.tiers() == {"a": 1.0})
        etcd.stop()
        await trio.sleep(1.0)
        assert state.tiers() == {"a": 1.0}
        assert state.deletes == 0
        etcd.start()
        await put_tier(client, "b", 2)
        await state.until(lambda: state.tiers() == {"a": 1.0, "b": 2.0})
        assert syncer.resyncs >= 2


async def test_compaction_while_behind(etcd: EtcdServer) -> None:
    """A watcher behind a compaction re-lists and sends just the differences."""
    state = State()
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        await put_tier(client, "keep", 1)
        await put_tier(client, "gone", 2)
        syncer = EtcdSyncer(client, state)
        revision = await syncer._resync()
        assert state.tiers() == {"keep": 1.0, "gone": 2.0}
        await client.delete(resource_key(tier("gone", 0)))
        await put_tier(client, "new", 3)
        latest = await put_tier(client, "new", 4)
        await client.compact(latest)
        with pytest.raises(EtcdCompacted):
            await syncer._watch(revision + 1)
        deletes_before = state.deletes
        await syncer._resync()
        assert state.tiers() == {"keep": 1.0, "new": 4.0}
        assert state.deletes == deletes_before + 1


async def test_concurrent_writers(etcd: EtcdServer) -> None:
    """Many writers racing on the same keys: the syncer ends where etcd ends."""
    async with running(etcd) as (client, state, _):

        async def writer(offset: int) -> None:
            for i in range(25):
                await put_tier(client, f"t{(i + offset) % 10}", offset * 100 + i)

        async with trio.open_nursery() as nursery:
            for offset in range(4):
                nursery.start_soon(writer, offset)
        kvs, _ = await client.list_all("/calico/resources/v3/projectcalico.org/tiers/")
        expected = {}
        for kv in kvs:
            doc = json.loads(kv.value)
            expected[doc["metadata"]["name"]] = float(doc["spec"]["order"])
        await state.until(lambda: state.tiers() == expected)
        assert len(expected) == 10


async def test_hostile_keys_and_values_are_absent_at_start_and_in_the_watch(
    etcd: EtcdServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A key that is not UTF-8 and a value nested 1,000 deep crash neither the first list (a
    crash loop on every start) nor the watch; the other resources flow."""
    prefix = resource_key(tier("x", 0)).rsplit("/", 1)[0]
    not_utf8 = (prefix.encode() + b"/\xff\xfe").decode("utf-8", "surrogateescape")
    deep = '{"kind": "Tier", "metadata": {"name": "deep"}, "spec": ' + "[" * 1000 + "]" * 1000
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as writer:
        await writer.put(not_utf8, encode(tier("x", 1)))
        await writer.put(f"{prefix}/deep", deep + "}")
        await put_tier(writer, "a", 1)
        async with running(etcd) as (client, state, _):
            assert state.statuses[-1] is SyncStatus.IN_SYNC
            assert state.tiers() == {"a": 1.0}
            await client.put(not_utf8 + "2", encode(tier("y", 1)))
            await client.put(f"{prefix}/deep2", deep + "}")
            await put_tier(client, "b", 2)
            await state.until(lambda: state.tiers() == {"a": 1.0, "b": 2.0})
            await client.delete(not_utf8)
            await put_tier(client, "c", 3)
            await state.until(lambda: "c" in state.tiers())
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "key is not valid UTF-8" in messages
    assert "nested" in messages


@attrs.define
class FailingOnce:
    """A client whose first listing breaks off after its first page, as etcd going away
    mid-listing does, with ``gone`` deleted meanwhile; the rest is the real client."""

    client: EtcdClient
    gone: str = ""
    failed: bool = False

    async def list_pages(self, prefix: str, page: int) -> AsyncIterator[tuple[list[Any], int]]:
        async for batch in self.client.list_pages(prefix, page):
            yield batch
            if not self.failed:
                self.failed = True
                if self.gone:
                    await self.client.delete(self.gone)
                raise EtcdUnavailable("gone mid-listing")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


@attrs.define
class Batches(State):
    """``State``, with each call's updates and each status in the order they came."""

    calls: list[list[Update] | SyncStatus] = attrs.Factory(list)

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.calls.append(list(updates))
        super().on_updates(updates)

    def on_status(self, status: SyncStatus) -> None:
        self.calls.append(status)
        super().on_status(status)

    def batches(self) -> list[list[Update]]:
        """The batches sent, less the one holding the default-allow profile (from the start)."""
        return [
            call
            for call in self.calls
            if isinstance(call, list)
            and not all("projectcalico-default-allow" in str(u.key) for u in call)
        ]


async def test_the_first_listing_is_sent_page_by_page_and_a_broken_one_mended(
    etcd: EtcdServer,
) -> None:
    """Before the first IN_SYNC (nothing is programmed yet) each page is sent as it is
    decoded, so the calculation graph works beside the listing; a first listing that breaks
    off is listed again, and what it sent of a key deleted meanwhile is deleted, before the
    one IN_SYNC."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as writer:
        for index in range(9):
            await put_tier(writer, f"t{index}", index)
        state = Batches()
        flaky = FailingOnce(writer, gone=resource_key(tier("t0", 0)))
        syncer = EtcdSyncer(flaky, state, page_size=2)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            nursery.cancel_scope.cancel()
    assert flaky.failed
    assert state.tiers() == {f"t{index}": float(index) for index in range(1, 9)}
    assert state.calls[-1] is SyncStatus.IN_SYNC
    assert SyncStatus.IN_SYNC not in state.calls[:-1]
    sizes = [len(batch) for batch in state.batches()]
    # The broken listing's first page (t0, t1), then the listing again: its pages with
    # what changed (t1 is as sent), and t0's deletion at the end.
    assert sizes == [2, 1, 2, 2, 2, 1]
    assert state.batches()[-1][0].value is None
    assert syncer.resyncs == 1


async def test_a_listing_after_the_first_sends_its_differences_at_once(etcd: EtcdServer) -> None:
    """Once in sync, a listing again (here after the watch fell behind a compaction) sends
    nothing until every page is in, then what changed in one batch: downstream never sees
    half a snapshot."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        for index in range(6):
            await put_tier(client, f"t{index}", index)
        state = Batches()
        syncer = EtcdSyncer(client, state, page_size=2)
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            nursery.cancel_scope.cancel()
        assert [len(batch) for batch in state.batches()] == [2, 2, 2]
        await client.delete(resource_key(tier("t0", 0)))
        await put_tier(client, "t5", 50)
        await put_tier(client, "t6", 6)
        state.calls.clear()
        await syncer._resync()
    assert [len(batch) for batch in state.batches()] == [3]
    assert state.calls[0] is SyncStatus.RESYNC_IN_PROGRESS
    assert state.calls[-1] is SyncStatus.IN_SYNC
    assert state.tiers() == {"t1": 1.0, "t2": 2.0, "t3": 3.0, "t4": 4.0, "t5": 50.0, "t6": 6.0}


async def test_kubernetes_kinds_read_back_as_calico_converts_them(etcd: EtcdServer) -> None:
    """The Kubernetes objects of a kubectl dump, stored by key (both policy.networking.k8s.io
    versions among them), come back as the Calico model: pods as endpoints, each policy kind
    keyed as Felix keys it."""
    dump = (Path(__file__).parent / "golden" / "kubectl-dump.yaml").read_text()
    extra = """
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: admin}
spec:
  {tier: Admin, priority: 3, subject: {namespaces: {}},
   ingress: [{action: Pass, from: [{namespaces: {}}]}]}
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: old}
spec: {priority: 3, subject: {namespaces: {}}, ingress: [{action: Pass, from: [{namespaces: {}}]}]}
"""
    resources = [
        r.resource for r in (load_text(dump, "d").resources + load_text(extra, "e").resources)
    ]
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as writer:
        for resource in resources:
            await writer.put(resource_key(resource), encode(resource))
        async with running(etcd) as (_, state, _):
            policies = {k for k in state.values if isinstance(k, model.PolicyKey)}
            assert policies == {
                model.PolicyKey(
                    "web-from-frontend", "default", "KubernetesNetworkPolicy", "default"
                ),
                model.PolicyKey("admin", "", "KubernetesClusterNetworkPolicy", "kube-admin"),
                model.PolicyKey(
                    "kanp.adminnetworkpolicy.old", "", "GlobalNetworkPolicy", "adminnetworkpolicy"
                ),
            }
            endpoints = [k for k in state.values if isinstance(k, model.WorkloadEndpointKey)]
            assert endpoints == [
                model.WorkloadEndpointKey("node-1", "k8s", "default/nginx-7c5ddbdf54-abcde", "eth0")
            ]


@attrs.define(eq=False)
class FreezingProxy:
    """A TCP proxy to etcd on 127.0.0.1 whose ``freeze`` stalls every connection open then:
    they stay open and carry nothing more, as a connection dropped silently by a NAT or
    firewall does, while new connections work."""

    target_port: int
    port: int = 0
    _generation: int = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    def freeze(self) -> None:
        self._generation += 1

    async def _handle(self, client: trio.SocketStream) -> None:
        generation = self._generation
        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)

        async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
            while data := await source.receive_some(65536):
                if generation != self._generation:
                    await trio.sleep_forever()  # open, silent
                await sink.send_all(data)

        async with client, upstream, trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream)
            nursery.start_soon(pump, upstream, client)


async def test_a_stalled_watch_is_noticed_reported_and_replaced(etcd: EtcdServer) -> None:
    """The watch's connection goes silent but stays open: the keepalive finds changes the
    watch never delivered, health says the watch stalled, and a new listing and watch bring
    the changes in (Felix's gRPC keepalive, over the JSON gateway)."""
    proxy = FreezingProxy(etcd.client_port)
    health = HealthAggregator()
    state = State()
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        url = f"etcd://127.0.0.1:{proxy.port}"
        async with (
            EtcdClient(EtcdConfig.from_url(url)) as client,
            EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as writer,
        ):
            syncer = EtcdSyncer(
                client, state, health=health, keepalive_interval=1.0, keepalive_timeout=1.0
            )
            await nursery.start(syncer.run)
            await put_tier(writer, "a", 1)
            await state.until(lambda: state.tiers() == {"a": 1.0})
            proxy.freeze()
            await put_tier(writer, "b", 2)
            with trio.fail_after(WAIT):
                while health.summary().ready:
                    await trio.sleep(0.1)
            assert DATASTORE_WATCH in health.summary().detail
            assert "stalled connection" in health.summary().detail
            await state.until(lambda: state.tiers() == {"a": 1.0, "b": 2.0})
            with trio.fail_after(WAIT):
                while not health.summary().ready:
                    await trio.sleep(0.1)
            assert syncer.resyncs >= 2
        nursery.cancel_scope.cancel()
