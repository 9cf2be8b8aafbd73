"""The agent's first etcd listing, fetched and parsed by a child process beside the imports.

The old Python Felix ran its etcd driver as a process of its own; pyfelix forks one for the
first listing only. Started before the agent imports its pipeline, the child lists the
datastore's prefix as the syncer would (pages at the first page's revision), over gRPC
(``etcd_grpc``: etcd spends a quarter of the CPU its JSON gateway needs) or, where the
endpoint does not speak HTTP/2, through the gateway, and parses each value's JSON: a third
of the listing's work, done on the other core while this process imports and starts. It
also runs the checks of plain workload endpoints, the bulk of a
cluster (``syncer.plain_workloads.plain_fields_at``, which the command line hands it): such
an endpoint goes back as its checked fields, and the syncer only builds its model value.
Each page goes back as one marshal record (revision, whether more follow, and per key its
name, revisions and document, its fields, or its raw value where the JSON does not parse
into an object) through an unlinked file the child writes without waiting.

The syncer reads the pages as they come (``pages``) and decodes them as if it had fetched
them. A child that fails (etcd unreachable, a page refused, TLS) exits non-zero and the
syncer lists again itself; so does one that leaves a page half written. Nothing here is
used after the first listing: the watch, and every later listing, are the client's.
"""

from __future__ import annotations

import logging
import marshal
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from pyfelix.resources.shared_parse import available_cores, fork_worker, stop_worker

if TYPE_CHECKING:
    import queue
    import ssl
    from typing import TypeAlias
    from urllib.parse import ParseResult

    from pyfelix.datastore.etcd_grpc import KeyValue, RangeChannel

    #: A page as fetched: its revision, whether more follow, its keys.
    Listed: TypeAlias = tuple[int, bool, list[KeyValue]]
    #: The child's fetched pages, then None or what stopped it.
    Fetched: TypeAlias = queue.Queue[Listed | BaseException | None]

log = logging.getLogger(__name__)

_LENGTH = 8
#: (key, mod_revision, create_revision, version, lease, document or None, raw value or b"").
Entry = tuple[str, int, int, int, int, Any, bytes]
#: A page of the listing: its revision, whether more pages follow, and its entries.
Page = tuple[int, bool, list[Entry]]


#: The checks the syncer would run on the document at a key, which the child runs instead:
#: the document's checked fields as a tuple that marshals, or None to hand it over as it is.
KeyedDigest = Callable[[str, dict[str, Any]], tuple[Any, ...] | None]


def _entries(kvs: list[KeyValue], checks: KeyedDigest | None = None) -> list[Entry]:
    """Each key of a page, its value's JSON parsed where it is an object (what the syncer
    reads), or what ``checks`` made of it; else the raw value, which the syncer judges."""
    from pyfelix.jsontext import loads  # noqa: PLC0415 (in the child only)

    entries: list[Entry] = []
    append = entries.append
    for raw_key, create, modified, version, value, lease in kvs:
        key = raw_key.decode("utf-8", "surrogateescape")
        document: Any
        try:
            document = loads(value)
        except (ValueError, RecursionError):
            document = None
        if not isinstance(document, dict):
            document = None
        elif checks is not None:
            fields = checks(key, document)
            if fields is not None:
                document = fields
        raw = b"" if document is not None else value
        append((key, modified, create, version, lease, document, raw))
    return entries


