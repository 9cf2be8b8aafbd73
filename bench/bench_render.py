"""Rendering benchmark: the 250k-endpoint / 10k-policy scenario rendered to iptables and ipset
scripts, and those scripts loaded into a fresh network namespace (root needed).

Run: .venv/bin/python bench/bench_render.py [ENDPOINTS POLICIES]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_calc_graph import tag_policies
from pyfelix.calc.pipeline import build_pipeline
from pyfelix.syncer.api import SyncStatus
from pyfelix_dataplane.rules.render import render
from pyfelix_dataplane.state import NodeState


def timed_load(namespace: str, command: list[str], text: str) -> float:
    start = time.perf_counter()
    subprocess.run(["ip", "netns", "exec", namespace, *command], input=text, text=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    endpoints = int(sys.argv[1]) if len(sys.argv) > 1 else 250_000
    policies = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    dataplane = NodeState()
    pipeline = build_pipeline("host-local", dataplane.apply)
    updates = list(tag_policies(endpoints, policies))
    for offset in range(0, len(updates), 100):
        pipeline.on_updates(updates[offset : offset + 100])
    pipeline.on_status(SyncStatus.IN_SYNC)
    pipeline.flush()
    start = time.perf_counter()
    rendered = render(dataplane, versions=(4,))
    render_seconds = time.perf_counter() - start
    tables = rendered.iptables[4]
    rules = sum(text.count("\n-A ") for text in tables.values())
    members = sum(len(s) for _, s in dataplane.ipsets.values())
    print(f"{endpoints} endpoints, {policies} policies (200 local)")
    print(
        f"render: {render_seconds:.2f} s; ipset script {len(rendered.ipset_restore) / 1e6:.1f} MB "
        f"({len(dataplane.ipsets)} sets, {members} members); iptables {rules} rules, "
        f"{sum(len(t) for t in tables.values()) / 1e6:.2f} MB"
    )
    for backend in ("legacy", "nft"):
        namespace = f"pfb-render-{backend}"
        subprocess.run(["ip", "netns", "add", namespace], check=True)
        try:
            ipset = timed_load(namespace, ["ipset", "restore"], rendered.ipset_restore)
            iptables = sum(
                timed_load(namespace, [f"iptables-{backend}-restore"], text)
                for text in tables.values()
            )
        finally:
            subprocess.run(["ip", "netns", "del", namespace], check=True)
        print(f"load ({backend}): ipset restore {ipset:.2f} s, iptables-restore {iptables:.2f} s")


if __name__ == "__main__":
    main()
