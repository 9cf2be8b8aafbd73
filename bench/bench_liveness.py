"""/liveness while the agent reads a large manifest, whole process.

Run: .venv/bin/python bench/bench_liveness.py [--megabytes 42] [--seconds 60]

``pyfelix run --dry-run`` on examples/cluster, its health port on 127.0.0.1; a manifest of
``--megabytes`` of GlobalNetworkSets (20 nets each) and one policy that selects some of them
is moved into the directory, and /liveness is probed every 0.1 s for ``--seconds``. Printed:
the slowest answer, any answer that was not 200, and whether the policy's sets were printed
(the manifest was read and computed, not skipped).
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PORT = 19099
POLICY = """\
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: big-probe}
spec:
  selector: all()
  types: [Egress]
  egress: [{action: Deny, destination: {selector: role == "r1"}}]
"""


def manifest(path: Path, size: int) -> None:
    rng = random.Random(1)
    written = 0
    with path.open("w") as out:
        out.write(POLICY)
        index = 0
        while written < size:
            nets = ", ".join(
                f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0/24" for _ in range(20)
            )
            doc = (
                f"---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n"
                f"  name: big-{index}\n  labels: {{role: r{index % 50}}}\nspec:\n"
                f"  nets: [{nets}]\n"
            )
            written += out.write(doc)
            index += 1


def probe() -> tuple[int | str, float]:
    started = time.monotonic()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
        connection.request("GET", "/liveness")
        response = connection.getresponse()
        response.read()
        status: int | str = response.status
    except OSError as exc:
        status = repr(exc)
    return status, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=42)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp) / "cluster"
        shutil.copytree(ROOT / "examples" / "cluster", directory)
        big = Path(temp) / "big.yaml"
        manifest(big, args.megabytes * 1_000_000)
        env = dict(
            os.environ,
            FELIX_HEALTHENABLED="true",
            FELIX_HEALTHPORT=str(PORT),
            FELIX_LOGSEVERITYSYS="none",
        )
        argv = [str(ROOT / ".venv/bin/pyfelix"), "run", "--dry-run", "--hostname", "node-a"]
        with (Path(temp) / "out.txt").open("w") as out:
            agent = subprocess.Popen(
                [*argv, "--datastore", str(directory)],
                env=env,
                stdout=out,
                stderr=subprocess.DEVNULL,
            )
            try:
                deadline = time.monotonic() + 30
                while probe()[0] != 200 and time.monotonic() < deadline:
                    time.sleep(0.2)
                big.rename(directory / "zz-big.yaml")
                worst, failed = 0.0, []
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    status, took = probe()
                    worst = max(worst, took)
                    if status != 200:
                        failed.append(status)
                    time.sleep(0.1)
            finally:
                agent.terminate()
                agent.wait()
        read = "big-probe" in (Path(temp) / "out.txt").read_text()
        print(f"{args.megabytes} MB manifest: slowest /liveness {worst:.2f} s,")
        print(f"  answers not 200: {len(failed)} {failed[:3]}, manifest computed: {read}")


if __name__ == "__main__":
    main()
