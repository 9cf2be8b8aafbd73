"""The file datastore: a directory of calicoctl manifests, watched for changes.

Start-up loads every manifest, emits the resulting Updates and then IN_SYNC. Afterwards each
change is turned into the Updates of exactly the resources that changed:

* inotify (on the kernel fd, awaited with ``trio.lowlevel.wait_readable``) reports paths; once a
  path has gone (deleted or renamed away), changes are gathered until the directory has been
  quiet for ``debounce`` seconds (20 ms: an editor's rename burst is far shorter), so an
  editor's save-by-rename or delete-and-recreate is seen as one change, never as
  delete-then-add; a batch of completed writes with nothing gone is read at once;
* a file being written (modified but not yet closed) is left alone until its writer closes it
  (or renames it into place): a file is complete when its writer has closed it. Other
  changes wait for it at most ``write_timeout``, then go ahead without it; a writer that holds
  a file open for good should write elsewhere and rename the file into place;
* a file that does not parse keeps its resources' last values (the error is logged with file and
  line); a deleted file deletes its resources;
* where inotify is unavailable, at the start or later (a new directory past the watch limit),
  the directory is polled every ``poll_interval`` seconds.

If two files define the same Kind/namespace/name, the one whose path sorts first wins (as
``pyfelix validate`` reports); when it goes, the other takes over.

The datastore must be readable before anything is sent: a path that does not exist (yet) is
reported every ``missing_report`` seconds and waited for, so the agent never programs an empty
node from a typo. If the directory is replaced (moved away and copied back, a new checkout),
the watches follow the new one and everything is re-read; while it is missing, the resources
last read are kept.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import cast

import attrs
import trio

from pyfelix.resources.loader import (
    MANIFEST_SUFFIXES,
    Direct,
    LoadResult,
    Located,
    escapes,
    load_parsed,
    load_text,
    manifest_files,
    read_manifest,
)
from pyfelix.resources.meta import Resource
from pyfelix.resources.parse_cache import ParseCache, Stat, stat_key
from pyfelix.resources.parsing import Parsed
from pyfelix.resources.shared_parse import ParsePrefetch
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.syncer.inotify import Event, Inotify, InotifyUnavailable
from pyfelix.syncer.plain_namespaces import plain_digest, plain_entry
from pyfelix.syncer.processors import KV, Converter

log = logging.getLogger(__name__)

#: The resources whose updates are made and handed on at a time, the Trio loop let run between
#: (converting 20,000 took 0.3 s of it in one piece: the health server waited).
EMIT_CHUNK = 2000
#: Files the first read's worker may read ahead of the updates made from them (it then waits:
#: the updates, on the Trio thread, share this process's core with it anyway).
READS_AHEAD = 4


@attrs.frozen
class _Read:
    """What reading one path found: it is gone (or a directory now), its resources, or
    nothing to change (unreadable or unparsable: its last resources are kept)."""

    gone: bool = False
    resources: dict[Identity, Located | Direct] | None = None
    stat: tuple[int, int] = (0, 0)


def _read_one(
    path: Path, prefetched: tuple[Stat, Parsed] | None = None, cache: ParseCache | None = None
) -> _Read:
    """``path``'s resources; ``prefetched`` documents stand for its text while the file is
    still the one they were parsed from, and ``cache`` parses it when it is not."""
    if path.is_dir():
        # A file replaced by a directory: its resources go (the manifests inside are read as
        # files of their own).
        return _Read(gone=True)
    try:
        stat = path.stat()
        if prefetched is not None and prefetched[0] == stat_key(stat):
            result = load_parsed(prefetched[1], str(path), plain_entry)
        elif cache is not None:
            parsed: Parsed | LoadResult | None = cache.lookup(path, stat_key(stat))
            if parsed is None:
                parsed = cache.parse(read_manifest(path), str(path), plain_digest)
            if isinstance(parsed, LoadResult):
                result = parsed
            else:
                result = load_parsed(parsed, str(path), plain_entry)
        else:
            result = load_text(read_manifest(path), str(path), direct=plain_entry)
    except FileNotFoundError:
        return _Read(gone=True)
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s: cannot read (%s); keeping its last resources", path, exc)
        return _Read()
    for problem in result.problems:
        log.warning("%s", problem)
    if result.unparsable:
        log.warning("%s: keeping the resources it held until it parses again", path)
        return _Read()
    resources: dict[Identity, Located | Direct] = {item.key: item for item in result.resources}
    resources.update((item.key, item) for item in result.direct)
    return _Read(resources=resources, stat=(stat.st_mtime_ns, stat.st_size))


def _read_all(
    paths: list[Path], prefetch: ParsePrefetch | None = None, cache: ParseCache | None = None
) -> list[_Read]:
    """Every path read; with ``prefetch``, the documents its child parsed taken from it, in
    the order it gives (``ParsePrefetch.schedule``); with ``cache``, what an earlier start
    parsed."""
    reads: dict[int, _Read] = {}
    _read_each(paths, prefetch, cache, reads.__setitem__)
    return [reads[n] for n in range(len(paths))]


def _read_each(
    paths: list[Path],
    prefetch: ParsePrefetch | None,
    cache: ParseCache | None,
    deliver: Callable[[int, _Read], object],
) -> None:
    """``_read_all``, each read handed to ``deliver`` with its path's index as it is made."""
    if prefetch is None:
        for n, path in enumerate(paths):
            deliver(n, _read_one(path, cache=cache))
        return
    for n, prefetched in prefetch.schedule(paths):
        deliver(n, _read_one(paths[n], prefetched, cache))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


