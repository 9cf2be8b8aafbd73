"""Health and metrics over HTTP, as Felix serves them.

``/liveness`` answers 200 while the calc loop keeps beating, ``/readiness`` once the agent is in
sync and the dataplane has applied its first snapshot (503 otherwise). ``/metrics`` is the
Prometheus text format with Felix's metric names. Enabled by HealthEnabled (HealthHost,
HealthPort) and PrometheusMetricsEnabled (PrometheusMetricsHost, PrometheusMetricsPort).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

# A request is one short line and a few headers; anything slower is not a health checker.
REQUEST_TIMEOUT = 5.0
LIVENESS_TIMEOUT = 30.0


@attrs.define(eq=False)
class HealthServer:
    live: Callable[[], bool]
    ready: Callable[[], bool]
    metrics: Callable[[], str]

    def respond(self, path: str) -> tuple[int, str, str]:
        """(status, content type, body) for a GET of ``path``."""
        if path == "/liveness":
            ok = self.live()
            return (200 if ok else 503), "text/plain", "live\n" if ok else "not live\n"
        if path == "/readiness":
            ok = self.ready()
            return (200 if ok else 503), "text/plain", "ready\n" if ok else "not ready\n"
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", self.metrics()
        return 404, "text/plain", "not found\n"

    async def handle(self, stream: trio.abc.Stream) -> None:
        with trio.move_on_after(REQUEST_TIMEOUT):
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data += chunk
            request = data.split(b"\r\n", 1)[0].decode(errors="replace").split()
            path = request[1] if len(request) >= 2 else "/"
            status, content_type, body = self.respond(path.split("?", 1)[0])
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            payload = body.encode()
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send_all(head.encode() + payload)
        await stream.aclose()

    async def serve(
        self, host: str, port: int, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host or None)
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self.handle, listeners, handler_nursery=nursery)


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
