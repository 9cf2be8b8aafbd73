"""Whether this process is one whose death its parent survives (a parsing or validating
worker, forked for it), so that native code that can crash the process may run here.

yaml-rs ends the process (SIGSEGV or SIGABRT, not MemoryError) when an allocation fails, and
it allocates about eight bytes per byte of text up front: a large manifest near the memory
limit took the agent down. Outside such a worker, large texts are parsed by yaml-rs in a
child of their own (resources/fast_yaml.py)."""

from __future__ import annotations

_contained = False


def contain() -> None:
    """Mark this process (a forked worker) as one whose crash its parent survives."""
    global _contained  # noqa: PLW0603 (one flag for the process)
    _contained = True


def contained() -> bool:
    return _contained
