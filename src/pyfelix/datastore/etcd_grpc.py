"""etcd's KV.Range over gRPC, for the first listing's child (``prefetch.py``).

etcd serves its JSON gateway (what ``EtcdClient`` speaks) by translating each call to gRPC
and the answer back, with every key and value in base64: for a listing of 100,000 endpoints
that costs etcd 3-4.4 s of CPU, against 0.8-1.5 s to answer the same listing over gRPC, as
etcdctl and Go Felix ask (bench/bench_etcd_listing.py). On a node where etcd, the agent and the
listing's child share two cores, that CPU is the start's. So the first listing speaks gRPC:
one blocking HTTP/2 connection (``h2`` keeps the protocol: frames, header compression, flow
control), one unary call per page, the request and the answer in protobuf's wire format,
encoded and decoded here for the few fields a listing has. Anything else etcd does (the
watch, leases, writes, the listings after the first) stays with the gateway.

What this leaves to the caller: which endpoint, TLS's context, paging, and what to do when
this fails (``GrpcError``, ``OSError``): the child then lists through the gateway.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from pyfelix.datastore.etcd import EtcdError

#: The Range method's path (etcd's etcdserverpb.KV service).
RANGE_PATH = "/etcdserverpb.KV/Range"
#: How much etcd may send before this side acknowledges it (per stream and per connection):
#: a page of 5,000 endpoints is some 3 MB, received without a pause for window updates.
WINDOW = 1 << 24
_READ = 1 << 20

#: A key as etcd lists it: (key, create_revision, mod_revision, version, value, lease).
KeyValue = tuple[bytes, int, int, int, bytes, int]


class GrpcError(EtcdError):
    """A call etcd refused (its grpc-status and message) or an answer that does not parse."""


def _varint(value: int) -> bytes:
    """``value`` (>= 0, or a negative int64 as protobuf encodes it) as a base-128 varint."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def range_request(key: bytes, range_end: bytes, limit: int, revision: int) -> bytes:
    """A RangeRequest: key (1), range_end (2), limit (3), revision (4); zeros left out, as
    protobuf leaves out defaults."""
    out = b"\x0a" + _varint(len(key)) + key
    if range_end:
        out += b"\x12" + _varint(len(range_end)) + range_end
    if limit:
        out += b"\x18" + _varint(limit)
    if revision:
        out += b"\x20" + _varint(revision)
    return out


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and where it ends (raises IndexError past the end)."""
    byte = data[at]
    if byte < 0x80:
        return byte, at + 1
    value, shift = byte & 0x7F, 7
    at += 1
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise GrpcError("a varint longer than 64 bits")


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """Each field of the message in ``data[start:end]``: its number, and for a varint its
    value and -1, for a length-delimited one its start and end (other wire types are skipped:
    none of the fields read here has one)."""
    at = start
    while at < end:
        tag, at = _read_varint(data, at)
        kind = tag & 7
        if kind == 0:
            value, at = _read_varint(data, at)
            yield tag >> 3, value, -1
        elif kind == 2:
            length, at = _read_varint(data, at)
            yield tag >> 3, at, at + length
            at += length
        elif kind == 1:
            at += 8
        elif kind == 5:
            at += 4
        else:
            raise GrpcError(f"unexpected wire type {kind}")
    if at != end:
        raise GrpcError("a field runs past the end of its message")


def _signed(value: int) -> int:
    """An int64 field's value (protobuf writes a negative one as its 64-bit complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def parse_range_response(data: bytes) -> tuple[int, bool, list[KeyValue]]:
    """A RangeResponse's header revision (field 1's field 3), its keys (2) and ``more`` (3)."""
    revision, more = 0, False
    kvs: list[KeyValue] = []
    try:
        for number, first, second in _fields(data, 0, len(data)):
            if number == 1 and second >= 0:
                for inner, value, flag in _fields(data, first, second):
                    if inner == 3 and flag < 0:
                        revision = _signed(value)
            elif number == 2 and second >= 0:
                kvs.append(_key_value(data, first, second))
            elif number == 3 and second < 0:
                more = bool(first)
    except IndexError:
        raise GrpcError("a RangeResponse cut short") from None
    return revision, more, kvs


#: A KeyValue's tags as etcd writes them (field number and wire type in one byte).
_KEY, _CREATE, _MODIFIED, _VERSION, _VALUE, _LEASE = 0x0A, 0x10, 0x18, 0x20, 0x2A, 0x30


