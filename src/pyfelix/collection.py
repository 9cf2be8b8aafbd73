"""When Python's cyclic garbage collector runs, decided in one place.

pyfelix builds a large heap of long-lived objects (the snapshot, the calculation graph's
indexes, the first apply's chains and sets) and almost no cyclic garbage. The collector,
triggered by allocations, walked that heap again and again: a third of a 250k-endpoint
dry-run, over half of an agent's time to InSync at 10k endpoints, 7-20 ms pauses on every
full collection afterwards (bench/RESULTS.md). So it is paused while the heap is built, the
built heap is frozen out of its reach, and only what comes after is collected. Each switch is
a function here, named by the moment it is for; the callers say which moment it is.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import cast

#: If the datastore never reaches InSync, the agent collects again after this long anyway.
STARTUP_PAUSE = 60.0


def pause_while_loading() -> None:
    """A load, a start-up or a forked worker is about to build long-lived objects only."""
    gc.disable()


def resume() -> None:
    """Collect again (the end of a one-shot command's work, or of the calc loop)."""
    gc.enable()


def keep_heap_as_long_lived() -> None:
    """What is on the heap now lives as long as the process: frozen out of the collector's
    reach, with no collection first (at 10k endpoints one took 80 ms to find a few dozen
    objects, which stay frozen). What the start built and let go (the snapshot's parse, the
    first apply's scripts and listings) is handed back to the kernel: glibc keeps freed heap
    mapped, 21-23 MB of the nftables mode's agent (bench/RESULTS.md)."""
    gc.freeze()
    trim = _heap_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _heap_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None under another C library: the heap then stays); ctypes
    is imported here, by the agent only (the one-shot commands never reach InSync)."""
    import ctypes  # noqa: PLC0415

    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
    return cast("Callable[[int], int] | None", trim)


def settle_after_in_sync() -> None:
    """The snapshot is loaded: freeze it, and collect what comes after."""
    gc.freeze()
    gc.enable()
