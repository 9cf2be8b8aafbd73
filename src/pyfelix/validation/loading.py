"""Validation of a large load on the second core, while the first computes.

A one-shot command on a big datastore directory spends half its time decoding and half of the
rest validating; both are per file, but handing resources between processes costs more than
decoding them (pickling a resource takes 20 us, decoding and validating it 33 us, measured in
bench/RESULTS.md). What crosses cheaply is the verdict. So ``BackgroundValidation`` forks a
child that loads and validates every file itself, keeping only the problems (it drops each
file's resources once checked, so its memory stays small), while this process loads the same
files without validating them and computes. The caller then asks for the problems, which are
what ``validate_loaded`` of this process's load would have returned, in the same order.

A worker that cannot be forked, fails or returns garbage costs time, not results: the problems
are then found here.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import logging
import marshal
import os
import pickle
import select
import termios
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast, overload

from pyfelix.errors import Problem
from pyfelix.resources import FelixConfiguration, LoadResult, Located
from pyfelix.resources.cluster import Node
from pyfelix.resources.containment import contain
from pyfelix.resources.field_lines import read_texts, sources_of, with_field_lines
from pyfelix.resources.loader import (
    Digest,
    Direct,
    DirectDecoder,
    TextReader,
    duplicate_problem,
    is_list_document,
    load_file,
    load_parsed,
    load_paths,
    manifest_sources,
    parse_text,
    read_manifest,
)
from pyfelix.resources.parse_cache import digested
from pyfelix.resources.parsing import Parsed
from pyfelix.resources.shared_parse import available_cores, file_size
from pyfelix.validation import context_from, validate_loaded, validate_located
from pyfelix.validation.kinds import PERMISSIVE, context_problems

if TYPE_CHECKING:
    from pyfelix.resources import WorkloadEndpoint

log = logging.getLogger(__name__)

#: Below this many bytes of manifests a fork costs more than it saves.
PARALLEL_MIN_BYTES = 8 << 20


#: How ``validate_paths`` loads a file (``load_file``, or one that hands its documents on).
FileLoader = Callable[[Path, DirectDecoder | None], LoadResult]


def _worth_a_worker(files: list[Path]) -> bool:
    return available_cores() >= 2 and sum(map(file_size, files)) >= PARALLEL_MIN_BYTES


def validate_paths(
    paths: Iterable[Path | str],
    direct: DirectDecoder | None = None,
    load: FileLoader = load_file,
    hostname: str = "",
) -> list[Problem]:
    """``validate_loaded(load_paths(paths, direct))``, one file at a time (each loaded by
    ``load``, ``load_file``'s equal): only problems are kept (a direct decoder takes only
    valid documents: those are checked for duplicates).

    Problems come in validate_loaded's order: the load's (paths, then each file's), the
    duplicates across files, then each kept resource's, each followed by those that depend on
    the cluster's settings, known once every file is in; then sorted by file and line."""
    files, load_problems = manifest_sources(paths)
    duplicates: list[Problem] = []
    checked: list[tuple[Located | None, list[Problem]]] = []
    first: dict[tuple[str, str, str], tuple[str, int | None]] = {}
    configurations = []
    for file in files:
        result = load(file, direct)
        load_problems.extend(result.problems)
        entries: tuple[Direct | Located, ...] = (*result.direct, *result.resources)
        for item in entries:
            earlier = first.get(item.key)
            if earlier is not None:
                duplicates.append(duplicate_problem(item, *earlier))
                continue
            first[item.key] = (item.source, item.line)
            if not isinstance(item, Located):
                continue  # a direct decoder takes valid documents only
            if isinstance(item.resource, FelixConfiguration) or (
                isinstance(item.resource, Node) and item.resource.name == hostname
            ):
                configurations.append(item.resource)
            found = validate_located(item, PERMISSIVE)
            spoofing = item.resource.KIND == "WorkloadEndpoint" and bool(
                cast("WorkloadEndpoint", item.resource).spec.allow_spoofed_source_prefixes
            )
            if found or spoofing:
                checked.append((item if spoofing else None, found))
    context = context_from(configurations, hostname)
    problems = load_problems + duplicates
    for spoofer, found in checked:
        problems.extend(found)
        if spoofer is not None and context != PERMISSIVE:
            problems.extend(
                Problem(spoofer.source, p.message, spoofer.line, spoofer.resource.ident, p.field)
                for p in context_problems(spoofer.resource, context)
            )
    problems = with_field_lines(problems, read_texts(sources_of(problems)))
    return sorted(problems, key=lambda p: (p.source, p.line or 0))


#: How many bytes of handed-on documents the child may write ahead of this process's reading
#: (the pipe's size: a few files of endpoints); beyond it the child waits, so its documents
#: never pile up in memory.
HAND_ON_PIPE_BYTES = 1 << 20
_LENGTH = 8


class BackgroundValidation:
    """``validate_paths(paths, direct)`` in a forked child, started now; ``problems`` collects
    it.

    With ``hand_on``, the child also hands each file's documents on as it reads them, before
    checking them, with those ``hand_on`` takes replaced by the tuple it gives (plain
    endpoints' checked fields): ``loaded`` then gives each file's load from them, so this
    process neither parses nor checks anything the child does, and can compute each file as it
    arrives while the child goes on. ``hand_on_text``, called in the child, gives what reads a
    document's JSON text (``TextReader``): the items of a JSON List holding its marker are
    then offered to it as their texts before any is parsed. ``hand_on_spare`` is work that
    may be done on either side (policies converted): the child offers a file's documents to
    it too when this process is behind (``_reader_behind``), so that both cores stay busy
    whichever is the slower."""

    def __init__(
        self,
        paths: list[Path | str],
        direct: DirectDecoder | None = None,
        hand_on: Digest | None = None,
        hostname: str = "",
        *,
        hand_on_text: Callable[[], TextReader | None] | None = None,
        hand_on_spare: Digest | None = None,
    ) -> None:
        self.paths = paths
        self.direct = direct
        #: The node whose settings the checks that depend on them take.
        self.hostname = hostname
        self.pid = 0
        self._reader: BinaryIO | None = None
        self._files, _ = manifest_sources(paths)
        #: Whether every file ``loaded`` gave was the child's (else the child's verdict may
        #: miss what this process trusted).
        self._all_handed_on = True
        if not _worth_a_worker(self._files):
            return
        try:
            read, write = os.pipe()
            pid = os.fork()
        except OSError as exc:
            log.info("no validation worker (%s): validating here", exc)
            return
        if pid == 0:  # the child: validate, write, leave without running any cleanup
            contain()  # a native crash here is this worker's, which the parent survives
            status = 1
            try:
                os.close(read)
                with contextlib.suppress(OSError):
                    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, HAND_ON_PIPE_BYTES)
                with os.fdopen(write, "wb") as out:
                    load = (
                        load_file
                        if hand_on is None
                        else _handing_on(
                            out, hand_on, hand_on_text and hand_on_text(), hand_on_spare
                        )
                    )
                    problems = validate_paths(paths, direct, load, hostname)
                    _write_record(out, "", pickle.dumps(problems, pickle.HIGHEST_PROTOCOL))
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self.pid, self._reader = pid, os.fdopen(read, "rb")

    @overload
    def loaded(
        self, direct: DirectDecoder | None = None, *, waiting: Literal[False] = False
    ) -> Iterator[LoadResult]: ...

    @overload
    def loaded(
        self, direct: DirectDecoder | None, *, waiting: Literal[True]
    ) -> Iterator[LoadResult | None]: ...

    def loaded(
        self, direct: DirectDecoder | None = None, *, waiting: bool = False
    ) -> Iterator[LoadResult | None]:
        """Each file's load (``load_file(file, direct)``), in load order: from the documents
        the child handed on, or read here (a file the child could not parse, or every file
        left once the child has gone). With ``waiting``, a None comes before a file the child
        has not handed on yet: the caller may do other work before asking again."""
        for file in self._files:
            if waiting and self._reader is not None and not _readable(self._reader):
                yield None
            record = self._record() if self._reader is not None else None
            if record is not None and record[0] == str(file) and record[1] is not None:
                yield load_parsed(record[1], record[0], direct)
                continue
            if record is None or record[0] != str(file):
                self._all_handed_on = False
            yield load_file(file, direct)

    def _record(self) -> tuple[str, Any] | None:
        """The child's next record (source, documents or its verdict), None at its end."""
        assert self._reader is not None
        header = self._reader.read(_LENGTH)
        if len(header) < _LENGTH:
            return None
        data = self._reader.read(int.from_bytes(header, "little"))
        try:
            source, payload = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            return None
        return source, payload

    def problems(self, result: LoadResult | None = None) -> list[Problem]:
        """Every problem of ``result`` (this process's load of the same paths; None: the
        loads ``loaded`` gave)."""
        if not self.pid:
            return validate_loaded(
                result if result is not None else load_paths(self.paths, self.direct),
                self.hostname,
            )
        assert self._reader is not None
        verdict = None
        with self._reader:
            while (record := self._record()) is not None:
                if record[0] == "":
                    verdict = record[1]
        self._reader = None
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if status != 0:
            log.warning("validation worker failed (status %d): validating here", status)
        elif not isinstance(verdict, bytes):
            log.warning("validation worker's output unreadable: validating here")
        else:
            try:
                found = pickle.loads(verdict)
            except (pickle.UnpicklingError, EOFError, ValueError) as exc:
                log.warning("validation worker's output unreadable (%s)", exc)
            else:
                if isinstance(found, list) and self._all_handed_on:
                    return found
        # The load beside the worker may have trusted what the worker was to check.
        return validate_loaded(load_paths(self.paths, self.direct), self.hostname)


