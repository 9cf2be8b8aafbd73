"""What crosses a node's underlay: tcpdump on ``ul0`` inside the node's namespace while a block
runs, and the captured packets a filter matches afterwards (tcpdump reads the file)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def captured(ns: str, path: Path, interface: str = "ul0") -> Iterator[None]:
    """tcpdump on ``interface`` of namespace ``ns`` into ``path`` while the block runs."""
    dump = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            "tcpdump",
            "--immediate-mode",
            "-i",
            interface,
            "-nn",
            "-U",
            "-w",
            str(path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert dump.stderr is not None
    assert "listening on" in dump.stderr.readline()
    try:
        yield
    finally:
        dump.terminate()
        dump.wait(timeout=30)


def packets(path: Path, expression: str) -> list[str]:
    """The captured packets matching the tcpdump filter ``expression``."""
    read = subprocess.run(
        ["tcpdump", "-nn", "-r", str(path), expression], capture_output=True, text=True, check=True
    )
    return read.stdout.splitlines()
