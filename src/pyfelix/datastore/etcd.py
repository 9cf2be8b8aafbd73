"""A small etcd v3 client over etcd's JSON gateway (``/v3/...``), on httpx under Trio.

The gateway speaks JSON with base64 keys and values and int64s as strings; PUT events in a
watch carry no ``type``; an idle watch must not time out. This module hides all of that behind
typed calls. It is deliberately thin: retry policy belongs to the callers (the syncer
reconnects with backoff, the CLI fails fast).

Errors::

    EtcdError
    ├── EtcdUnavailable   no endpoint answered (connection refused, timeout)
    └── EtcdCompacted     a watch or read asked for a revision etcd has compacted away
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

import attrs

from pyfelix import jsontext
from pyfelix.errors import PyfelixError

# A request that takes longer than this is treated as a lost endpoint; watches have no timeout.
REQUEST_TIMEOUT = 10.0


class EtcdError(PyfelixError):
    """An etcd request failed."""


class EtcdUnavailable(EtcdError):
    """No configured endpoint could be reached."""


class EtcdTLSError(EtcdError):
    """The TLS files cannot be used; the message names the file and the reason."""


def _why(exc: BaseException) -> str:
    """The most telling reason in an exception and its causes (httpx wraps ssl's, and some of
    its errors have an empty message)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    for error in seen:
        if isinstance(error, ssl.SSLCertVerificationError):
            return (
                f"the server's certificate is not trusted ({error.verify_message}); is"
                " ETCD_CA_CERT_FILE the CA that signed it?"
            )
        if isinstance(error, ssl.SSLError) and error.reason:
            return f"TLS: {error.reason}"
        if isinstance(error, OSError) and error.strerror:
            return error.strerror + (f": {error.filename}" if error.filename else "")
    for error in seen:
        if str(error):
            return str(error)
    return type(exc).__name__


def _client_certificate_wanted(reason: str) -> bool:
    """Whether a failed handshake reads as etcd's client-cert-auth refusing us. Depending on
    the TLS versions and OpenSSL builds at both ends, etcd closes the connection without a word
    or sends an alert (certificate required, or bad certificate)."""
    if reason in ("ReadError", "RemoteProtocolError"):
        return True
    return reason.startswith("TLS: ") and "ALERT" in reason and "CERTIFICATE" in reason


class EtcdCompacted(EtcdError):
    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted (oldest available: {compact_revision})")
        self.compact_revision = compact_revision


def _b64(text: str | bytes) -> str:
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def _unb64(text: str | None) -> bytes:
    # base64.b64decode without its wrapper: 1.1 us a value against 1.4 (100k in a listing).
    return binascii.a2b_base64(text) if text else b""


