"""What the agent's parts count and time for Felix's metrics, kept without the metrics library.

A leaf module: the calculation graph and the dataplane record into these plain objects, and only
the metrics collector (pyfelix.metrics) turns them into Prometheus families when scraped, so no
stage depends on how metrics are served.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable

import attrs

#: Felix's summaries (libcalico-go's prometheus.NewSummary) report these quantiles over the
#: last ten minutes of observations.
QUANTILES = (0.5, 0.9, 0.99)
MAX_AGE = 600.0
#: Enough recent observations for a 1% quantile; older ones count only in sum and count.
MAX_KEPT = 1024


@attrs.define(eq=False)
class Observations:
    """A summary's inputs: the count and sum of every observation, and the recent ones (at
    most MAX_KEPT, at most MAX_AGE old) for its quantiles."""

    clock: Callable[[], float] = time.monotonic
    count: int = 0
    total: float = 0.0
    _recent: deque[tuple[float, float]] = attrs.field(factory=lambda: deque(maxlen=MAX_KEPT))

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        self._recent.append((self.clock(), value))

    def quantiles(self) -> dict[float, float]:
        """QUANTILES of the recent observations (NaN without any, as Go's client says)."""
        horizon = self.clock() - MAX_AGE
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        values = sorted(value for _, value in self._recent)
        if not values:
            return dict.fromkeys(QUANTILES, math.nan)
        return {q: values[min(len(values) - 1, int(q * len(values)))] for q in QUANTILES}


@attrs.define(eq=False)
class DataplaneStats:
    """What a dataplane driver records: its messages by type, each apply's duration, failed
    applies, and how long the first apply after start took (Felix's initial resync time)."""

    messages: Counter[str] = attrs.Factory(Counter)
    applies: Observations = attrs.Factory(Observations)
    failures: int = 0
    initial_resync_seconds: float | None = None
    #: IP sets programmed cut, over MaxIpsetSize: name -> members wanted.
    oversized_ipsets: dict[str, int] = attrs.Factory(dict)
    #: Of those, each that lets through what a policy means to stop (a Deny rule matching the
    #: set, an Allow rule matching outside it): name -> the policies, as "Kind ns/name".
    weakened_policies: dict[str, tuple[str, ...]] = attrs.Factory(dict)
    #: Per (IP version, table) as last written: our chains and their rules (iptables mode).
    tables: dict[tuple[int, str], tuple[int, int]] = attrs.Factory(dict)
    #: Per IP version as last written (nftables mode): the calico table's chains, rules,
    #: sets and maps.
    nft: dict[int, tuple[int, int, int, int]] = attrs.Factory(dict)
    #: Per (IP version, table): the restore lines executed, all writes together.
    lines_executed: Counter[tuple[int, str]] = attrs.Factory(Counter)
    #: The main routing table as last written: the routes managed, and their interfaces.
    routes: tuple[int, int] = (0, 0)
    #: Each route write's listing and sync of the main table (Felix's resync time).
    route_syncs: Observations = attrs.Factory(Observations)
    #: The messages each apply took in (Felix's felix_int_dataplane_msg_batch_size).
    batch_sizes: Observations = attrs.Factory(Observations)