def _readable(reader: BinaryIO) -> bool:
    """Whether the child has written what ``reader`` has not read (it may also be in the
    reader's buffer already: then this says no, and the caller's work is only done early)."""
    return bool(select.select([reader], [], [], 0)[0])


def _handing_on(
    out: BinaryIO, digest: Digest, reader: TextReader | None, spare: Digest | None = None
) -> FileLoader:
    """``load_file`` that first writes the file's documents to ``out`` as a record, those
    ``digest`` takes as its tuple (a file that cannot be read, parsed or marshalled: a record
    without documents, and the reader loads it itself). With ``reader``, the List or array
    items of a JSON file holding its marker are first offered to it as their texts
    (``_typed_documents``). With
    ``spare``, those ``digest`` declines are offered to it while the reader is behind."""
    either = digest if spare is None else _either(digest, spare)

    def load(file: Path, direct: DirectDecoder | None) -> LoadResult:
        source = str(file)
        try:
            text = read_manifest(file)
        except (OSError, UnicodeDecodeError):
            _write_record(out, source, None)
            return load_file(file, direct)  # which reports why it cannot be read
        now = either if spare is not None and _reader_behind(out) else digest
        typed = None
        if (
            reader is not None
            and source.endswith(".json")
            and any(marker in text for marker in reader.markers)
        ):
            typed = _typed_documents(text, now, reader)
        if typed is not None:
            parsed = typed
        else:
            whole = parse_text(text, source)
            if isinstance(whole, LoadResult):  # it does not parse: that is its load
                _write_record(out, source, None)
                return whole
            parsed = [_digested(entry, now) for entry in whole]
        try:
            _write_record(out, source, parsed)
        except ValueError:  # does not marshal
            _write_record(out, source, None)
        return load_parsed(parsed, source, direct)

    return load


