"""Status flowing back to the datastore: process status, endpoint status, WireGuard keys.

Process status is written twice, as Felix does: ``.../status`` under a lease of ReportingTTLSecs
(it vanishes if the agent dies) and ``.../last_reported_status`` without one (the last word of an
agent that is gone). Endpoint status is queued and written as Felix's reporter writes it: one
write per EndpointReportingDelaySecs (jittered by a tenth), oldest first, a failed write retried
at the next turn, so a node's flapping endpoints cannot flood the datastore. A new WireGuard
public key is written into the Node's status, retrying three times at once on a revision
conflict and then every 2-4 s (jittered) until it sticks.
"""

from __future__ import annotations

import json
import logging
import random
from typing import Protocol

import attrs
import trio

from pyfelix import messages as m
from pyfelix import model
from pyfelix.datastore.etcd import EtcdClient, EtcdError
from pyfelix.datastore.kubernetes import KubeClient, KubeError
from pyfelix.datastore.layout import decode, encode, key_for
from pyfelix.errors import ManifestError
from pyfelix.resources import Node
from pyfelix.resources.cluster import NodeStatus

log = logging.getLogger(__name__)

DEFAULT_REGION = "no-region"


def status_prefix(hostname: str, region: str = DEFAULT_REGION) -> str:
    return f"/calico/felix/v2/{region}/host/{hostname}"


