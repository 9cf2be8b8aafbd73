"""The agent's imports: what `pyfelix run` imports before it reads its datastore, timed in fresh
processes, with attrs' generated methods from their cache (``pyfelix.attrs_cache``) and without
it (the file moved aside), alternating; best and median of each.

Run: .venv/bin/python bench/bench_imports.py [PROCESSES]
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from bytecode import compile_agent
from pyfelix.attrs_cache import cache_path

RUN_PATH = "import pyfelix.cli, pyfelix.agent, pyfelix_dataplane.linux.driver"
TIMED = f"import time; t = time.perf_counter(); {RUN_PATH}; print(time.perf_counter() - t)"


def imports() -> float:
    # Without writing anything: a run without the cache must not leave one behind.
    argv = [sys.executable, "-B", "-c", TIMED]
    return float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    processes = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    compile_agent()
    cache = cache_path()
    aside = cache.with_suffix(".aside")
    found: dict[str, list[float]] = {"cached": [], "compiled": []}
    for _ in range(processes):
        found["cached"].append(imports())
        cache.rename(aside)
        try:
            found["compiled"].append(imports())
        finally:
            aside.rename(cache)
    for name, times in found.items():
        print(
            f"attrs' methods {name}: best {min(times):.3f} s, median "
            f"{statistics.median(times):.3f} s over {processes} processes"
        )


if __name__ == "__main__":
    main()