def _key_value(data: bytes, start: int, end: int) -> KeyValue:
    """A mvccpb.KeyValue: key (1), create_revision (2), mod_revision (3), version (4),
    value (5), lease (6). Read tag by tag in line (a listing has one per key, and the
    general reading of ``_fields`` took twice as long); anything else etcd might add, and
    a negative number, go to ``_key_value_in_general``."""
    key = value = b""
    create = modified = version = lease = 0
    read = _read_varint
    at = start
    while at < end:
        tag = data[at]
        at += 1
        if tag == _KEY:
            length, at = read(data, at)
            key = data[at : at + length]
            at += length
        elif tag == _CREATE:
            create, at = read(data, at)
        elif tag == _MODIFIED:
            modified, at = read(data, at)
        elif tag == _VERSION:
            version, at = read(data, at)
        elif tag == _VALUE:
            length, at = read(data, at)
            value = data[at : at + length]
            at += length
        elif tag == _LEASE:
            lease, at = read(data, at)
        else:
            return _key_value_in_general(data, start, end)
    if at != end:
        raise GrpcError("a field runs past the end of its message")
    if (create | modified | version | lease) >> 63:
        return _key_value_in_general(data, start, end)
    return key, create, modified, version, value, lease


def _key_value_in_general(data: bytes, start: int, end: int) -> KeyValue:
    """``_key_value`` field by field, whatever the fields."""
    key = value = b""
    create = modified = version = lease = 0
    for number, first, second in _fields(data, start, end):
        if second >= 0:
            if number == 1:
                key = data[first:second]
            elif number == 5:
                value = data[first:second]
        elif number == 2:
            create = _signed(first)
        elif number == 3:
            modified = _signed(first)
        elif number == 4:
            version = _signed(first)
        elif number == 6:
            lease = _signed(first)
    return key, create, modified, version, value, lease


class RangeChannel:
    """One HTTP/2 connection to an etcd endpoint, for KV.Range calls one after the other."""

    def __init__(self, host: str, port: int, *, tls: ssl.SSLContext | None, timeout: float) -> None:
        """Connects (raises OSError, or GrpcError when the endpoint does not speak HTTP/2);
        ``tls`` None: plaintext, with HTTP/2 from the first byte, as etcd accepts it."""
        self._authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._scheme = "https" if tls is not None else "http"
        self._socket = _connect(host, port, tls, timeout)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self._h2.initiate_connection()
        self._h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
        self._h2.increment_flow_control_window(WINDOW - 65535)
        try:
            self._socket.sendall(self._h2.data_to_send())
        except OSError:
            self._socket.close()
            raise

    def range(self, key: bytes, range_end: bytes, limit: int, revision: int) -> bytes:
        """The RangeResponse message for the request (raises GrpcError for a refusal)."""
        message = range_request(key, range_end, limit, revision)
        connection = self._h2
        stream = connection.get_next_available_stream_id()
        connection.send_headers(
            stream,
            [
                (b":method", b"POST"),
                (b":scheme", self._scheme.encode()),
                (b":path", RANGE_PATH.encode()),
                (b":authority", self._authority.encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
            ],
        )
        connection.send_data(
            stream, b"\x00" + len(message).to_bytes(4, "big") + message, end_stream=True
        )
        self._socket.sendall(connection.data_to_send())
        body = bytearray()
        status: dict[bytes, bytes] = {}
        ended = False
        while not ended:
            data = self._socket.recv(_READ)
            if not data:
                raise GrpcError(f"etcd at {self._authority} closed the connection")
            try:
                events = connection.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                raise GrpcError(f"etcd at {self._authority} does not speak HTTP/2: {exc}") from None
            for event in events:
                if isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                    body += event.data
                    connection.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    if event.stream_id == stream:
                        status.update((bytes(name), bytes(value)) for name, value in event.headers)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    ended = True
                elif isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    raise GrpcError(f"etcd at {self._authority} ended the call ({event})")
            pending = connection.data_to_send()
            if pending:
                self._socket.sendall(pending)
        code = status.get(b"grpc-status", b"")
        if code != b"0":
            reason = status.get(b"grpc-message", b"").decode("utf-8", "replace")
            what = f"grpc-status {code.decode() or 'missing'}"
            raise GrpcError(f"etcd refused the range ({what}: {reason or 'no message'})")
        return _unframe(bytes(body))

    def close(self) -> None:
        self._socket.close()


def _connect(host: str, port: int, tls: ssl.SSLContext | None, timeout: float) -> socket.socket:
    """A connection to the endpoint, over TLS with HTTP/2 agreed when ``tls`` is given."""
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is None:
            return raw
        tls.set_alpn_protocols(["h2"])
        wrapped = tls.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise
    if wrapped.selected_alpn_protocol() != "h2":
        wrapped.close()
        raise GrpcError(f"etcd at {host}:{port} does not offer HTTP/2")
    return wrapped


def _unframe(body: bytes) -> bytes:
    """The one message of a unary answer (a flag byte, its length, the message)."""
    if len(body) < 5 or body[0] != 0:
        raise GrpcError("an answer that is not one uncompressed gRPC message")
    length = int.from_bytes(body[1:5], "big")
    if len(body) != 5 + length:
        raise GrpcError("an answer whose length does not match its message")
    return body[5:]
