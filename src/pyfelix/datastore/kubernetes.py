"""A small Kubernetes API client for the KDD datastore: list in pages, watch with bookmarks.

What it needs of the API is three requests (a paged list, a watch stream, a merge patch), so
it is written on httpx (already the etcd client's transport, and Trio-native through anyio)
rather than on a client library: objects stay the plain JSON the loader decodes, and every
status the syncer must tell apart (410 Gone, 403, 404, a stalled stream) surfaces as its own
exception.

Configuration follows Felix and kubectl: the kubeconfig of ``FELIX_KUBECONFIG`` or
``KUBECONFIG`` (its current context; a list of files takes the first), else the pod's service
account (``KUBERNETES_SERVICE_HOST`` and the token and CA under
/var/run/secrets/kubernetes.io/serviceaccount). The token file is read again on every
request, as projected service-account tokens rotate.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from pyfelix import jsontext
from pyfelix.errors import PyfelixError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Every request but a watch: the API server answers a page of 500 pods in well under this.
REQUEST_TIMEOUT = 30.0
#: Objects per list page (client-go's pager uses 500).
LIST_PAGE = 500
#: A page of a listing: its objects as the API server gave them (dicts), or what a page
#: reader made of some of them (``pages``' ``read``).
Objects = list[Any]
#: What reads a listing's page from its body: the page as a dict, or None to have it parsed.
PageReader = Callable[[bytes], dict[str, Any] | None]


class KubeError(PyfelixError):
    """A Kubernetes API request failed; ``status`` is its HTTP status (0: none came)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class KubeUnavailable(KubeError):
    """The API server could not be reached, or did not answer in time."""


class KubeGone(KubeError):
    """410: the resource version asked for is older than the API server keeps; re-list."""


class KubeForbidden(KubeError):
    """401 or 403: the credentials are refused, or RBAC does not grant the request."""


class KubeNotFound(KubeError):
    """404: the API (a custom resource kind not installed) or the object does not exist."""


class KubeConfigError(KubeError):
    """No usable kubeconfig or service account; the message says what is missing."""


@attrs.frozen
class KubeConfig:
    """Where the API server is and how to authenticate to it."""

    server: str
    token: str = ""
    token_file: str = ""
    ca_file: str = ""
    ca_data: bytes = b""
    cert_file: str = ""
    key_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    insecure: bool = False
    #: Where it came from, for messages.
    origin: str = ""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KubeConfig:
        env = os.environ if environ is None else environ
        for variable in ("FELIX_KUBECONFIG", "KUBECONFIG"):
            value = env.get(variable, "")
            if value:
                return cls.from_kubeconfig(Path(value.split(os.pathsep)[0]))
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if host and port and (SERVICE_ACCOUNT / "token").exists():
            server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
            return cls(
                server,
                token_file=str(SERVICE_ACCOUNT / "token"),
                ca_file=str(SERVICE_ACCOUNT / "ca.crt"),
                origin="the pod's service account",
            )
        raise KubeConfigError(
            "no Kubernetes API configured: set FELIX_KUBECONFIG or KUBECONFIG to a kubeconfig"
            " file, or run in a pod with a service account"
        )

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeConfig:
        """The current context of a kubeconfig file (its relative paths are relative to it)."""
        import yaml  # noqa: PLC0415

        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc}") from None
        if not isinstance(data, dict):
            raise KubeConfigError(f"kubeconfig {path} is not a mapping")

        def named(section: str, name: str) -> dict[str, Any]:
            for entry in data.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") == name:
                    body = entry.get(section.removesuffix("s"), {})
                    return body if isinstance(body, dict) else {}
            raise KubeConfigError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")

        current = data.get("current-context")
        if not current:
            raise KubeConfigError(f"kubeconfig {path} has no current-context")
        context = named("contexts", str(current))
        cluster = named("clusters", str(context.get("cluster", "")))
        user = named("users", str(context.get("user", ""))) if context.get("user") else {}
        if not cluster.get("server"):
            raise KubeConfigError(f"kubeconfig {path}: cluster has no server")
        if "exec" in user or "auth-provider" in user:
            raise KubeConfigError(
                f"kubeconfig {path}: exec and auth-provider credentials are not supported;"
                " use a token, a client certificate or a service account"
            )
        base = path.parent

        def file(key: str) -> str:
            value = user.get(key) or cluster.get(key) or ""
            return str(base / value) if value else ""

        def data_of(section: dict[str, Any], key: str) -> bytes:
            value = section.get(key)
            return base64.b64decode(value) if isinstance(value, str) else b""

        return cls(
            server=str(cluster["server"]).rstrip("/"),
            token=str(user.get("token", "")),
            token_file=str(base / user["tokenFile"]) if user.get("tokenFile") else "",
            ca_file=str(base / cluster["certificate-authority"])
            if cluster.get("certificate-authority")
            else "",
            ca_data=data_of(cluster, "certificate-authority-data"),
            cert_file=file("client-certificate"),
            key_file=file("client-key"),
            cert_data=data_of(user, "client-certificate-data"),
            key_data=data_of(user, "client-key-data"),
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            origin=str(path),
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        try:
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif self.ca_data:
                context.load_verify_locations(cadata=self.ca_data.decode())
            elif self.ca_file:
                context.load_verify_locations(cafile=self.ca_file)
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file or None)
            elif self.cert_data:
                _load_chain_data(context, self.cert_data, self.key_data)
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"kubeconfig {self.origin}: TLS files: {exc}") from None
        return context

    def bearer(self) -> str:
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise KubeConfigError(f"cannot read token file {self.token_file}: {exc}") from None
        return self.token


