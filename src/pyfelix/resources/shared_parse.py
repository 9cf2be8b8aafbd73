"""The agent's first read of a big YAML directory, parsed on two cores (``ParsePrefetch``,
which starts before the agent's imports), and the forked worker it runs in.

Parsing is most of a YAML load (libyaml composes a node tree that Python then walks: some
80 us a document against 4 us for JSON; yaml-rs 14-17 us). Here a child parses the files in
order while this process, its imports done, decodes what the child delivers and parses files
from the end itself; each file's documents go back as one marshal record (a few us a
document) through an unlinked temporary file, which the child writes without waiting for
this process to read. A file the child could not read or parse, or records of a child that
failed, are loaded here instead. (The dry-run's child, which validates as well, hands its
files on through ``pyfelix.validation.loading``.)
"""

from __future__ import annotations

import logging
import marshal
import mmap
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from pyfelix import collection
from pyfelix.resources.containment import contain
from pyfelix.resources.loader import (
    Digest,
    manifest_files_and_links,
    read_manifest,
)
from pyfelix.resources.parse_cache import ParseCache, Stat, file_stat, parse_marshalled
from pyfelix.resources.parsing import Parsed

log = logging.getLogger(__name__)

_LENGTH = 8


def available_cores() -> int:
    """The cores this process may run on (a worker beside it is worth it from two)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        return os.cpu_count() or 1


def file_size(path: Path) -> int:
    """``path``'s size, 0 if it cannot be read (its load reports why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _spool() -> BinaryIO:
    """An unlinked temporary file, in memory (/dev/shm) where there is one."""
    shm = "/dev/shm"
    return tempfile.TemporaryFile(dir=shm if os.path.isdir(shm) else None)


def fork_worker(work: Callable[[BinaryIO], object]) -> tuple[int, BinaryIO] | None:
    """A forked child running ``work`` into a spool and leaving without any cleanup (exit
    status 0 when it finished), its cyclic collector off; its pid and the spool, or None if
    there is no fork."""
    spool = _spool()
    try:
        pid = os.fork()
    except OSError as exc:
        log.info("no parsing worker (%s): parsing here", exc)
        spool.close()
        return None
    if pid == 0:
        # What a worker makes is dropped as it is written, and trees hold no cycles; a full
        # collection would walk the whole heap the child inherited (20 ms of a first read).
        collection.pause_while_loading()
        contain()  # a native crash here is this worker's, which the parent survives
        status = 1
        try:
            work(spool)
            status = 0
        finally:
            os._exit(status)
    return pid, spool


def stop_worker(pid: int, spool: BinaryIO | None) -> None:
    """Kill and reap a worker still running (``pid`` 0: none), and close its spool."""
    if pid:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if spool is not None:
        spool.close()


def _prefetch_into(
    spool: BinaryIO, file: Path, stat: Stat | None, digest: Digest | None, cache: ParseCache | None
) -> bool:
    """One file of the prefetch as a record (its path, ``stat`` as the file was when read,
    its documents marshalled, each ``digest`` takes as the tuple it gives), from ``cache``
    when it holds them (their bytes handed on as kept: one marshal a file, or none); whether
    it was written (a file gone, or one that cannot be read, parsed or marshalled, is the
    parent's)."""
    if stat is None:
        return False
    try:
        text = read_manifest(file)
    except (OSError, UnicodeDecodeError):
        return False
    if cache is not None:
        data = cache.parse_marshalled(text, str(file), digest)
    else:
        data = parse_marshalled(text, str(file), digest)
    if data is None:
        return False
    _write_record(spool, marshal.dumps((str(file), stat, data)))
    spool.flush()
    return True


def _write_record(spool: BinaryIO, record: bytes) -> None:
    spool.write(len(record).to_bytes(_LENGTH, "little"))
    spool.write(record)


#: What became of a file of the prefetch, in its byte of shared memory: nobody's yet, claimed
#: by the parent, being parsed by the child, its record written, or left to the parent.
_FREE, _PARENT, _CHILD, _DELIVERED, _SKIPPED = 0, 1, 2, 3, 4
#: Below this many bytes of YAML the agent parses its first read alone.
MIN_PREFETCH_BYTES = 1 << 20
#: How long this process sleeps while the child finishes the file it needs next and no other
#: file is left for it to parse.
WAIT = 0.0005

Prefetched = tuple[Stat, Parsed]


