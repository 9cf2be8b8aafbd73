"""Health as Felix aggregates it, and the routes that serve it.

Health is aggregated from components, as Felix's health aggregator does it: each component
registers what it reports (liveness, readiness) and a timeout, then reports periodically, idle
or not. ``/liveness`` is good while every live-reporting component has reported live within its
timeout (HealthTimeoutOverrides replaces a component's timeout by name); ``/readiness`` while
every ready-reporting one last said ready. Both answer with a table of the components, so a
failing probe says which component stopped. They are served by pyfelix.httpserver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from pyfelix.httpserver import Response

log = logging.getLogger(__name__)

#: Felix's component names and timeouts (felix/calc/async_calc_graph.go,
#: felix/dataplane/linux/int_dataplane.go). Both report every HEALTH_INTERVAL.
CALC_GRAPH = "CalculationGraph"
CALC_GRAPH_TIMEOUT = 30.0
DATAPLANE = "InternalDataplaneMainLoop"
HEALTH_INTERVAL = 10.0


@attrs.define(eq=False)
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


def health_routes(
    health: HealthAggregator, extra_ready: Callable[[], bool] = lambda: True
) -> dict[str, Callable[[], Response]]:
    """/liveness and /readiness from the aggregator; ``extra_ready`` is readiness beyond the
    components' (the connector's "dataplane programmed"). The HTTP server is imported here:
    an agent with HealthEnabled off never needs it."""
    from pyfelix.httpserver import text  # noqa: PLC0415

    def liveness() -> Response:
        summary = health.summary()
        return text(200 if summary.live else 503, summary.detail + "\n")

    def readiness() -> Response:
        summary = health.summary()
        good = summary.ready and extra_ready()
        return text(200 if good else 503, summary.detail + "\n")

    return {"/liveness": liveness, "/readiness": readiness}
