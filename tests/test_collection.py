"""The moment the agent's start is over: its long-lived heap is frozen out of the collector's
reach, and what the start let go is handed back to the kernel (resident memory falls)."""

from __future__ import annotations

import subprocess
import sys

#: A process that fills its heap with 100 MB of 4 KB strings, keeps the last (so the freed
#: heap below it cannot shrink by itself), lets the rest go, and prints its resident memory in
#: kB before and after the agent's end-of-start step.
SCRIPT = """
from pyfelix import collection

def resident():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

chunks = [bytes([i % 256]) * 4000 for i in range(25_000)]
last = chunks[-1]
del chunks
before = resident()
collection.keep_heap_as_long_lived()
print(before, resident())
"""


def test_the_heap_a_start_let_go_is_handed_back() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True
    )
    before, after = map(int, done.stdout.split())
    assert before - after > 60_000, (before, after)