def _either(first: Digest, second: Digest) -> Digest:
    def digest(document: dict[str, Any]) -> tuple[Any, ...] | None:
        return first(document) or second(document)

    return digest


def _reader_behind(out: BinaryIO) -> bool:
    """Whether the reader has left at least half the pipe's worth of what was written to
    ``out`` unread: it computes more slowly than this process hands on, and work moved here
    shortens the whole (no, where the pipe cannot say)."""
    try:
        fd = out.fileno()
        size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
        unread = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, unread, True)
    except OSError:
        return False
    return unread[0] * 2 >= size


def _typed_documents(text: str, digest: Digest, reader: TextReader) -> Parsed | None:
    """What ``_digested`` makes of a JSON List's or array's parse: the file first offered to
    the reader's ``split`` (the compiled reader, which reads the plain pods itself), its other
    items offered to the reader's digest as their texts before any is parsed (those it
    declines parsed and offered to ``digest``); None for any other file, or text neither
    splitter takes."""
    from pyfelix.resources.json_items import split_items  # noqa: PLC0415 (msgspec: the child's)

    split = None if reader.split is None else reader.split(text)
    if split is None:
        split = split_items(text)
    if split is None:
        return None
    fields, texts = split
    digest_text = reader.digest
    items = []
    try:
        for item in texts:
            if type(item) is tuple:  # already read
                items.append(item)
                continue
            data = bytes(item)
            items.append(digest_text(data) or _digested_item(json.loads(data), digest))
    except (ValueError, RecursionError):
        return None
    if fields is None:
        return [(items, 1, [])]
    fields["items"] = items
    return [(fields, 1, [])]


def _digested(entry: tuple[Any, int, list[int]], digest: Digest) -> tuple[Any, int, list[int]]:
    """A parsed document, or the items of a top-level list (JSON manifests) or of a List
    document (``kubectl get -o json``), as ``digest`` takes them (a dict it recognises
    becomes its tuple; the List's own fields stay, for the load to check)."""
    data, line, item_lines = entry
    if type(data) is list:
        return ([_digested_item(item, digest) for item in data], line, item_lines)
    if type(data) is dict and is_list_document(data) and type(data["items"]) is list:
        items = [_digested_item(item, digest) for item in data["items"]]
        return ({**data, "items": items}, line, item_lines)
    return digested(entry, digest)


def _digested_item(item: Any, digest: Digest) -> Any:
    return (digest(item) or item) if type(item) is dict else item


def _write_record(out: BinaryIO, source: str, payload: Any) -> None:
    """One length-prefixed marshal record: a file's documents, or (source "") the verdict."""
    data = marshal.dumps((source, payload))
    out.write(len(data).to_bytes(_LENGTH, "little"))
    out.write(data)
    out.flush()
