"""Reading a part of the kernel ahead of its use: started early (beside other work, or before
the writer that needs it exists), taken when needed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import attrs
import trio

from pyfelix.errors import DataplaneWriteError

log = logging.getLogger(__name__)
T = TypeVar("T")


@attrs.define(eq=False)
class Reading(Generic[T]):
    """A part of the kernel read ahead of its use: ``value`` once ``done``, if ``ok`` (else
    the read failed, and the user reads for itself, reporting why)."""

    done: trio.Event = attrs.Factory(trio.Event)
    value: T | None = None
    ok: bool = False


def start_reading(read: Callable[[], Awaitable[T]], nursery: trio.Nursery, what: str) -> Reading[T]:
    """``read`` run in the background."""
    reading: Reading[T] = Reading()

    async def run() -> None:
        try:
            reading.value, reading.ok = await read(), True
        except DataplaneWriteError as exc:
            log.debug("reading the %s ahead failed (%s): read again when needed", what, exc)
        finally:
            reading.done.set()

    nursery.start_soon(run)
    return reading