def prefix_end(prefix: str) -> str:
    """The exclusive end of a prefix range: the prefix with its last byte incremented."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return raw.decode()


#: Keys per page when listing (etcd's range limit): per-request overhead dominates below a few
#: thousand (bench/RESULTS.md, "Datastores, again").
LIST_PAGE = 5000


@attrs.frozen
class KeyValue:
    key: str
    value: bytes
    mod_revision: int = 0
    create_revision: int = 0
    version: int = 0
    lease: int = 0

    @classmethod
    def from_json(cls, kv: Mapping[str, Any]) -> KeyValue:
        return cls(
            # A key that is not UTF-8 keeps its bytes (as surrogate escapes), so it can still be
            # told apart, paged past and deleted; decoding its value refuses it.
            key=_unb64(kv.get("key")).decode("utf-8", "surrogateescape"),
            value=_unb64(kv.get("value")),
            mod_revision=int(kv.get("mod_revision", 0)),
            create_revision=int(kv.get("create_revision", 0)),
            version=int(kv.get("version", 0)),
            lease=int(kv.get("lease", 0)),
        )


@attrs.frozen
class WatchEvent:
    """One change: ``kv.value`` is empty for a delete."""

    deleted: bool
    kv: KeyValue
    revision: int


@attrs.frozen
class EtcdConfig:
    """Where etcd is and how to authenticate, configured like calico-node."""

    endpoints: tuple[str, ...] = ("http://127.0.0.1:2379",)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @staticmethod
    def env_endpoints(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """Every etcd endpoint the environment names, as calico-node and Felix read it:
        ETCD_ENDPOINTS, else FELIX_ETCDENDPOINTS (comma-separated URLs), else FELIX_ETCDSCHEME
        (http) with FELIX_ETCDADDR (host:port)."""
        env = os.environ if env is None else env
        listed = env.get("ETCD_ENDPOINTS") or env.get("FELIX_ETCDENDPOINTS", "")
        endpoints = tuple(e.strip() for e in listed.split(",") if e.strip())
        if not endpoints and env.get("FELIX_ETCDADDR"):
            scheme = env.get("FELIX_ETCDSCHEME") or "http"
            endpoints = (f"{scheme}://{env['FELIX_ETCDADDR'].strip()}",)
        return endpoints

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EtcdConfig:
        """The endpoints (``env_endpoints``) and TLS files: ETCD_CA_CERT_FILE, ETCD_CERT_FILE,
        ETCD_KEY_FILE, or Felix's FELIX_ETCDCAFILE, FELIX_ETCDCERTFILE, FELIX_ETCDKEYFILE."""
        env = os.environ if env is None else env
        return cls(
            endpoints=cls.env_endpoints(env) or cls().endpoints,
            ca_file=env.get("ETCD_CA_CERT_FILE") or env.get("FELIX_ETCDCAFILE", ""),
            cert_file=env.get("ETCD_CERT_FILE") or env.get("FELIX_ETCDCERTFILE", ""),
            key_file=env.get("ETCD_KEY_FILE") or env.get("FELIX_ETCDKEYFILE", ""),
        )

    @classmethod
    def env_url(cls, env: Mapping[str, str] | None = None) -> str:
        """The environment's endpoints as one ``etcd://h1:p1,h2:p2`` URL (``etcds://`` for
        https), every one of them, so the client fails over; "" when it names none."""
        endpoints = cls.env_endpoints(env)
        if not endpoints:
            return ""
        secure = any(e.startswith("https://") for e in endpoints)
        hosts = ",".join(e.split("://", 1)[-1].rstrip("/") for e in endpoints)
        return f"{'etcds' if secure else 'etcd'}://{hosts}"

    @classmethod
    def from_url(cls, url: str, env: Mapping[str, str] | None = None) -> EtcdConfig:
        """``etcd://host:port[,host:port]`` (``etcds://`` for TLS); TLS files from the env."""
        parsed = urlparse(url)
        scheme = {"etcd": "http", "etcds": "https"}.get(parsed.scheme)
        if scheme is None or not parsed.netloc:
            raise ValueError(f"not an etcd URL: {url!r} (expected etcd://host:port)")
        base = cls.from_env(env)
        hosts = tuple(f"{scheme}://{host}" for host in parsed.netloc.split(","))
        return attrs.evolve(base, endpoints=hosts)

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS context of the configured files; raises EtcdTLSError naming the file that
        cannot be used (missing, unreadable, not a certificate, a key not matching)."""
        if not (self.ca_file or self.cert_file):
            return True
        try:
            context = ssl.create_default_context(cafile=self.ca_file or None)
        except (OSError, ssl.SSLError) as exc:
            raise EtcdTLSError(
                f"etcd CA file {self.ca_file} (ETCD_CA_CERT_FILE): {_why(exc)}"
            ) from None
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file or None)
            except (OSError, ssl.SSLError) as exc:
                key = self.key_file or "no key"
                files = f"{self.cert_file} (ETCD_CERT_FILE), {key} (ETCD_KEY_FILE)"
                if "KEY_VALUES_MISMATCH" in str(exc):
                    raise EtcdTLSError(
                        f"etcd client key does not match its certificate: {files}"
                    ) from None
                raise EtcdTLSError(
                    f"etcd client certificate or key: {files}: {_why(exc)}"
                ) from None
        return context


class EtcdClient:
    """Async etcd v3 client; use as ``async with EtcdClient(config) as client``."""

    def __init__(self, config: EtcdConfig) -> None:
        # Imported here: an agent on a file datastore never pays httpx's 75 ms of imports.
        import httpx  # noqa: PLC0415

        self.config = config
        self._http = httpx.AsyncClient(verify=config.ssl_context(), timeout=REQUEST_TIMEOUT)
        self._transport_error: type[Exception] = httpx.TransportError
        self._current = 0

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _endpoints(self) -> list[str]:
        """Endpoints starting with the one that last worked."""
        endpoints = list(self.config.endpoints)
        return endpoints[self._current :] + endpoints[: self._current]

    async def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        last: Exception | None = None
        for endpoint in self._endpoints():
            try:
                response = await self._http.post(f"{endpoint.rstrip('/')}/v3/{path}", json=body)
            except self._transport_error as exc:
                last = exc
                continue
            self._current = self.config.endpoints.index(endpoint)
            data: dict[str, Any] = jsontext.loads(response.content) if response.content else {}
            if response.status_code >= 400:
                message = data.get("message") or data.get("error") or response.text
                if "compacted" in str(message):
                    raise EtcdCompacted(0)
                raise EtcdError(f"etcd {path}: HTTP {response.status_code}: {message}")
            return data
        reason = _why(last) if last is not None else "no endpoint configured"
        if (
            _client_certificate_wanted(reason)
            and not self.config.cert_file
            and any(e.startswith("https") for e in self.config.endpoints)
        ):
            reason += (
                " (the TLS handshake was refused: does etcd want a client certificate?"
                " set ETCD_CERT_FILE and ETCD_KEY_FILE)"
            )
        raise EtcdUnavailable(
            f"no etcd endpoint reachable ({', '.join(self.config.endpoints)}): {reason}"
        )

    async def get(self, key: str) -> KeyValue | None:
        kvs, _ = await self.range(key)
        return kvs[0] if kvs else None

    async def range(
        self, key: str, *, prefix: bool = False, revision: int = 0, limit: int = 0
    ) -> tuple[list[KeyValue], int]:
        """Keys (one, or all under a prefix) and the store revision the read saw."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        if revision:
            body["revision"] = str(revision)
        if limit:
            body["limit"] = str(limit)
        data = await self._post("kv/range", body)
        kvs = [KeyValue.from_json(kv) for kv in data.get("kvs", [])]
        return kvs, int(data.get("header", {}).get("revision", 0))

    async def count_modified_since(self, prefix: str, revision: int) -> int:
        """How many keys under ``prefix`` were last modified after ``revision`` (a count only:
        the watch keepalive's probe, answered from the index)."""
        body: dict[str, Any] = {
            "key": _b64(prefix),
            "range_end": _b64(prefix_end(prefix)),
            "count_only": True,
            "min_mod_revision": str(revision + 1),
        }
        data = await self._post("kv/range", body)
        return int(data.get("count", 0))

    async def list_all(self, prefix: str, page: int = LIST_PAGE) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` at one consistent revision, read in pages."""
        kvs: list[KeyValue] = []
        revision = 0
        async for batch, at in self.list_pages(prefix, page):
            kvs.extend(batch)
            revision = at
        return kvs, revision

    async def list_pages(
        self, prefix: str, page: int = LIST_PAGE
    ) -> AsyncIterator[tuple[list[KeyValue], int]]:
        """The keys under ``prefix`` a page at a time, all at the revision of the first page
        (given with each)."""
        start, revision = prefix, 0
        end = _b64(prefix_end(prefix))
        while True:
            body: dict[str, Any] = {"key": _b64(start), "range_end": end, "limit": str(page)}
            if revision:
                body["revision"] = str(revision)
            data = await self._post("kv/range", body)
            revision = revision or int(data.get("header", {}).get("revision", 0))
            batch = [KeyValue.from_json(kv) for kv in data.get("kvs", [])]
            yield batch, revision
            if not data.get("more") or not batch:
                return
            start = batch[-1].key + "\0"

    async def put(self, key: str, value: str | bytes, *, lease: int = 0) -> int:
        """Write a key; returns the new store revision."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        data = await self._post("kv/put", body)
        return int(data.get("header", {}).get("revision", 0))

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        data = await self._post("kv/deleterange", body)
        return int(data.get("deleted", 0))

    async def put_if(self, key: str, value: str | bytes, *, mod_revision: int) -> int | None:
        """Write only if the key's mod revision is ``mod_revision`` (0: only if absent).

        Returns the new revision, or None when the comparison failed (a conflict).
        """
        compare = {
            "key": _b64(key),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": str(mod_revision),
        }
        success = [{"request_put": {"key": _b64(key), "value": _b64(value)}}]
        data = await self._post("kv/txn", {"compare": [compare], "success": success})
        if not data.get("succeeded"):
            return None
        return int(data.get("header", {}).get("revision", 0))

    async def delete_if(self, key: str, *, mod_revision: int) -> bool:
        compare = {
            "key": _b64(key),
            "target": "MOD",
            "result": "EQUAL",
            "mod_revision": str(mod_revision),
        }
        success = [{"request_delete_range": {"key": _b64(key)}}]
        data = await self._post("kv/txn", {"compare": [compare], "success": success})
        return bool(data.get("succeeded"))

    async def put_many(self, items: Sequence[tuple[str, str | bytes]], chunk: int = 128) -> None:
        """Bulk writes, ``chunk`` puts per transaction (etcd's default --max-txn-ops is 128)."""
        for start in range(0, len(items), chunk):
            ops = [
                {"request_put": {"key": _b64(k), "value": _b64(v)}}
                for k, v in items[start : start + chunk]
            ]
            await self._post("kv/txn", {"success": ops})

    async def grant_lease(self, ttl: int) -> int:
        data = await self._post("lease/grant", {"TTL": str(ttl)})
        return int(data["ID"])

    async def keep_alive(self, lease: int) -> int:
        """Refresh a lease once; returns the remaining TTL (0 if the lease is gone)."""
        data = await self._post("lease/keepalive", {"ID": str(lease)})
        return int(data.get("result", {}).get("TTL", 0))

    async def compact(self, revision: int) -> None:
        await self._post("kv/compaction", {"revision": str(revision)})

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        """Events under ``prefix`` from ``start_revision`` on, until cancelled or broken.

        Raises EtcdCompacted when the start revision is gone, EtcdUnavailable when the stream
        cannot be opened, EtcdError when it ends or breaks (the caller re-lists and re-watches).
        """
        request = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(prefix_end(prefix)),
                "start_revision": str(start_revision),
            }
        }
        endpoint = self._endpoints()[0]
        try:
            async with self._http.stream(
                "POST", f"{endpoint.rstrip('/')}/v3/watch", json=request, timeout=None
            ) as response:
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    message = jsontext.loads(line)
                    if "error" in message:
                        raise EtcdError(f"watch failed: {message['error']}")
                    result = message.get("result", {})
                    if result.get("canceled") or result.get("compact_revision"):
                        compacted = int(result.get("compact_revision", 0))
                        if compacted:
                            raise EtcdCompacted(compacted)
                        raise EtcdError(f"watch cancelled: {result.get('cancel_reason', '')}")
                    revision = int(result.get("header", {}).get("revision", 0))
                    for event in result.get("events", []):
                        yield WatchEvent(
                            deleted=event.get("type") == "DELETE",
                            kv=KeyValue.from_json(event["kv"]),
                            revision=revision,
                        )
        except self._transport_error as exc:
            raise EtcdUnavailable(f"etcd watch on {endpoint} failed: {exc}") from exc
        raise EtcdError("watch stream ended")