Identity = tuple[str, str, str]


def _special(path: Path) -> bool:
    """Whether ``path`` is there and is neither a regular file nor a directory (a FIFO, a
    socket, a device; through a symlink too): never a manifest, and never "written" (a FIFO
    is opened but never closed after a write), so its events are not waited for."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (S_ISREG(mode) or S_ISDIR(mode))


@attrs.define(eq=False)
class FileSyncer:
    """Watches ``root`` (a directory, or one manifest file) and feeds ``callbacks``."""

    root: Path
    callbacks: SyncerCallbacks
    debounce: float = 0.02
    write_timeout: float = 5.0
    poll_interval: float = 2.0
    use_inotify: bool = True
    missing_report: float = 10.0
    #: The first read's files, parsed ahead by a worker (``ParsePrefetch``); used once.
    prefetch: ParsePrefetch | None = None
    #: What earlier starts parsed (``ParseCache``): the first read's, which indexes and prunes
    #: it ``cache_upkeep_delay`` seconds after.
    cache: ParseCache | None = None
    cache_upkeep_delay: float = 5.0
    _files: dict[Path, dict[Identity, Located | Direct]] = attrs.Factory(dict)
    #: What each identity stands for now: its resource, or (for a plain endpoint, pod,
    #: namespace or service account, which goes straight to the model) its model keys and
    #: values.
    _current: dict[Identity, Resource | tuple[KV, ...]] = attrs.Factory(dict)
    _providers: dict[Identity, set[Path]] = attrs.Factory(dict)
    _converter: Converter = attrs.Factory(Converter)
    _revision: int = 0
    _stats: dict[Path, tuple[int, int]] = attrs.Factory(dict)
    _watcher: Inotify | None = None
    #: The watched directory's (device, inode): a different one means it was replaced.
    _identity: tuple[int, int] | None = None
    #: Files modified and not closed yet: read once their writer closes them.
    _open_for_writing: set[Path] = attrs.Factory(set)
    _reported_open: set[Path] = attrs.Factory(set)
    #: Directories that came, went or moved since the last refresh: what is below them is re-read.
    _changed_directories: set[Path] = attrs.Factory(set)

    @property
    def _directory(self) -> Path:
        return self.root if self.root.is_dir() else self.root.parent

    def _is_manifest(self, path: Path) -> bool:
        if not self.root.is_dir():
            return path == self.root
        try:
            relative = path.relative_to(self.root)
        except ValueError:
            return False
        if path.suffix not in MANIFEST_SUFFIXES or any(
            part.startswith(".") for part in relative.parts
        ):
            return False
        if path.exists() and escapes(self.root, path):
            log.warning("%s leads out of %s; not followed", path, self.root)
            return False
        return True

    def _below_root(self, path: Path) -> bool:
        return self.root.is_dir() and path != self.root and path.is_relative_to(self.root)

    def _under(self, directories: set[Path]) -> set[Path]:
        """The manifests below ``directories`` now, and the files held from below them."""
        found: set[Path] = set()
        for directory in directories:
            if directory.is_dir():
                found.update(p for p in manifest_files(directory) if self._is_manifest(p))
            found.update(p for p in self._files if p.is_relative_to(directory))
        return found

    def _all_manifests(self) -> list[Path]:
        if not self.root.exists():
            return []
        return manifest_files(self.root)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.callbacks.on_status(SyncStatus.WAIT_FOR_DATASTORE)
        await self._until_readable()
        watcher = self._open_watcher()
        try:
            self.callbacks.on_status(SyncStatus.RESYNC_IN_PROGRESS)
            prefetch, self.prefetch = self.prefetch, None
            cache, self.cache = self.cache, None
            started = time.time()
            await self._refresh(self._all_manifests(), prefetch, cache)
            self.callbacks.on_status(SyncStatus.IN_SYNC)
            task_status.started()
            async with trio.open_nursery() as nursery:
                if cache is not None:
                    nursery.start_soon(self._keep, cache, started)
                if watcher is not None:
                    await self._watch(watcher)
                else:
                    await self._poll()
        finally:
            if self._watcher is not None:
                self._watcher.close()

    async def _keep(self, cache: ParseCache, started: float) -> None:
        """The first read's cache kept for the next start, once the first apply has started
        (this would slow it): indexed by the files' stats, and what the read did not touch
        removed (a second of slack for coarse file times)."""
        await trio.sleep(self.cache_upkeep_delay)
        try:
            await trio.to_thread.run_sync(cache.write_index, self._all_manifests())
            await trio.to_thread.run_sync(cache.prune, started - 1.0)
        except OSError as exc:  # a cache is never worth the datastore's watch
            log.warning("cannot keep the parsed manifests in %s: %s", cache.directory, exc)

    def _readable(self) -> bool:
        return self.root.is_dir() or self.root.is_file()

    async def _until_readable(self) -> None:
        """Wait, loudly, until the datastore path exists: nothing is sent before."""
        reported_at = -math.inf
        while not self._readable():
            if trio.current_time() - reported_at >= self.missing_report:
                reported_at = trio.current_time()
                log.error(
                    "datastore %s does not exist or cannot be read; nothing is programmed"
                    " until it can be",
                    self.root,
                )
            await trio.sleep(min(self.poll_interval, 1.0))

    def _open_watcher(self) -> Inotify | None:
        self._watcher = None
        if not self.use_inotify:
            return None
        watcher = None
        try:
            watcher = Inotify()
            watcher.watch_tree(self._directory)
        except (InotifyUnavailable, OSError) as exc:
            log.warning("inotify unavailable (%s); polling every %ss", exc, self.poll_interval)
            if watcher is not None:
                watcher.close()
            return None
        self._watcher = watcher
        self._identity = _identity(self._directory)
        return watcher

    async def _watch(self, watcher: Inotify) -> None:
        while True:
            try:
                dirty, rescan = await self._gather(watcher)
            except OSError as exc:
                # A new directory's watch refused (max_user_watches reached, ENOSPC) or the
                # inotify descriptor broken: the start's fallback, now. Events since the
                # last batch may be lost, so everything is read again first.
                log.warning("inotify failed (%s); polling every %ss", exc, self.poll_interval)
                watcher.close()
                self._watcher = None
                await self._refresh(set(self._all_manifests()) | set(self._files))
                await self._poll()
                return
            if _identity(self._directory) != self._identity:
                # Replaced (or gone): the watches are on the old directory's inodes.
                if not self._readable():
                    log.error("datastore %s is gone; keeping what it held", self.root)
                    await self._until_readable()
                log.warning("datastore %s was replaced; re-reading it", self.root)
                watcher.close()
                replacement = self._open_watcher()
                if replacement is None:
                    await self._poll()
                    return
                watcher, rescan = replacement, True
            if rescan:
                paths = set(self._all_manifests()) | set(self._files)
            else:
                paths = dirty | self._under(self._changed_directories)
            self._changed_directories = set()
            await self._refresh(paths - self._open_for_writing)

    async def _gather(self, watcher: Inotify) -> tuple[set[Path], bool]:
        """Collect changed paths until quiet for ``debounce`` and no file is mid-write; every
        ``poll_interval`` without events, return (so the caller can check the directory is
        still the one watched). A file still open for writing is left out until closed."""
        dirty: set[Path] = set()
        writing = self._open_for_writing
        rescan = False
        write_deadline = math.inf
        events: list[Event] = []
        with trio.move_on_after(self.poll_interval):
            events = await watcher.read()
        if not events:
            return dirty, rescan
        removal = False
        while True:
            for event in events:
                if event.overflow or (event.is_dir and not self._below_root(event.path)):
                    rescan = True
                elif event.is_dir:
                    # A directory came or went (or was renamed): only what is below it, not
                    # every manifest (100,000 files took 194 s to re-read for one mkdir).
                    self._changed_directories.add(event.path)
                    removal = removal or event.removed
                elif self._is_manifest(event.path) and not _special(event.path):
                    dirty.add(event.path)
                    removal = removal or event.removed
                    if event.write_finished:
                        writing.discard(event.path)
                    elif event.write_started and not event.path.is_symlink():
                        # A new symlink is complete at once; a written file when closed.
                        writing.add(event.path)
                        write_deadline = min(
                            write_deadline, trio.current_time() + self.write_timeout
                        )
            events = []
            if removal or rescan or writing:
                with trio.move_on_after(self.debounce):
                    events = await watcher.read()
            else:
                # Every file in the batch is complete and none went: nothing is to come.
                events = watcher.read_ready()
            if events:
                continue
            if writing and trio.current_time() < write_deadline:
                continue
            held = dirty & writing
            for path in sorted(held - self._reported_open):
                log.warning(
                    "%s is still open for writing after %gs; its changes wait until it is"
                    " closed (write it elsewhere and rename it into place)",
                    path,
                    self.write_timeout,
                )
            self._reported_open = held
            return dirty - writing, rescan

    async def _poll(self) -> None:
        while True:
            await trio.sleep(self.poll_interval)
            if not self._readable():
                await self._until_readable()  # keeping what it held meanwhile
            present = self._all_manifests()
            changed = [p for p in present if self._signature(p) != self._stats.get(p)]
            changed.extend(p for p in self._files if p not in present)
            if changed:
                await self._refresh(changed)

    @staticmethod
    def _signature(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    async def _refresh(
        self,
        paths: Iterable[Path],
        prefetch: ParsePrefetch | None = None,
        cache: ParseCache | None = None,
    ) -> None:
        """Re-read ``paths`` and emit the Updates of the resources that changed.

        Reading and parsing run in a worker thread (a 50 MB file must not stop the Trio loop,
        which answers /liveness), the bookkeeping and the Updates on the Trio thread, in
        chunks of EMIT_CHUNK resources with the loop let run between. Only identities defined
        (before or after) in those files are re-examined, so an edit costs what the edited
        file holds, not what the whole directory holds.
        """
        ordered = sorted(set(paths))
        if prefetch is not None:
            await self._take_as_read(ordered, prefetch, cache)
            return
        reads = await trio.to_thread.run_sync(_read_all, ordered, None, cache)
        await self._take(zip(ordered, reads, strict=True))

    async def _take_as_read(
        self, ordered: list[Path], prefetch: ParsePrefetch, cache: ParseCache | None
    ) -> None:
        """The first read with its parsing worker: each file's updates made as soon as it is
        read, in whatever order the two sides read them (the child from the first file, this
        process from the last), so that the graph's work overlaps the child's parsing; the
        winner of an identity two files define is settled as in any read (the first path in
        sort order), the other file's definition replaced if it came first."""
        send, receive = trio.open_memory_channel[tuple[int, _Read]](READS_AHEAD)

        def deliver(n: int, read: _Read) -> None:
            trio.from_thread.run(send.send, (n, read))

        async def read() -> None:
            # Cancelled (the loop below failed, or the agent stops), the worker's next
            # delivery raises Cancelled in it, which ends it.
            async with send:
                await trio.to_thread.run_sync(_read_each, ordered, prefetch, cache, deliver)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            async with receive:
                async for n, one in receive:
                    await self._take([(ordered[n], one)])

    async def _take(self, reads: Iterable[tuple[Path, _Read]]) -> None:
        """The bookkeeping of ``reads`` (each path with what reading it found), and the
        Updates of every identity they define or defined."""
        affected: set[Identity] = set()
        for path, read in reads:
            before = set(self._files.get(path, {}))
            if read.gone:
                self._files.pop(path, None)
                self._stats.pop(path, None)
            elif read.resources is not None:
                self._files[path] = read.resources
                self._stats[path] = read.stat
            after = self._files.get(path, {}).keys()
            providers = self._providers
            for identity in before - after:
                providers.get(identity, set()).discard(path)
            for identity in after:
                found = providers.get(identity)
                if found is None:
                    providers[identity] = {path}
                else:
                    found.add(path)
            affected |= before
            affected |= after
        identities = sorted(affected)
        for start in range(0, len(identities), EMIT_CHUNK):
            if start:
                await trio.lowlevel.checkpoint()
            self._emit(identities[start : start + EMIT_CHUNK])

    def _winner(self, identity: Identity) -> Resource | tuple[KV, ...] | None:
        """The definition from the first path (in sort order) that defines ``identity``."""
        providers = self._providers.get(identity)
        if not providers:
            self._providers.pop(identity, None)
            return None
        if len(providers) == 1:
            (path,) = providers  # nearly always: no sorting
        else:
            paths = sorted(providers)
            path = paths[0]
            log.warning("%s defined in %s; using %s", identity, ", ".join(map(str, paths)), path)
        item = self._files.get(path, {}).get(identity)
        if item is None:
            return None
        return item.resource if isinstance(item, Located) else cast(tuple[KV, ...], item.value)

    def _emit(self, affected: Iterable[Identity]) -> None:
        """The Updates of ``affected`` (in order), handed on in one batch."""
        self._revision += 1
        revision = str(self._revision)
        updates: list[Update] = []
        current, providers, files = self._current, self._providers, self._files
        produce_new = self._converter.produce_new
        for identity in affected:
            found = providers.get(identity)
            if found is not None and len(found) == 1 and identity not in current:
                # Nearly every identity of a first read: new, in one file, and (a plain
                # endpoint or pod) a model key of its own; taken without the general path's
                # lookups (a third of a large first read's bookkeeping).
                (path,) = found
                item = files[path].get(identity)
                if isinstance(item, Direct):
                    kvs = cast(tuple[KV, ...], item.value)
                    update = produce_new(identity, kvs[0], revision) if len(kvs) == 1 else None
                    if update is not None:
                        current[identity] = kvs
                        updates.append(update)
                        continue
            old, new = current.get(identity), self._winner(identity)
            if old == new:
                continue
            if new is None:
                del self._current[identity]
            else:
                self._current[identity] = new
            if new is None or isinstance(new, Resource):
                updates.extend(self._converter.update(identity, new, revision))
            else:
                updates.extend(self._converter.produce(identity, new, revision))
        if updates:
            self.callbacks.on_updates(updates)

    @property
    def identities(self) -> set[Identity]:
        """The Kind/namespace/name of every resource the datastore holds now."""
        return set(self._current)
