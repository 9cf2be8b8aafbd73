"""The small HTTP server behind the health and metrics ports.

HTTP is parsed by h11; each connection answers one GET or HEAD and closes. A client that resets,
stalls or sends garbage affects only its own connection; at most MAX_CONNECTIONS are held at
once (the rest wait unaccepted, costing no descriptor), and when few slots are left a request
must come within BUSY_TIMEOUT, so a flood of idle connections drains in seconds. A port that
cannot be bound is retried, as Felix retries, instead of stopping the agent. What each path
answers is the caller's (``routes``); so is TLS (``tls``, asked for a fresh context on every
connection, so renewed certificates apply without a restart, as Felix reloads them per
client).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping

import attrs
import h11
import trio

log = logging.getLogger(__name__)

# A request is one short line and a few headers; anything slower is not a health checker.
REQUEST_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 8192
# Felix retries a health server that failed to listen (port in use) every second.
LISTEN_RETRY = 1.0
#: Connections one server holds at once; more wait in the kernel's backlog, unaccepted, so a
#: flood of connections (1,100 exhausted the agent's descriptors) costs no descriptor of ours.
MAX_CONNECTIONS = 64
#: A request's time when fewer than a quarter of the slots are free: a flood of idle
#: connections then drains in seconds, and a probe queued behind it gets its turn.
BUSY_TIMEOUT = 0.25
#: After accept fails (out of descriptors after all), wait this long before the next.
ACCEPT_BACKOFF = 0.1

#: (status, content type, body)
Response = tuple[int, str, bytes]


def text(status: int, body: str) -> Response:
    return status, "text/plain", body.encode()


@attrs.define(eq=False)
class HttpServer:
    routes: Mapping[str, Callable[[], Response]]
    #: Server-side TLS for each new connection; raises (OSError, ssl.SSLError) while the
    #: configured files are unusable.
    tls: Callable[[], ssl.SSLContext] | None = None
    name: str = "health"

    def respond(self, path: str) -> Response:
        route = self.routes.get(path)
        return route() if route is not None else text(404, "not found\n")

    async def handle(self, stream: trio.abc.Stream, seconds: float = REQUEST_TIMEOUT) -> None:
        """One request, then close. Any failure of the client's is the client's alone."""
        try:
            with trio.move_on_after(seconds):
                if self.tls is not None:
                    stream = trio.SSLStream(stream, self.tls(), server_side=True)
                await self._exchange(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError) as exc:
            log.debug("%s client went away: %r", self.name, exc)
        except (OSError, ssl.SSLError) as exc:
            log.error("%s server cannot serve TLS: %s", self.name, exc)
        except Exception:
            # A fault in answering one client must not stop the agent (nor the server).
            log.exception("%s request failed", self.name)
        finally:
            await trio.aclose_forcefully(stream)

    async def _exchange(self, stream: trio.abc.Stream) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(4096)
                connection.receive_data(bytes(data))
                continue
            if isinstance(event, h11.Request):
                break
            return  # end of stream or a closed connection before a request
        target = event.target.decode("ascii", errors="replace").split("?", 1)[0]
        if event.method not in (b"GET", b"HEAD"):
            status, content_type, payload = text(405, "method not allowed\n")
        else:
            status, content_type, payload = self.respond(target)
        headers = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(payload))),
            ("Connection", "close"),
        ]
        out = connection.send(h11.Response(status_code=status, headers=headers)) or b""
        if event.method != b"HEAD":
            out += connection.send(h11.Data(data=payload)) or b""
        out += connection.send(h11.EndOfMessage()) or b""
        await stream.send_all(out)

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (every interface for an empty host), retrying every second
        while the address cannot be bound; ``started`` as soon as the attempt is under way."""
        task_status.started()
        while True:
            try:
                listeners = await trio.open_tcp_listeners(port, host=host or None)
            except OSError as exc:
                log.error("cannot listen on %s:%s (%s); retrying", host or "*", port, exc)
                await trio.sleep(LISTEN_RETRY)
                continue
            scheme = "https" if self.tls is not None else "http"
            log.info("serving %s on %s://%s:%s", self.name, scheme, host or "*", port)
            slots = trio.Semaphore(MAX_CONNECTIONS)
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(self._accept, listener, slots, nursery)

    async def _accept(
        self, listener: trio.SocketListener, slots: trio.Semaphore, nursery: trio.Nursery
    ) -> None:
        """Accept a connection only when a slot is free (trio's serve_listeners accepts as
        fast as clients come, and logs a traceback for every accept that finds no descriptor
        left). A failed accept is logged once per run of failures."""
        failing = False
        while True:
            await slots.acquire()
            try:
                stream = await listener.accept()
            except OSError as exc:
                slots.release()
                if not failing:
                    log.warning("%s server cannot accept a connection: %s", self.name, exc)
                failing = True
                await trio.sleep(ACCEPT_BACKOFF)
                continue
            failing = False
            busy = slots.value < MAX_CONNECTIONS // 4
            nursery.start_soon(
                self._handle_in_slot, stream, slots, BUSY_TIMEOUT if busy else REQUEST_TIMEOUT
            )

    async def _handle_in_slot(
        self, stream: trio.abc.Stream, slots: trio.Semaphore, seconds: float
    ) -> None:
        try:
            await self.handle(stream, seconds)
        finally:
            slots.release()
