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
    EtcdUnavailable,
    KeyValue,
    WatchEvent,
)
from pyfelix.datastore.layout import WATCH_PREFIX, decode_document, parse
from pyfelix.datastore.prefetch import Entry, ListingPrefetch
from pyfelix.errors import ManifestError
from pyfelix.health import HealthAggregator
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.plain_workloads import PlainFields, from_fields, plain_workload
from pyfelix.syncer.processors import (
    DEFAULT_ALLOW_PROFILE,
    KV,
    Converter,
    convert,
    default_allow_profile,
)

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
#: Felix's etcd keepalive: a probe after this much silence on the watch, and how long the
#: answer (or the watch's catching up) may take.
KEEPALIVE_INTERVAL = 30.0
KEEPALIVE_TIMEOUT = 10.0
#: The health component a stalled watch makes not ready.
DATASTORE_WATCH = "DatastoreWatch"
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
    #: Where a stalled watch is reported (not ready while it lasts).
    health: HealthAggregator | None = None
    keepalive_interval: float = KEEPALIVE_INTERVAL
    keepalive_timeout: float = KEEPALIVE_TIMEOUT
    _heard: float = 0.0
    _seen_revision: int = 0

    def __attrs_post_init__(self) -> None:
        if self.health is not None:
            self.health.register(DATASTORE_WATCH, timeout=0, ready=True)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.callbacks.on_status(SyncStatus.WAIT_FOR_DATASTORE)
        # Calico's backends always hold this profile, etcd's as the Kubernetes API's.
        produced = tuple(convert(default_allow_profile()))
        self.callbacks.on_updates(self._converter.produce(DEFAULT_ALLOW_PROFILE, produced, "1"))
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
        """Follow the watch, beside its keepalive; a stall ends it in EtcdUnavailable."""
        self._seen_revision = start_revision - 1
        self._report_stall("")  # listed: the datastore answers again
        stalled: list[str] = []
        failure: EtcdError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keepalive, nursery.cancel_scope, stalled)
            pending: list[Update] = []
            try:
                async for event in self.client.watch(self.prefix, start_revision):
                    self._heard = trio.current_time()
                    self._seen_revision = max(self._seen_revision, event.kv.mod_revision)
                    pending.extend(self._event(event))
                    # Flush once the gateway has nothing more buffered for us right now.
                    if pending:
                        self.callbacks.on_updates(pending)
                        pending = []
            except EtcdError as exc:
                failure = exc  # raised below, outside the nursery (not in a group)
            nursery.cancel_scope.cancel()
        if stalled:
            self._report_stall(stalled[0])
            raise EtcdUnavailable(stalled[0])
        if failure is not None:
            raise failure

    async def _keepalive(self, watch: trio.CancelScope, stalled: list[str]) -> None:
        """Felix's etcd client keeps its watch alive with gRPC keepalives (a ping after 30 s
        of silence, 10 s for the answer); over the JSON gateway the probe is a count: after
        KEEPALIVE_INTERVAL without an event, how many keys changed since the last one the
        watch delivered. No answer within KEEPALIVE_TIMEOUT, or changes the watch still has
        not delivered KEEPALIVE_TIMEOUT later, is a stalled watch: it is cancelled (the
        caller lists again and watches anew), and health says so until a watch works."""
        self._heard = trio.current_time()
        while True:
            await trio.sleep_until(self._heard + self.keepalive_interval)
            if trio.current_time() < self._heard + self.keepalive_interval:
                continue  # an event came meanwhile
            probed_at = self._seen_revision
            changed = None
            with trio.move_on_after(self.keepalive_timeout):
                try:
                    changed = await self.client.count_modified_since(self.prefix, probed_at)
                except EtcdError as exc:
                    stalled.append(f"etcd watch keepalive failed ({exc}); watching anew")
                    watch.cancel()
                    return
            if changed is None:
                stalled.append(
                    f"etcd did not answer the watch keepalive in {self.keepalive_timeout:g} s;"
                    " watching anew"
                )
                watch.cancel()
                return
            if changed:
                await trio.sleep(self.keepalive_timeout)
                if self._seen_revision == probed_at:
                    stalled.append(
                        f"the etcd watch delivered none of {changed} changes in"
                        f" {self.keepalive_timeout:g} s (a stalled connection); watching anew"
                    )
                    watch.cancel()
                    return
            else:
                self._report_stall("")
                self._heard = trio.current_time()

    def _report_stall(self, why: str) -> None:
        if why:
            log.warning("%s", why)
        if self.health is not None:
            self.health.report(DATASTORE_WATCH, live=True, ready=not why, detail=why)

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
