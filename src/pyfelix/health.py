"""Health and metrics over HTTP, as Felix serves them.

Health is aggregated from components, as Felix's health aggregator does it: each component
registers what it reports (liveness, readiness) and a timeout, then reports periodically, idle
or not. ``/liveness`` is good while every live-reporting component has reported live within its
timeout (HealthTimeoutOverrides replaces a component's timeout by name); ``/readiness`` while
every ready-reporting one last said ready. Both answer with a table of the components, so a
failing probe says which component stopped. ``/metrics`` is the Prometheus text format with
Felix's metric names.

HTTP is parsed by h11; a client that resets, stalls or sends garbage affects only its own
connection. A port that cannot be bound is retried, as Felix retries, instead of stopping the
agent.
"""

from __future__ import annotations

import logging
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

#: Felix's component names and timeouts (felix/calc/async_calc_graph.go,
#: felix/dataplane/linux/int_dataplane.go). Both report every HEALTH_INTERVAL.
CALC_GRAPH = "CalculationGraph"
CALC_GRAPH_TIMEOUT = 30.0
DATAPLANE = "InternalDataplaneMainLoop"
HEALTH_INTERVAL = 10.0


@attrs.define
class _Reporter:
    live: bool
    ready: bool
    timeout: float
    latest_live: bool = True
    latest_ready: bool = False
    detail: str = ""
    at: float = 0.0


@attrs.frozen
class Summary:
    live: bool
    ready: bool
    detail: str


@attrs.define(eq=False)
class HealthAggregator:
    """Components' latest reports, summarised on demand.

    ``clock`` is the time source (Trio's clock in the agent, so tests can jump it); a timeout of
    0 means the component's reports never expire.
    """

    clock: Callable[[], float] = trio.current_time
    overrides: Mapping[str, float] = attrs.Factory(dict)
    _reporters: dict[str, _Reporter] = attrs.Factory(dict)
    _last: Summary | None = None

    def register(self, name: str, *, timeout: float, live: bool = True, ready: bool = True) -> None:
        """Add a component, or change a registered one's timeout (keeping its last report)."""
        existing = self._reporters.get(name)
        if existing is not None:
            existing.live, existing.ready, existing.timeout = live, ready, timeout
            return
        self._reporters[name] = _Reporter(live, ready, timeout, at=self.clock())

    def report(
        self, name: str, *, live: bool = True, ready: bool = False, detail: str = ""
    ) -> None:
        reporter = self._reporters[name]
        if (reporter.latest_live, reporter.latest_ready) != (live, ready):
            log.debug("health of %s: live=%s ready=%s", name, live, ready)
        reporter.latest_live, reporter.latest_ready, reporter.detail = live, ready, detail
        reporter.at = self.clock()

    def timeout_of(self, name: str) -> float:
        return self.overrides.get(name, self._reporters[name].timeout)

    def summary(self) -> Summary:
        now = self.clock()
        live = ready = True
        rows = [("COMPONENT", "TIMEOUT", "LIVENESS", "READINESS", "DETAIL")]
        for name, reporter in sorted(self._reporters.items()):
            timeout = self.timeout_of(name)
            timed_out = timeout > 0 and now - reporter.at > timeout
            liveness = readiness = "-"
            if reporter.live:
                good = reporter.latest_live and not timed_out
                live &= good
                liveness = "timed out" if timed_out else ("live" if good else "non-live")
            if reporter.ready:
                good = reporter.latest_ready and not timed_out
                ready &= good
                readiness = "timed out" if timed_out else ("ready" if good else "non-ready")
            suffix = " (override)" if name in self.overrides else ""
            shown = f"{timeout:g}s{suffix}" if timeout else f"-{suffix}"
            rows.append((name, shown, liveness, readiness, reporter.detail))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        detail = "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )
        summary = Summary(live, ready, detail)
        if self._last is None or (self._last.live, self._last.ready) != (live, ready):
            log.info("overall health: live=%s ready=%s\n%s", live, ready, detail)
        self._last = summary
        return summary


@attrs.define(eq=False)
class HealthServer:
    """/liveness, /readiness (from the aggregator) and /metrics (from ``metrics``)."""

    health: HealthAggregator
    metrics: Callable[[], str]
    #: Readiness beyond the components' (the connector's "dataplane programmed").
    extra_ready: Callable[[], bool] = lambda: True

    def respond(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        if path in ("/liveness", "/readiness"):
            summary = self.health.summary()
            good = summary.live if path == "/liveness" else summary.ready and self.extra_ready()
            return (200 if good else 503), "text/plain", summary.detail + "\n"
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", self.metrics()
        return 404, "text/plain", "not found\n"

    async def handle(self, stream: trio.abc.Stream) -> None:
        """One request, then close. Any failure of the client's is the client's alone."""
        try:
            with trio.move_on_after(REQUEST_TIMEOUT):
                await self._exchange(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError) as exc:
            log.debug("health client went away: %r", exc)
        except Exception:
            # A fault in answering one client must not stop the agent (nor the server).
            log.exception("health request failed")
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
            status, content_type, body = 405, "text/plain", "method not allowed\n"
        else:
            status, content_type, body = self.respond(target)
        payload = body.encode()
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
            log.info("serving health and metrics on %s:%s", host or "*", port)
            await trio.serve_listeners(self.handle, listeners)


Metric = tuple[str, str, float] | tuple[str, str, float, float]


def prometheus(metrics: dict[str, Metric]) -> str:
    """Prometheus text exposition: name -> (type, help, value), or for a summary
    (``"summary"``, help, sum, count) without quantiles."""
    lines = []
    for name, (kind, help_text, *values) in sorted(metrics.items()):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        if kind == "summary":
            lines += [f"{name}_sum {values[0]:g}", f"{name}_count {values[1]:g}"]
        else:
            lines.append(f"{name} {values[0]:g}")
    return "\n".join(lines) + "\n"
