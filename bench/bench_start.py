"""Paired agent starts (root): this code and a baseline tree started alternately on the same
node, each in a fresh namespace, timed from process start to InSync and to the first apply;
the medians and the median of the paired differences (the VM's speed drifts by a fifth within
an hour: a difference between neighbouring starts is what holds).

Run: sudo .venv/bin/python bench/bench_start.py --baseline WORKTREE [--cold] [PAIRS]

The node is bench_driver.py's (10,000 endpoints, 200 local, 1,000 policies, as YAML). Each
side keeps its parse cache in a directory of its own, filled by one unmeasured start (the
baseline's bytecode and attrs cache are written first, as this code's are); with ``--cold``
each side's cache is emptied before each of its starts, as on a node's first start (or the
first after an upgrade).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_driver import NODE, add_interfaces, settle, wait_for, write_manifests
from bytecode import compile_agent, compile_baseline

#: How long the unmeasured first start of each side runs on after its first apply.
FILL_WAIT = 8.0


def start(
    directory: Path, env: dict[str, str], logs: Path, fill: bool = False, cold: bool = False
) -> tuple[float, float]:
    """One start in a fresh namespace: (to InSync, to the first apply) in seconds; with
    ``fill``, left running until it has kept its parse cache; with ``cold``, its parse cache
    emptied first."""
    if cold:
        shutil.rmtree(env["PYFELIX_CACHE_DIR"], ignore_errors=True)
    ns = f"pfb-start-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    agent = None
    try:
        add_interfaces(ns)
        settle()
        log_path = logs / "agent.log"
        with log_path.open("w") as log_file:
            began = time.perf_counter()
            argv = ["run", "--hostname", NODE, "--datastore", str(directory)]
            agent = subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, "-m", "pyfelix", *argv],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env={
                    **os.environ,
                    "FELIX_NFTABLESMODE": "Disabled",
                    # Endpoint status files go to a scratch directory.
                    "FELIX_ENDPOINTSTATUSPATHPREFIX": str(logs / "status"),
                    **env,
                },
            )
            wait_for(log_path, "in sync:", agent)
            in_sync = time.perf_counter() - began
            wait_for(log_path, "apply 1:", agent)
            programmed = time.perf_counter() - began
            if fill:
                # The parse cache's upkeep (its index: 5 s after InSync, in this code).
                time.sleep(FILL_WAIT)
            return in_sync, programmed
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True, help="a worktree to compare")
    parser.add_argument("--cold", action="store_true", help="every start with an empty cache")
    parser.add_argument("pairs", type=int, nargs="?", default=10)
    args = parser.parse_args()
    compile_agent()
    path = compile_baseline(args.baseline.resolve())
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        directory = root / "manifests"
        directory.mkdir()
        write_manifests(directory, 10_000, 1_000)
        sides = {
            "base": {"PYTHONPATH": path, "PYFELIX_CACHE_DIR": str(root / "cache-base")},
            "this": {"PYFELIX_CACHE_DIR": str(root / "cache-this")},
        }
        for env in sides.values():
            if not args.cold:
                start(directory, env, root, fill=True)  # its parse cache, and the index
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for n in range(args.pairs):
            order = list(sides) if n % 2 == 0 else list(reversed(sides))
            for name in order:
                found[name].append(start(directory, sides[name], root, cold=args.cold))
    for k, what in ((0, "to InSync"), (1, "to the first apply")):
        base = [times[k] for times in found["base"]]
        this = [times[k] for times in found["this"]]
        paired = [(b - a) * 1000 for a, b in zip(base, this, strict=True)]
        print(
            f"{what}: base median {statistics.median(base):.3f} s, this "
            f"{statistics.median(this):.3f} s; paired difference median "
            f"{statistics.median(paired):+.0f} ms, mean {statistics.mean(paired):+.0f} ms"
        )


if __name__ == "__main__":
    main()
