"""Status back to the datastore: process status with a TTL lease in a real etcd, and the
WireGuard key updater's retry rules on Trio's autojump clock."""

from __future__ import annotations

import json

import attrs
import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix import model
from pyfelix.datastore.etcd import EtcdClient, EtcdConfig
from pyfelix.datastore.layout import encode, resource_key
from pyfelix.resources import Node
from pyfelix.status import EtcdNodeStore, EtcdStatusReporter, WireguardKeyUpdater, status_prefix
from tests.etcd_server import EtcdServer
from tests.test_resources import document

KEY = "jNk0RzNeOq28ohw4imhoBVUC+qbExJZ6nsLdRP0SwWI="
KEY_V6 = "oK2aYp8Z7vA6cH0r1m2n3b4v5c6x7z8l9k0j1h2g3f4="


async def test_process_status_has_a_ttl(etcd: EtcdServer) -> None:
    """The status key expires with its lease; the last-reported copy stays."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        reporter = EtcdStatusReporter(client, "node-a", ttl=2)
        await reporter.report_process(m.ProcessStatusUpdate("2026-11-29T00:00:00+00:00", 12.5))
        prefix = status_prefix("node-a")
        status = await client.get(f"{prefix}/status")
        assert status is not None
        assert json.loads(status.value)["uptime"] == 12.5
        assert status.lease
        with trio.fail_after(10):
            while await client.get(f"{prefix}/status") is not None:
                await trio.sleep(0.5)
        last = await client.get(f"{prefix}/last_reported_status")
        assert last is not None
        assert json.loads(last.value)["time"] == "2026-11-29T00:00:00+00:00"


async def test_a_ttl_set_while_a_lease_is_being_granted_is_taken_at_the_next_report(
    etcd: EtcdServer,
) -> None:
    """The first report goes out before the configuration arrives: ReportingTTLSecs set
    while its lease is being granted must not be lost to that grant."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        reporter = EtcdStatusReporter(client, "node-a")
        granted: list[int] = []
        grant = client.grant_lease

        async def grant_while_configured(ttl: int) -> int:
            granted.append(ttl)
            reporter.set_ttl(45)  # the configuration arrives meanwhile
            return await grant(ttl)

        client.grant_lease = grant_while_configured  # type: ignore[method-assign]
        update = m.ProcessStatusUpdate("2026-11-29T00:00:00+00:00", 1.0)
        await reporter.report_process(update)
        await reporter.report_process(update)
        await reporter.report_process(update)
        assert granted == [90, 45]


async def test_endpoint_status_written_one_per_reporting_delay(etcd: EtcdServer) -> None:
    """EndpointReportingDelaySecs: queued statuses are written oldest first, one per delay
    (with a tenth of jitter); an unchanged status is not queued again; a removal deletes."""
    wep = model.WorkloadEndpointKey("node-a", "k8s", "ns/pod", "eth0")
    hep = model.HostEndpointKey("node-a", "eth1")
    prefix = status_prefix("node-a")
    wep_path = f"{prefix}/workload/k8s/ns%2fpod/endpoint/eth0"
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        reporter = EtcdStatusReporter(client, "node-a", endpoint_delay=0.5)
        async with trio.open_nursery() as nursery:
            await nursery.start(reporter.run)
            started = trio.current_time()
            await reporter.report_endpoint(wep, "up")
            await reporter.report_endpoint(wep, "up")
            await reporter.report_endpoint(hep, "up")
            await reporter.report_endpoint(wep, "down")
            with trio.fail_after(10):
                while reporter.endpoint_writes < 3:
                    await trio.sleep(0.02)
            elapsed = trio.current_time() - started
            assert 0.9 <= elapsed < 2.0, elapsed
            stored = await client.get(wep_path)
            assert stored is not None
            assert json.loads(stored.value) == {"status": "down"}
            assert await client.get(f"{prefix}/endpoint/eth1") is not None
            await reporter.report_endpoint(hep, None)
            with trio.fail_after(10):
                # The key goes a moment before the reporter counts the write that removed it.
                while (
                    await client.get(f"{prefix}/endpoint/eth1") is not None
                    or reporter.endpoint_writes < 4
                ):
                    await trio.sleep(0.05)
            assert reporter.endpoint_writes == 4
            nursery.cancel_scope.cancel()


async def test_wireguard_key_written_to_node(etcd: EtcdServer) -> None:
    """A new key lands in the Node's status; an unchanged key is not rewritten."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        node = Node.from_manifest(document("Node", "node-a"))
        node = attrs.evolve(node, status=None)
        await client.put(resource_key(node), encode(node))
        updater = WireguardKeyUpdater(EtcdNodeStore(client), "node-a")
        async with trio.open_nursery() as nursery:
            await nursery.start(updater.run)
            updater.on_key(KEY)
            with trio.fail_after(5):
                while updater.writes == 0:
                    await trio.sleep(0.05)
            updater.on_key(KEY)
            await trio.sleep(0.2)
            assert updater.writes == 1
            # The IPv6 device's key goes beside it, the IPv4 one kept.
            updater.on_key(KEY_V6, 6)
            with trio.fail_after(5):
                while updater.writes == 1:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        stored, _ = await EtcdNodeStore(client).get_node("node-a")
        assert stored is not None
        assert stored.status is not None
        assert stored.status.wireguard_public_key == KEY
        assert stored.status.wireguard_public_key_v6 == KEY_V6


@attrs.define
class FlakyStore:
    """A Node store that reports a revision conflict the first ``conflicts`` times."""

    conflicts: int
    node: Node = attrs.field(factory=lambda: Node.from_manifest(document("Node", "node-a")))
    attempts: list[float] = attrs.Factory(list)

    async def get_node(self, name: str) -> tuple[Node | None, int]:
        return self.node, 1

    async def put_node(self, node: Node, revision: int) -> bool:
        self.attempts.append(trio.current_time())
        if self.conflicts:
            self.conflicts -= 1
            return False
        self.node = node
        return True


@pytest.mark.parametrize("conflicts", [2, 6])
async def test_retries_on_conflict(autojump_clock: trio.testing.MockClock, conflicts: int) -> None:
    """Three immediate retries after a conflict, then one try every 2-4 s until it succeeds."""
    store = FlakyStore(conflicts)
    updater = WireguardKeyUpdater(store, "node-a")
    async with trio.open_nursery() as nursery:
        await nursery.start(updater.run)
        updater.on_key("bmV3LWtleS1uZXcta2V5LW5ldy1rZXktbmV3LWtleSE=")
        with trio.fail_after(60):
            while updater.writes == 0:
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    start = store.attempts[0]
    immediate = [t for t in store.attempts if t == start]
    assert len(immediate) == min(conflicts + 1, 4)
    later = store.attempts[len(immediate) :]
    gaps = [b - a for a, b in zip([immediate[-1], *later], later, strict=False)]
    assert all(2.0 <= gap <= 4.0 or gap == 0 for gap in gaps)
    assert len(store.attempts) == conflicts + 1
    assert store.node.status is not None
