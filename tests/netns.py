"""Temporary network namespaces for tests, always removed afterwards.

Namespaces are created with pyroute2 (the same library the dataplane uses) under a unique
``pft-`` prefix, so a leftover is easy to recognise; nothing here touches the root namespace.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import multiprocessing
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pyroute2 import netns as _netns

T = TypeVar("T")
PREFIX = "pft-"
_counter = itertools.count()


def namespace_exists(name: str) -> bool:
    return name in _netns.listnetns()


@contextlib.contextmanager
def temporary_netns(label: str = "ns") -> Iterator[str]:
    """Create a fresh namespace with ``lo`` up; delete it on exit, whatever happens inside."""
    name = f"{PREFIX}{label}-{os.getpid()}-{next(_counter)}"
    _netns.create(name)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        _netns.remove(name)


def run_in(
    name: str, *argv: str, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command inside namespace ``name`` and return its completed process."""
    return subprocess.run(
        ["ip", "netns", "exec", name, *argv],
        capture_output=True,
        text=True,
        check=False,
        input=input_text,
    )


#: How much slower than this machine the tests run: the VM of tests/test_in_vm.py (TCG, where
#: a Python start takes 12-27 s) sets it, and every wait for an outcome stretches by it.
SLOWDOWN = float(os.environ.get("PYFELIX_TEST_SLOWDOWN") or 1)


def eventually(check: Callable[[], bool], timeout: float = 10.0, every: float = 0.1) -> bool:
    """Whether ``check`` passes within ``timeout`` seconds (times SLOWDOWN; tried every
    ``every`` seconds)."""
    deadline = time.monotonic() + timeout * SLOWDOWN
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every)
    return check()


def _enter_and_call(name: str, function: Callable[..., T], args: tuple[Any, ...]) -> T:
    _netns.setns(name)
    return function(*args)


def in_netns(name: str, function: Callable[..., T], *args: Any) -> T:
    """Call ``function(*args)`` in a fresh process that has joined namespace ``name``, and
    return its result (both must pickle: a module-level function, plain values). Tests of the
    kernel writers are ordinary typed code this way, not Python held in strings; the writers'
    own log lines go to that process's stderr."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(_enter_and_call, name, function, args).result()