@attrs.define(eq=False)
class EtcdStatusReporter:
    client: EtcdClient
    hostname: str
    ttl: int = 90
    region: str = DEFAULT_REGION
    #: EndpointReportingDelaySecs: at most one endpoint status write per this many seconds.
    endpoint_delay: float = 1.0
    _lease: int = 0
    #: The TTL ``_lease`` was granted with: a TTL set while a grant was under way (the first
    #: report goes out before the configuration arrives) is taken at the next report.
    _lease_ttl: int = 0
    _first: bool = True
    #: Each endpoint's status as last queued, and the writes not done yet (None: delete).
    _desired: dict[str, str] = attrs.Factory(dict)
    _pending: list[tuple[str, str | None]] = attrs.Factory(list)
    _queued: trio.Event = attrs.Factory(trio.Event)
    endpoint_writes: int = 0

    def set_ttl(self, seconds: float) -> None:
        """ReportingTTLSecs: the next report takes a lease of the new length."""
        self.ttl = max(1, round(seconds))

    async def report_process(self, status: m.ProcessStatusUpdate) -> None:
        prefix = status_prefix(self.hostname, self.region)
        value = json.dumps(
            {"time": status.iso_timestamp, "uptime": status.uptime, "first_update": self._first}
        )
        self._first = False
        try:
            fresh = self._lease and self._lease_ttl == self.ttl
            if not fresh or not await self.client.keep_alive(self._lease):
                ttl = self.ttl
                self._lease = await self.client.grant_lease(ttl)
                self._lease_ttl = ttl
            await self.client.put(f"{prefix}/status", value, lease=self._lease)
            await self.client.put(f"{prefix}/last_reported_status", value)
        except EtcdError as exc:
            self._lease = 0
            log.warning("could not report status: %s", exc)

    async def report_endpoint(self, key: object, status: str | None) -> None:
        """Queue an endpoint's status (None: it is gone) for ``run`` to write."""
        prefix = status_prefix(self.hostname, self.region)
        if isinstance(key, model.WorkloadEndpointKey):
            path = str(key).replace(f"/calico/v1/host/{key.hostname}", prefix, 1)
        elif isinstance(key, model.HostEndpointKey):
            path = f"{prefix}/endpoint/{key.endpoint}"
        else:
            return
        if self._desired.get(path) == status:
            return
        if status is None:
            del self._desired[path]
        else:
            self._desired[path] = status
        self._pending.append((path, status))
        self._queued.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the queued endpoint statuses, one per endpoint_delay."""
        task_status.started()
        while True:
            if not self._pending:
                self._queued = trio.Event()
                await self._queued.wait()
                continue
            path, status = self._pending[0]
            try:
                if status is None:
                    await self.client.delete(path)
                else:
                    await self.client.put(path, json.dumps({"status": status}))
            except EtcdError as exc:
                log.warning("could not report endpoint status (retrying): %s", exc)
            else:
                self._pending.pop(0)
                self.endpoint_writes += 1
            await trio.sleep(self.endpoint_delay * random.uniform(0.9, 1.1))


class NodeStore(Protocol):
    """Where Node resources live; ``put_node`` is a compare-and-swap on ``revision``."""

    async def get_node(self, name: str) -> tuple[Node | None, int]: ...

    async def put_node(self, node: Node, revision: int) -> bool: ...


@attrs.define(eq=False)
class EtcdNodeStore:
    client: EtcdClient

    async def get_node(self, name: str) -> tuple[Node | None, int]:
        key = key_for(Node, "", name)
        kv = await self.client.get(key)
        if kv is None:
            return None, 0
        try:
            node = decode(key, kv.value, kv.mod_revision)
        except ManifestError:
            return None, kv.mod_revision
        return (node if isinstance(node, Node) else None), kv.mod_revision

    async def put_node(self, node: Node, revision: int) -> bool:
        key = key_for(Node, "", node.name)
        return await self.client.put_if(key, encode(node), mod_revision=revision) is not None


@attrs.define(eq=False)
class KubeNodeStore:
    """The Kubernetes API datastore's Nodes: v1 Nodes, read as Calico reads them. Writing one
    writes only its WireGuard keys, as the annotations Felix writes in KDD mode, with the read
    resourceVersion (a conflict if the Node changed meanwhile); nothing else of the Node is
    ever written."""

    client: KubeClient

    async def get_node(self, name: str) -> tuple[Node | None, int]:
        from pyfelix.resources.k8s_conversion import calico_node  # noqa: PLC0415
        from pyfelix.resources.k8s_node import KubernetesNode  # noqa: PLC0415

        try:
            data = await self.client.request("GET", f"/api/v1/nodes/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return None, 0
            raise
        revision = int(data.get("metadata", {}).get("resourceVersion", "0") or 0)
        try:
            node = KubernetesNode.from_manifest({"apiVersion": "v1", "kind": "Node", **data})
        except ManifestError:
            return None, revision
        return calico_node(node), revision

    async def put_node(self, node: Node, revision: int) -> bool:
        from pyfelix.resources.k8s_conversion import (  # noqa: PLC0415
            WIREGUARD_KEY_ANNOTATION,
            WIREGUARD_KEY_V6_ANNOTATION,
        )

        status = node.status or NodeStatus()
        annotations = {
            WIREGUARD_KEY_ANNOTATION: status.wireguard_public_key or None,
            WIREGUARD_KEY_V6_ANNOTATION: status.wireguard_public_key_v6 or None,
        }
        patch = {"metadata": {"resourceVersion": str(revision), "annotations": annotations}}
        try:
            await self.client.request("PATCH", f"/api/v1/nodes/{node.name}", body=patch)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True


IMMEDIATE_RETRIES = 3
RETRY_MIN = 2.0
RETRY_MAX = 4.0


@attrs.define(eq=False)
class WireguardKeyUpdater:
    """Keeps this node's WireGuard public keys (IPv4's device, IPv6's) in its Node resource's
    status, as Felix does: wireguardPublicKey and wireguardPublicKeyV6."""

    store: NodeStore
    hostname: str
    writes: int = 0
    #: IP version -> the key its device has ("": none).
    _wanted: dict[int, str] = attrs.Factory(dict)
    _wake: trio.Event = attrs.Factory(trio.Event)

    def on_key(self, public_key: str, ip_version: int = 4) -> None:
        self._wanted[ip_version] = public_key
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while not await self._try_update():
                with trio.move_on_after(random.uniform(RETRY_MIN, RETRY_MAX)):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def _try_update(self) -> bool:
        """Write the wanted keys; True when done (or nothing to do)."""
        for _ in range(1 + IMMEDIATE_RETRIES):
            if not self._wanted:
                return True
            wanted = dict(self._wanted)
            try:
                node, revision = await self.store.get_node(self.hostname)
            except (EtcdError, KubeError) as exc:
                log.warning("cannot read Node %s: %s", self.hostname, exc)
                return False
            if node is None:
                log.warning("Node %s does not exist; cannot store its WireGuard key", self.hostname)
                return False
            status = node.status or NodeStatus()
            updated_status = attrs.evolve(
                status,
                wireguard_public_key=wanted.get(4, status.wireguard_public_key),
                wireguard_public_key_v6=wanted.get(6, status.wireguard_public_key_v6),
            )
            if updated_status == status:
                return True
            updated = attrs.evolve(node, status=updated_status)
            try:
                if await self.store.put_node(updated, revision):
                    self.writes += 1
                    return True
            except (EtcdError, KubeError) as exc:
                log.warning("cannot write Node %s: %s", self.hostname, exc)
                return False
        return False
