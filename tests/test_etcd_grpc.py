"""The first etcd listing over gRPC (datastore/etcd_grpc.py), against a real etcd: what it
reads is what the JSON gateway gives, with etcd's gateway turned off, over TLS with client
certificates, and through a proxy that knows only HTTP/1.1 (where the child falls back to
the gateway); protobuf's wire format read field by field, and refusals that say why."""

from __future__ import annotations

import http.client
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from pyfelix.datastore.etcd import EtcdClient, EtcdConfig
from pyfelix.datastore.etcd_grpc import GrpcError, RangeChannel, parse_range_response
from pyfelix.datastore.etcd_grpc import _varint as varint  # checked against etcd below
from pyfelix.datastore.layout import WATCH_PREFIX
from pyfelix.datastore.prefetch import ListingPrefetch
from tests.etcd_server import EtcdServer, client_tls_env, make_certificates, running_etcd

NOT_UTF8 = (WATCH_PREFIX.encode() + b"resources/v3/x/\xff").decode("utf-8", "surrogateescape")


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_a_range_response_is_read_field_by_field() -> None:
    """Header revision, keys with their revisions, version, value and lease, and ``more``;
    fields of other numbers and wire types (fixed 32 and 64 bits) are passed over."""
    header = _field(1, 7) + _field(3, 123456789) + _field(4, 2)
    kv = (
        _field(1, b"/calico/a")
        + _field(2, 100)
        + _field(3, 300)
        + _field(4, 3)
        + _field(5, b'{"x": 1}')
        + _field(6, 1 << 40)
        + varint(7 << 3 | 1)
        + b"\x00" * 8
    )
    empty = _field(1, b"/calico/b")
    negative = _field(1, b"/calico/c") + _field(6, (1 << 64) - 1)  # int64 -1, as protobuf has it
    message = (
        _field(1, header)
        + _field(2, kv)
        + varint(9 << 3 | 5)
        + b"\x01\x02\x03\x04"
        + _field(2, empty)
        + _field(2, negative)
        + _field(3, 1)
        + _field(4, 5)
    )
    revision, more, kvs = parse_range_response(message)
    assert revision == 123456789
    assert more is True
    assert kvs == [
        (b"/calico/a", 100, 300, 3, b'{"x": 1}', 1 << 40),
        (b"/calico/b", 0, 0, 0, b"", 0),
        (b"/calico/c", 0, 0, 0, b"", -1),
    ]
    assert parse_range_response(b"") == (0, False, [])


@pytest.mark.parametrize(
    "message",
    [
        _field(2, _field(1, b"/calico/a"))[:-2],  # cut inside the key
        b"\x12\x80",  # a length whose varint never ends
        _field(2, b"\x0b"),  # wire type 3 (a group), which etcd never sends
        _field(2, b"\x0a\x05ab") + _field(3, 1),  # a key running past its KeyValue
    ],
)
def test_an_answer_cut_short_or_malformed_is_refused(message: bytes) -> None:
    with pytest.raises(GrpcError):
        parse_range_response(message)


async def _fill(url: str, env: dict[str, str] | None = None) -> None:
    async with EtcdClient(EtcdConfig.from_url(url, env)) as client:
        await client.put_many(
            [(f"{WATCH_PREFIX}resources/v3/k{n:04d}", json.dumps({"n": n})) for n in range(12_000)]
        )
        await client.put(f"{WATCH_PREFIX}resources/v3/plain", "not json")
        await client.put(f"{WATCH_PREFIX}resources/v3/empty", "")
        await client.put(NOT_UTF8, "{}")
        lease = await client.grant_lease(60)
        await client.put(f"{WATCH_PREFIX}felix/v1/host/h/status", "{}", lease=lease)


