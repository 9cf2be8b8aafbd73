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
from typing import Any

import attrs
import trio

from pyfelix.datastore.etcd import (
    LIST_PAGE,
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    KeyValue,
    WatchEvent,
)
from pyfelix.datastore.layout import WATCH_PREFIX, decode_document, parse
from pyfelix.datastore.prefetch import Entry, ListingPrefetch
from pyfelix.errors import ManifestError
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.plain_workloads import PlainFields, from_fields, plain_workload
from pyfelix.syncer.processors import KV, Converter, convert

log = logging.getLogger(__name__)

#: A page as the resync decodes it: each key with its document where it came parsed.
_Page = tuple[list[tuple[KeyValue, "dict[str, Any] | PlainFields | None"]], int]
_DONE: Any = object()


def _entry(entry: Entry) -> tuple[KeyValue, dict[str, Any] | PlainFields | None]:
    key, mod_revision, create_revision, version, lease, document, value = entry
    return KeyValue(key, value, mod_revision, create_revision, version, lease), document


BACKOFF_START = 0.1
BACKOFF_MAX = 5.0
#: Keys per listing page (etcd's range limit): 100k endpoints listed to IN_SYNC in 12-14 s with
#: pages of 250, 5.0-5.7 s with 1,000, 3.9-4.3 s with 5,000 or 10,000 (a page of 5,000
#: endpoints is about 7 MB of JSON). Then pages fetched ahead of the one being decoded, and
#: keys decoded between two checkpoints (about 5 ms).
PAGE_SIZE = LIST_PAGE
PAGES_AHEAD = 1
CHECKPOINT_EVERY = 128


@attrs.define(eq=False)
class EtcdSyncer:
    client: EtcdClient
    callbacks: SyncerCallbacks
    prefix: str = WATCH_PREFIX
    _converter: Converter = attrs.Factory(Converter)
    _revisions: dict[str, int] = attrs.Factory(dict)
    _started: bool = False
    resyncs: int = 0
    page_size: int = PAGE_SIZE
    #: The first listing, fetched by a child process beside the agent's imports.
    prefetch: ListingPrefetch | None = None

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
        """List everything, send the differences from what was sent before, then IN_SYNC.

        Pages are fetched one ahead while the current one is decoded, so etcd (and the HTTP
        round trip) works on the next page beside this process; decoding yields every
        CHECKPOINT_EVERY keys so the fetch can go out. A listing after the watch broke
        changes no state until every page is in: then the revisions are recorded and the
        differences sent at once, so downstream sees one consistent snapshot, and a listing
        that fails half way leaves the syncer as it was. Until the first IN_SYNC there is
        nothing downstream to keep consistent (nothing is programmed before it, as in
        Felix), so the first listing sends each page as it is decoded: the calculation
        graph works through it while etcd and the listing's child serve the next pages,
        not all of it after the last. A first listing that breaks off and starts again
        sends what changed and, at its end, the deletions of what it no longer finds."""
        pages: trio.MemorySendChannel[_Page | EtcdError | None]
        pages, arriving = trio.open_memory_channel(PAGES_AHEAD)
        seen: set[str] = set()
        changed: list[tuple[KeyValue, tuple[KV, ...]]] = []
        revision = 0
        failure: EtcdError | None = None
        streaming = not self._started
        if streaming:
            self.callbacks.on_status(SyncStatus.RESYNC_IN_PROGRESS)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._fetch_pages, pages)
            async for item in arriving:
                if isinstance(item, EtcdError):
                    failure = item  # raised below, outside the nursery (not in a group)
                    break
                if item is None:
                    # The prefetched listing broke off: what it gave is dropped (or, sent
                    # already, corrected), the client's own listing follows.
                    seen.clear()
                    changed.clear()
                    continue
                batch, revision = item
                for index, (kv, document) in enumerate(batch):
                    seen.add(kv.key)
                    if self._revisions.get(kv.key) != kv.mod_revision:
                        changed.append((kv, self._produce(kv, document)))
                    if index % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
                        await trio.lowlevel.checkpoint()
                if streaming and changed:
                    self._send(self._changes(changed))
                    changed.clear()
        if failure is not None:
            raise failure
        if not streaming:
            self.callbacks.on_status(SyncStatus.RESYNC_IN_PROGRESS)
        self.resyncs += 1
        updates: list[Update] = []
        for key in [k for k in self._revisions if k not in seen]:
            updates.extend(self._record(key, None, (), revision))
        updates.extend(self._changes(changed))
        self._send(updates)
        self.callbacks.on_status(SyncStatus.IN_SYNC)
        return revision

    def _changes(self, changed: list[tuple[KeyValue, tuple[KV, ...]]]) -> list[Update]:
        """The Updates of keys listed with a revision other than the one last sent (recorded)."""
        updates: list[Update] = []
        for kv, produced in changed:
            updates.extend(self._record(kv.key, kv, produced, kv.mod_revision))
        return updates

    def _send(self, updates: list[Update]) -> None:
        if updates:
            self.callbacks.on_updates(updates)

    async def _fetch_pages(self, pages: trio.MemorySendChannel[_Page | EtcdError | None]) -> None:
        """The listing's pages (the prefetched one, the first time, while it lasts; then
        a None), then the channel closed; a failure is passed on as an item, so the resync
        raises it as the EtcdError it is (not inside an exception group)."""
        async with pages:
            prefetch, self.prefetch = self.prefetch, None
            if prefetch is not None and prefetch.active:
                try:
                    taken = prefetch.pages()
                    while (page := await trio.to_thread.run_sync(next, taken, _DONE)) is not _DONE:
                        if page is None:
                            await pages.send(None)
                            break
                        revision, _, entries = page
                        await pages.send(([_entry(e) for e in entries], revision))
                    else:
                        return
                finally:
                    prefetch.close()
            try:
                async for batch, revision in self.client.list_pages(self.prefix, self.page_size):
                    await pages.send(([(kv, None) for kv in batch], revision))
            except EtcdError as exc:
                await pages.send(exc)

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
        return self._record(key, kv, self._produce(kv) if kv is not None else (), revision)

    @staticmethod
    def _produce(
        kv: KeyValue, document: dict[str, Any] | PlainFields | None = None
    ) -> tuple[KV, ...]:
        """The model keys and values stored at ``kv`` (whose value is ``document`` when it
        was parsed already, or a plain endpoint's fields, checked where it was parsed): ()
        for a key pyfelix does not read, or for a value that is not JSON or not a valid
        resource (logged, treated as absent)."""
        if isinstance(document, tuple):
            return (from_fields(document)[1],)
        try:
            parsed = parse(kv.key, kv.value, document)
            if parsed is None:
                return ()
            cls, document = parsed
            if cls.KIND == "WorkloadEndpoint":
                plain = plain_workload(document)
                if plain is not None:
                    return (plain,)
            resource = decode_document(kv.key, cls, document, kv.mod_revision)
        except ManifestError as exc:
            log.warning("ignoring invalid value at %r (treated as absent): %s", kv.key, exc)
            return ()
        return tuple(convert(resource))

    def _record(
        self, key: str, kv: KeyValue | None, produced: tuple[KV, ...], revision: int
    ) -> list[Update]:
        if kv is None:
            self._revisions.pop(key, None)
        else:
            self._revisions[key] = kv.mod_revision
        return self._converter.produce(key, produced, str(revision))