class ParsePrefetch:
    """The agent's first read of a manifest directory, parsed on the other core.

    Started before the agent imports its pipeline (a fifth of a second), a forked child parses
    the files in order, from the first; this process, its imports done, decodes each file's
    documents as the child delivers them, and whenever the child is still parsing the file it
    needs next, claims the last file nobody has and parses that itself: each side claims a file
    (one byte of shared memory) before parsing it and stops at the first file the other side
    claimed, so they meet wherever the two sides' speeds put them; a file both claimed at once
    is parsed twice, and this process keeps its own. The child's documents come back as
    marshal records with the file's stat as the child read it: a file changed since, or one
    the child could not parse, is read again here. What this leaves to the caller: reading,
    decoding and reporting each file, in the order ``schedule`` gives.
    """

    def __init__(
        self,
        root: Path,
        digest: Callable[[], Digest] | None = None,
        cache: ParseCache | None = None,
    ) -> None:
        """``digest`` gives, in the child (where it may import what it needs), the half of
        the caller's direct decoder to run there; ``cache`` holds what an earlier first read
        parsed (and gets what this one parses)."""
        self._pid = 0
        self._spool: BinaryIO | None = None
        self._index: dict[Path, int] = {}
        self._offset = 0
        self._records: dict[str, tuple[Stat, bytes]] = {}
        files = manifest_files_and_links(root)[0] if root.is_dir() else []
        yaml_bytes = sum(file_size(f) for f in files if f.suffix != ".json")
        if yaml_bytes < MIN_PREFETCH_BYTES or available_cores() < 2:
            return
        if cache is not None and cache.fresh(files):
            # A restart's files, all in the cache as they are now: read here, nothing to
            # parse (a fork would cost this process more than the child could save it).
            return
        self._claims = mmap.mmap(-1, len(files))  # anonymous and shared with the child
        worker = fork_worker(lambda spool: self._parse_forwards(spool, files, digest, cache))
        if worker is None:
            return
        self._pid, self._spool = worker
        self._index = {file: n for n, file in enumerate(files)}

    def _parse_forwards(
        self,
        spool: BinaryIO,
        files: list[Path],
        digest: Callable[[], Digest] | None,
        cache: ParseCache | None,
    ) -> None:
        claims = self._claims
        checks = None if digest is None else digest()
        for n, file in enumerate(files):
            if claims[n] != _FREE:
                break
            claims[n] = _CHILD
            stat = file_stat(file)
            # The state changes once the record is flushed: the parent reads it only then.
            written = _prefetch_into(spool, file, stat, checks, cache)
            claims[n] = _DELIVERED if written else _SKIPPED

    def schedule(self, paths: list[Path]) -> Iterator[tuple[int, Prefetched | None]]:
        """Each of ``paths`` once, by its index, with the child's documents for it (None: read
        it here), in the order that keeps this process busy: a file the child delivered, the
        next one in order; while the child is parsing that one, a file from the end."""
        if not self._pid:
            yield from ((n, None) for n in range(len(paths)))
            return
        claims = self._claims
        back = len(paths)
        for front in range(len(paths)):
            if front >= back:
                break
            n = self._index.get(paths[front])
            # Not yet delivered: the child is at it or will be; a file from the end meanwhile.
            while n is not None and claims[n] in (_FREE, _CHILD) and self._running():
                if back - 1 > front and self._claim(paths[back - 1]):
                    back -= 1
                    yield back, None
                elif not self._claim(paths[front]):
                    time.sleep(WAIT)
            state = _PARENT if n is None else claims[n]
            yield front, self._delivered(paths[front]) if state == _DELIVERED else None
        self.close()

    def _claim(self, path: Path) -> bool:
        """Whether this process takes ``path`` (at the back: the child has not reached it)."""
        n = self._index.get(path)
        if n is None:
            return True
        if self._claims[n] != _FREE:
            return False
        self._claims[n] = _PARENT
        return True

    def _running(self) -> bool:
        """Whether the child is still at work; once it has gone, a file it was parsing is read
        here (its records until then stand)."""
        if not self._pid:
            return False
        pid, status = os.waitpid(self._pid, os.WNOHANG)
        if pid == 0:
            return True
        self._pid = 0
        if status != 0:
            log.warning("parsing worker failed (status %d): parsing here", status)
        return False

    def _delivered(self, path: Path) -> Prefetched | None:
        """The child's record for ``path``, reading on from the last one taken (the child
        writes them in its files' order, and this process asks in the same order)."""
        assert self._spool is not None
        descriptor = self._spool.fileno()
        wanted = str(path)
        while wanted not in self._records:
            # pread: the child's writes go on at the offset this open file shares with it.
            header = os.pread(descriptor, _LENGTH, self._offset)
            if len(header) < _LENGTH:
                return None
            length = int.from_bytes(header, "little")
            source, stat, data = marshal.loads(os.pread(descriptor, length, self._offset + _LENGTH))
            self._offset += _LENGTH + length
            self._records[source] = (tuple(stat), data)
        stat, data = self._records.pop(wanted)
        try:
            parsed = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            parsed = None  # a cache entry spoilt on disk: the file is read here
        return (stat, parsed) if isinstance(parsed, list) else None

    def close(self) -> None:
        """Stop and reap the child (done, or parsing a file this process has read too)."""
        stop_worker(self._pid, self._spool)
        self._pid = 0
        self._spool = None
        self._records = {}