def _through_gateway(url: str, env: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    """The listing as the agent's client reads it, as the child's entries."""

    async def listing() -> list[tuple[Any, ...]]:
        entries = []
        async with EtcdClient(EtcdConfig.from_url(url, env)) as client:
            async for batch, _ in client.list_pages(WATCH_PREFIX, 5000):
                for kv in batch:
                    try:
                        document = json.loads(kv.value)
                    except ValueError:
                        document = None
                    if not isinstance(document, dict):
                        document = None
                    raw = b"" if document is not None else kv.value
                    revisions = (kv.mod_revision, kv.create_revision, kv.version, kv.lease)
                    entries.append((kv.key, *revisions, document, raw))
        return entries

    return trio.run(listing)


def _by_child(url: str) -> list[tuple[Any, ...]]:
    """The child's listing, every page of it."""
    prefetch = ListingPrefetch(url)
    try:
        pages = list(prefetch.pages())
    finally:
        prefetch.close()
    assert None not in pages, "the child failed"
    return [entry for page in pages if page is not None for entry in page[2]]


def test_the_first_listing_speaks_grpc(etcd: EtcdServer) -> None:
    """Over three pages, with a value that is not JSON, an empty one, a key that is not
    UTF-8 and one under a lease: the child reads what the gateway gives, from an etcd whose
    gateway has since been turned off."""
    trio.run(_fill, etcd.etcd_url)
    expected = _through_gateway(etcd.etcd_url)
    assert len(expected) == 12_004
    etcd.stop()
    etcd.flags = ["--enable-grpc-gateway=false"]
    etcd.start()
    with pytest.raises(http.client.HTTPException):
        _post(etcd.url, "/v3/kv/range", b"{}")
    assert _by_child(etcd.etcd_url) == expected


def test_the_first_listing_from_an_ipv6_endpoint(tmp_path: Path) -> None:
    """An etcd on ::1, named in brackets in the URL (and so in HTTP/2's authority)."""
    data = tmp_path / "etcd"
    data.mkdir()
    server = EtcdServer(str(data), host="[::1]")
    try:
        server.start()
        trio.run(_fill, server.etcd_url)
        assert _by_child(server.etcd_url) == _through_gateway(server.etcd_url)
    finally:
        server.stop()


def test_a_refused_range_names_etcds_reason(etcd: EtcdServer) -> None:
    channel = RangeChannel("127.0.0.1", etcd.client_port, tls=None, timeout=5)
    try:
        with pytest.raises(GrpcError, match="future revision"):
            channel.range(b"/calico/", b"/calico0", 10, 1 << 40)
        assert parse_range_response(channel.range(b"/calico/", b"/calico0", 10, 0))[2] == []
    finally:
        channel.close()


def test_the_first_listing_over_tls_with_client_certificates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_certificates(tmp_path)
    env = client_tls_env(tmp_path)
    with running_etcd(tls=tmp_path) as server:
        trio.run(_fill, server.etcd_url, env)
        expected = _through_gateway(server.etcd_url, env)
        server.stop()
        server.flags = ["--enable-grpc-gateway=false"]
        server.start()
        for name, value in env.items():  # after etcd's start: etcd reads these too
            monkeypatch.setenv(name, value)
        assert _by_child(server.etcd_url) == expected


def _post(base: str, path: str, body: bytes) -> bytes:
    host = base.split("://", 1)[1]
    connection = http.client.HTTPConnection(host, timeout=10)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise http.client.HTTPException(f"{response.status}: {data!r}")
        return data
    finally:
        connection.close()


@contextmanager
def http1_proxy(target: str) -> Iterator[tuple[int, list[str]]]:
    """A proxy to etcd's gateway that speaks HTTP/1.1 only; its port and the paths asked."""
    asked: list[str] = []

    class Forward(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            asked.append(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            data = _post(target, self.path, body)
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def test_an_endpoint_without_http2_is_listed_through_its_gateway(etcd: EtcdServer) -> None:
    """Behind a proxy that knows only HTTP/1.1 the child lists through the JSON gateway, in
    pages, and reads the same."""
    trio.run(_fill, etcd.etcd_url)
    expected = _through_gateway(etcd.etcd_url)
    with http1_proxy(etcd.url) as (port, asked):
        assert _by_child(f"etcd://127.0.0.1:{port}") == expected
    assert asked == ["/v3/kv/range"] * 3
