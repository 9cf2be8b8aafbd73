"""The agent's first read of a manifest directory, stage by stage, in one process: reading the
files (from the parse cache, as a restart finds them), the file syncer's bookkeeping and
updates, the validation filter and calculation graph, their flush at InSync; best of ROUNDS.

Run: .venv/bin/python bench/bench_first_read.py [ROUNDS]

The node is bench_driver.py's (10,000 endpoints, 200 local, 1,000 policies, as YAML). The
stages are the functions the agent calls, called here one after the other without Trio's
loop between them and with the collector off, as the agent runs them until InSync.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from bench_driver import NODE, write_manifests
from bytecode import compile_agent
from pyfelix import cli
from pyfelix.calc.pipeline import build_pipeline
from pyfelix.messages import ToDataplane
from pyfelix.resources.parse_cache import ParseCache
from pyfelix.syncer import files
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.validation import ValidationContext


class Recorder:
    """The syncer's callbacks: its batches of updates, kept."""

    def __init__(self) -> None:
        self.batches: list[tuple[Update, ...]] = []

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.batches.append(tuple(updates))

    def on_status(self, status: SyncStatus) -> None:
        pass


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def one_round(directory: Path, paths: list[Path]) -> dict[str, float]:
    found: dict[str, float] = {}
    cache = ParseCache.for_datastore(directory, cli.FIRST_READ)
    reads: list[files._Read] = []
    found["read (cached)"] = timed(lambda: reads.extend(files._read_all(paths, cache=cache)))
    recorder = Recorder()
    syncer = files.FileSyncer(directory, recorder)
    real = files._read_all
    files._read_all = lambda *_: reads
    try:
        found["syncer updates"] = timed(lambda: trio.run(syncer._refresh, paths))
    finally:
        files._read_all = real
    out: list[ToDataplane] = []
    pipeline = build_pipeline(NODE, out.append, ValidationContext())

    def compute() -> None:
        for batch in recorder.batches:
            pipeline.on_updates(batch)

    def in_sync() -> None:
        pipeline.on_status(SyncStatus.IN_SYNC)
        pipeline.flush()

    found["validation and graph"] = timed(compute)
    found["flush at InSync"] = timed(in_sync)
    return found


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    compile_agent()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        os.environ["PYFELIX_CACHE_DIR"] = str(root / "cache")
        directory = root / "manifests"
        directory.mkdir()
        write_manifests(directory, 10_000, 1_000)
        paths = sorted(directory.iterdir())
        files._read_all(paths, cache=ParseCache.for_datastore(directory, cli.FIRST_READ))
        gc.disable()
        results = [one_round(directory, paths) for _ in range(rounds)]
    for stage in results[0]:
        best = min(found[stage] for found in results)
        print(f"{stage}: {best * 1000:.1f} ms (best of {rounds})")


if __name__ == "__main__":
    main()