def config_for(source: str) -> KubeConfig:
    """The Kubernetes API a ``kubernetes://`` source names: ``kubernetes:///path`` a
    kubeconfig file, ``kubernetes://`` the environment's (raises KubeConfigError)."""
    from pyfelix.datastore import kubeconfig_path  # noqa: PLC0415

    path = kubeconfig_path(source)
    return KubeConfig.from_kubeconfig(Path(path)) if path else KubeConfig.from_environment()


def _load_chain_data(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a certificate chain only from files: write them to a private temporary
    directory for the moment it takes."""
    with tempfile.TemporaryDirectory() as directory:
        cert_path, key_path = Path(directory, "cert.pem"), Path(directory, "key.pem")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(str(cert_path), str(key_path))


def _status_error(status: int, body: bytes, what: str) -> KubeError:
    """The exception for an error answer (a Status object, usually)."""
    message, reason = body.decode(errors="replace")[:300], ""
    with contextlib.suppress(ValueError, AttributeError):
        data = jsontext.loads(body)
        message, reason = str(data.get("message", message)), str(data.get("reason", ""))
    text = f"{what}: HTTP {status}: {message}"
    if status == 410:
        return KubeGone(text, status, reason)
    if status in (401, 403):
        return KubeForbidden(text, status, reason)
    if status == 404:
        return KubeNotFound(text, status, reason)
    if status >= 500 or status == 429:
        return KubeUnavailable(text, status, reason)
    return KubeError(text, status, reason)


class KubeClient:
    """Async client for one API server; use as ``async with KubeClient(config) as client``."""

    def __init__(self, config: KubeConfig) -> None:
        # Imported here: an agent on another datastore never pays httpx's imports.
        import httpx  # noqa: PLC0415

        # httpx logs every request at INFO: a watch re-opened every few minutes per kind.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.config = config
        self._httpx = httpx
        self._http = httpx.AsyncClient(
            base_url=config.server, verify=config.ssl_context(), timeout=REQUEST_TIMEOUT
        )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def _headers(self, content_type: str = "") -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self.config.bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        read: PageReader | None = None,
    ) -> dict[str, Any]:
        content = json.dumps(body).encode() if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        try:
            response = await self._http.request(
                method,
                path,
                params=params,
                content=content,
                headers=self._headers(content_type if content is not None else ""),
            )
        except self._httpx.TransportError as exc:
            raise KubeUnavailable(f"{self.config.server}: {_why(exc)}") from None
        if response.status_code >= 400:
            raise _status_error(response.status_code, response.content, f"{method} {path}")
        data = None if read is None else read(response.content)
        if data is None:
            data = jsontext.loads(response.content)
        return data

    async def list(
        self, path: str, page: int = LIST_PAGE, resource_version: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object at ``path`` (a collection), read in pages, and the resource version
        of the listing (a consistent snapshot: later pages continue the first's)."""
        items: list[dict[str, Any]] = []
        version = ""
        async for listed, at in self.pages(path, page, resource_version):
            items.extend(listed)
            version = at
        return items, version

    async def pages(
        self,
        path: str,
        page: int = LIST_PAGE,
        resource_version: str = "",
        read: PageReader | None = None,
    ) -> AsyncIterator[tuple[Objects, str]]:
        """``list``'s pages as they come, each with the listing's resource version (known
        once the last page has come: "" before it), for a reader that keeps what it makes of
        each page and lets the objects go (a 100,000-pod listing held whole was gigabytes).
        ``read`` reads each page's body first (the compiled reader of pods)."""
        params: dict[str, str] = {"limit": str(page)}
        if resource_version:
            params["resourceVersion"] = resource_version
            params["resourceVersionMatch"] = "NotOlderThan"
        while True:
            data = await self.request("GET", path, params, read=read)
            metadata = data.get("metadata") or {}
            cont = metadata.get("continue")
            items = data.get("items") or []
            del data
            if not cont:
                yield items, str(metadata.get("resourceVersion", ""))
                return
            yield items, ""
            params = {"limit": str(page), "continue": str(cont)}

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch from ``resource_version`` (bookmarks included), until the
        API server ends it after ``timeout_seconds``. A stream that sends nothing for longer
        than that (a stalled connection) ends in KubeUnavailable, as does one cut off; an
        ERROR event is raised as the status it carries (410 as KubeGone)."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        timeout = self._httpx.Timeout(REQUEST_TIMEOUT, read=timeout_seconds + REQUEST_TIMEOUT)
        try:
            async with self._http.stream(
                "GET", path, params=params, headers=self._headers(), timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    body = await response.aread()
                    raise _status_error(response.status_code, body, f"watch {path}")
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    event: dict[str, Any] = jsontext.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise _status_error(
                            int(status.get("code", 500)), json.dumps(status).encode(), path
                        )
                    yield event
        except (self._httpx.TransportError, self._httpx.StreamError) as exc:
            raise KubeUnavailable(f"watch {path}: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    """The most telling reason in an exception and its causes."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"the server's certificate is not trusted ({current.verify_message})"
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        current = current.__cause__ or current.__context__
    return str(exc) or type(exc).__name__
