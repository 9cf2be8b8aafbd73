"""The etcd datastore syncer: list, then watch from the next revision; re-list and diff when
the watch cannot continue.

While etcd is unreachable nothing is deleted downstream: the syncer keeps what it last sent and
retries with exponential backoff (jittered, capped). After a compaction, or when the watch
breaks, it lists again and sends only the differences, including deletions for keys that
vanished meanwhile. A value that is not JSON or not a valid resource is logged and treated as
absent; the stream goes on.
"""

from __future__ import annotations

import logging
import random

import attrs
import trio

from pyfelix.datastore.etcd import (
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    KeyValue,
    WatchEvent,
)
from pyfelix.datastore.layout import WATCH_PREFIX, decode
from pyfelix.errors import ManifestError
from pyfelix.resources import Resource
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.processors import Converter

log = logging.getLogger(__name__)

BACKOFF_START = 0.1
BACKOFF_MAX = 5.0


@attrs.define(eq=False)
class EtcdSyncer:
    client: EtcdClient
    callbacks: SyncerCallbacks
    prefix: str = WATCH_PREFIX
    _converter: Converter = attrs.Factory(Converter)
    _revisions: dict[str, int] = attrs.Factory(dict)
    _started: bool = False
    resyncs: int = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.callbacks.on_status(SyncStatus.WAIT_FOR_DATASTORE)
        backoff = BACKOFF_START
        while True:
            try:
                revision = await self._resync()
                if not self._started:
                    self._started = True
                    task_status.started()
                backoff = BACKOFF_START
                await self._watch(revision + 1)
            except EtcdCompacted as exc:
                log.info("etcd watch fell behind a compaction (%s); re-listing", exc)
            except EtcdError as exc:
                log.warning("etcd unavailable (%s); retrying in %.1fs", exc, backoff)
                await trio.sleep(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, BACKOFF_MAX)

    async def _resync(self) -> int:
        """List everything, send the differences from what was sent before, then IN_SYNC."""
        kvs, revision = await self.client.list_all(self.prefix)
        self.callbacks.on_status(SyncStatus.RESYNC_IN_PROGRESS)
        self.resyncs += 1
        seen = {kv.key for kv in kvs}
        updates: list[Update] = []
        for key in [k for k in self._revisions if k not in seen]:
            updates.extend(self._apply(key, None, revision))
        for kv in kvs:
            if self._revisions.get(kv.key) != kv.mod_revision:
                updates.extend(self._apply(kv.key, kv, kv.mod_revision))
        if updates:
            self.callbacks.on_updates(updates)
        self.callbacks.on_status(SyncStatus.IN_SYNC)
        return revision

    async def _watch(self, start_revision: int) -> None:
        pending: list[Update] = []
        async for event in self.client.watch(self.prefix, start_revision):
            pending.extend(self._event(event))
            # Flush once the gateway has nothing more buffered for us right now.
            if pending:
                self.callbacks.on_updates(pending)
                pending = []

    def _event(self, event: WatchEvent) -> list[Update]:
        if event.deleted:
            return self._apply(event.kv.key, None, event.kv.mod_revision or event.revision)
        return self._apply(event.kv.key, event.kv, event.kv.mod_revision)

    def _apply(self, key: str, kv: KeyValue | None, revision: int) -> list[Update]:
        resource: Resource | None = None
        if kv is None:
            self._revisions.pop(key, None)
        else:
            self._revisions[key] = kv.mod_revision
            try:
                resource = decode(key, kv.value, kv.mod_revision)
            except ManifestError as exc:
                log.warning("ignoring invalid value at %r (treated as absent): %s", key, exc)
        return self._converter.update(key, resource, str(revision))
