"""A leaky bucket on Trio's clock: the rate limit the calc loop's flushes and the Linux
driver's applies share (each with its own rate, as Felix sets them).

A caller with a token goes at once, so a lone change pays no delay; a storm drains the bucket
and then proceeds one token at a time, its changes coalescing meanwhile.
"""

from __future__ import annotations

import attrs
import trio


@attrs.define(eq=False)
class LeakyBucket:
    """Tokens refill at one per ``interval`` seconds, up to ``size``; time is Trio's clock.

    Tokens are whole numbers counted from a reference time, so waiting for the next one is an
    exact deadline (no creeping float remainders that could wake the loop without progress).
    """

    interval: float
    size: int
    _tokens: int = attrs.field(init=False)
    _since: float | None = None

    def __attrs_post_init__(self) -> None:
        self._tokens = self.size

    def _refill(self) -> None:
        now = trio.current_time()
        if self._since is None or self._tokens >= self.size:
            self._since = now
            return
        earned = int((now - self._since) / self.interval + 1e-9)
        if earned:
            self._tokens = min(self.size, self._tokens + earned)
            self._since = now if self._tokens >= self.size else self._since + earned * self.interval

    @property
    def throttled(self) -> bool:
        """Whether the next ``take`` would wait."""
        self._refill()
        return self._tokens < 1

    async def take(self) -> None:
        self._refill()
        while self._tokens < 1:
            assert self._since is not None
            await trio.sleep_until(self._since + self.interval)
            self._refill()
        self._tokens -= 1