def _list_into(spool: BinaryIO, url: str, digest: Callable[[], KeyedDigest] | None) -> None:
    """The child: every page of the syncer's prefix into ``spool``, over the first endpoint
    that answers (raises, ending the child non-zero, when none does or a page is refused).
    A thread fetches the next page while this one's keys are parsed: etcd takes about as
    long to serve a page as this takes to parse it."""
    import queue  # noqa: PLC0415 (in the child only, after the fork)
    import threading  # noqa: PLC0415
    from urllib.parse import urlparse  # noqa: PLC0415

    from pyfelix.datastore.etcd import EtcdConfig  # noqa: PLC0415

    config = EtcdConfig.from_url(url)
    context = config.ssl_context()
    for endpoint in config.endpoints:
        pages = _first_page_from(urlparse(endpoint), context)
        if pages is None:
            continue
        # Two pages ahead at most: each is a few MB.
        fetched: Fetched = queue.Queue(2)
        checks: KeyedDigest | None = None
        threading.Thread(target=_fetch, args=(pages, fetched), daemon=True).start()
        while (item := fetched.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            revision, more, kvs = item
            if digest is not None and checks is None:
                checks = digest()  # imported here, once the first page is in
            entries = _entries(kvs, checks)
            record = marshal.dumps((revision, more and bool(entries), entries))
            spool.write(len(record).to_bytes(_LENGTH, "little") + record)
            spool.flush()
        return
    raise OSError("no etcd endpoint answered")


def _first_page_from(
    target: ParseResult, context: ssl.SSLContext | bool
) -> Iterator[Listed] | None:
    """The listing's pages from the endpoint at ``target``, its first page fetched (None:
    the endpoint does not answer): over gRPC, or through the JSON gateway when the endpoint
    does not speak gRPC (a proxy that knows only HTTP/1.1, say)."""
    import ssl  # noqa: PLC0415 (in the child only)

    from pyfelix.datastore.etcd import REQUEST_TIMEOUT  # noqa: PLC0415
    from pyfelix.datastore.etcd_grpc import GrpcError, RangeChannel  # noqa: PLC0415

    tls: ssl.SSLContext | None = None
    if target.scheme == "https":
        tls = context if isinstance(context, ssl.SSLContext) else ssl.create_default_context()
    host, port = target.hostname or "localhost", target.port or 2379
    reason: Exception
    try:
        channel = RangeChannel(host, port, tls=tls, timeout=REQUEST_TIMEOUT)
    except OSError:
        return None
    except GrpcError as exc:
        reason = exc
    else:
        try:
            return _started(_grpc_pages(channel))  # the pages close the channel if this fails
        except (GrpcError, OSError) as exc:
            reason = exc
    log.info("etcd at %s: %s; listing through its JSON gateway", target.netloc, reason)
    try:
        return _started(_gateway_pages(target, tls))
    except OSError:
        return None


def _started(pages: Iterator[Listed]) -> Iterator[Listed]:
    """``pages`` with the first one fetched already (what fetching it raised, raised)."""
    import itertools  # noqa: PLC0415 (in the child only)

    first = next(pages)
    return itertools.chain([first], pages)


def _fetch(pages: Iterator[Listed], fetched: Fetched) -> None:
    """The child's fetching thread: each page of the listing, then None, or the exception
    that stopped it."""
    try:
        for page in pages:
            fetched.put(page)
        fetched.put(None)
    except BaseException as exc:
        fetched.put(exc)


#: One page of the listing from ``start`` (a key) at ``revision`` (0: the latest): the
#: revision it was listed at, whether more follow, its keys.
PageFetch = Callable[[bytes, int], "Listed"]


def _paged(fetch: PageFetch, close: Callable[[], object]) -> Iterator[Listed]:
    """The pages of the listing, every page at the first page's revision; ``close`` at the
    end, or when the caller stops early."""
    from pyfelix.datastore.layout import WATCH_PREFIX  # noqa: PLC0415 (in the child only)

    start, revision = _raw(WATCH_PREFIX), 0
    try:
        while True:
            listed_at, more, kvs = fetch(start, revision)
            revision = revision or listed_at
            yield revision, more, kvs
            if not more or not kvs:
                return
            start = kvs[-1][0] + b"\0"
    finally:
        close()


def _grpc_pages(channel: RangeChannel) -> Iterator[Listed]:
    """The pages of the listing over gRPC."""
    from pyfelix.datastore.etcd import LIST_PAGE, prefix_end  # noqa: PLC0415
    from pyfelix.datastore.etcd_grpc import parse_range_response  # noqa: PLC0415
    from pyfelix.datastore.layout import WATCH_PREFIX  # noqa: PLC0415

    end = _raw(prefix_end(WATCH_PREFIX))

    def fetch(start: bytes, revision: int) -> Listed:
        return parse_range_response(channel.range(start, end, LIST_PAGE, revision))

    return _paged(fetch, channel.close)


def _gateway_pages(target: ParseResult, tls: ssl.SSLContext | None) -> Iterator[Listed]:
    """The pages of the listing through etcd's JSON gateway (raises OSError when it does not
    answer)."""
    import base64  # noqa: PLC0415 (in the child only)
    import binascii  # noqa: PLC0415
    import http.client  # noqa: PLC0415
    import json  # noqa: PLC0415

    from pyfelix import jsontext  # noqa: PLC0415
    from pyfelix.datastore.etcd import LIST_PAGE, REQUEST_TIMEOUT, prefix_end  # noqa: PLC0415
    from pyfelix.datastore.layout import WATCH_PREFIX  # noqa: PLC0415

    connection: http.client.HTTPConnection
    if tls is not None:
        connection = http.client.HTTPSConnection(
            target.netloc, timeout=REQUEST_TIMEOUT, context=tls
        )
    else:
        connection = http.client.HTTPConnection(target.netloc, timeout=REQUEST_TIMEOUT)

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    def unpacked(kv: dict[str, Any]) -> KeyValue:
        raw_key, raw_value = kv.get("key"), kv.get("value")
        return (
            binascii.a2b_base64(raw_key) if raw_key else b"",
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
            int(kv.get("version", 0)),
            binascii.a2b_base64(raw_value) if raw_value else b"",
            int(kv.get("lease", 0)),
        )

    end = b64(_raw(prefix_end(WATCH_PREFIX)))

    def fetch(start: bytes, revision: int) -> Listed:
        body: dict[str, str] = {"key": b64(start), "range_end": end, "limit": str(LIST_PAGE)}
        if revision:
            body["revision"] = str(revision)
        headers = {"Content-Type": "application/json"}
        connection.request("POST", "/v3/kv/range", json.dumps(body), headers)
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise OSError(f"etcd answered {response.status}")
        listed = jsontext.loads(data)
        listed_at = int(listed.get("header", {}).get("revision", 0))
        kvs = [unpacked(kv) for kv in listed.get("kvs", [])]
        return listed_at, bool(listed.get("more")), kvs

    return _paged(fetch, connection.close)


def _raw(key: str) -> bytes:
    """A key as etcd holds it (keys that are not UTF-8 carry surrogates here)."""
    return key.encode("utf-8", "surrogateescape")


def _record(descriptor: int, offset: int) -> tuple[Page, int] | None:
    """The page written at ``offset`` and the offset after it, once it is whole."""
    header = os.pread(descriptor, _LENGTH, offset)
    if len(header) < _LENGTH:
        return None
    length = int.from_bytes(header, "little")
    record = os.pread(descriptor, length, offset + _LENGTH)
    if len(record) < length:
        return None
    page: Page = marshal.loads(record)
    return page, offset + _LENGTH + length


class ListingPrefetch:
    """The first listing of the etcd of ``url`` (the syncer's prefix, in its pages), by a
    forked child (none where there is one core, or no fork); ``pages`` hands them over,
    ``close`` stops the child. Made before the agent's imports: the child makes its own."""

    def __init__(self, url: str, digest: Callable[[], KeyedDigest] | None = None) -> None:
        """``digest`` gives, in the child (which imports what it needs), the checks the
        syncer would run on each document: the child runs them instead."""
        self._pid = 0
        self._spool: BinaryIO | None = None
        if available_cores() < 2:
            return
        worker = fork_worker(lambda spool: _list_into(spool, url, digest))
        if worker is not None:
            self._pid, self._spool = worker

    @property
    def active(self) -> bool:
        return self._spool is not None

    def pages(self, poll: float = 0.002) -> Iterator[Page | None]:
        """The child's pages as it writes them, blocking (run it in a thread); a None item
        where the listing cannot be had from the child (it failed, or stopped half way):
        the caller lists itself then, and drops what this gave."""
        assert self._spool is not None
        descriptor, offset = self._spool.fileno(), 0
        exited = False
        while True:
            found = _record(descriptor, offset)
            if found is not None:
                page, offset = found
                yield page
                if not page[1]:
                    self._reap(wait=True)
                    return
                continue
            if exited:
                log.warning("etcd listing worker stopped before the listing ended: listing here")
                yield None
                return
            # Exited (a last look at what it wrote follows), or still at work.
            exited = self._reap(wait=False)
            if not exited:
                time.sleep(poll)

    def _reap(self, wait: bool) -> bool:
        """Whether the child has exited; with ``wait``, wait for it."""
        if not self._pid:
            return True
        pid, _ = os.waitpid(self._pid, 0 if wait else os.WNOHANG)
        if pid == 0:
            return False
        self._pid = 0
        return True

    def close(self) -> None:
        stop_worker(self._pid, self._spool)
        self._pid, self._spool = 0, None
