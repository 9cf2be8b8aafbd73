"""Datastore benchmark: time to IN_SYNC and peak RSS for N workload endpoints and M policies,
loaded by the file syncer from a manifest directory and by the etcd syncer from a real etcd.

Run: .venv/bin/python bench/bench_datastores.py [--endpoints 100000] [--policies 1000] [--agent]
     sudo .venv/bin/python bench/bench_datastores.py --baseline WORKTREE [--pairs N]

With ``--agent`` (root), ``pyfelix run`` itself is timed on node-0 of the same cluster in
etcd, from process start to its first apply (the dataplane in sync) in a network namespace.
With ``--baseline`` only that is timed, N times for this code and for the worktree's,
alternately (the VM's speed drifts: paired differences are what hold).

Each scenario runs in its own process so peak RSS is that scenario's alone. etcd is Debian's
etcd-server on a free 127.0.0.1 port; the resources are written to it with batched
transactions (128 puts each) before timing starts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
import yaml

from bytecode import compile_agent, compile_baseline

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyfelix.datastore.etcd import EtcdClient, EtcdConfig
from pyfelix.datastore.layout import encode, resource_key
from pyfelix.resources import KINDS
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.etcd import EtcdSyncer
from pyfelix.syncer.files import FileSyncer
from tests.etcd_server import EtcdServer, running_etcd

PER_FILE = 1000
#: Seconds between filling etcd (and syncing its files) and starting the agent.
SETTLE = 2.0


def workload(i: int) -> dict[str, Any]:
    node = f"node-{i % 100}"
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {
            "name": f"{node.replace('-', '--')}-k8s-pod--{i}-eth0",
            "namespace": f"ns-{i % 50}",
            "labels": {"app": f"app-{i % 200}", "tier": ("web", "db", "cache")[i % 3]},
        },
        "spec": {
            "orchestrator": "k8s",
            "node": node,
            "pod": f"pod-{i}",
            "endpoint": "eth0",
            "interfaceName": f"cali{i:011x}",
            "ipNetworks": [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}/32"],
            "profiles": [f"kns.ns-{i % 50}"],
        },
    }


def policy(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"policy-{i}", "namespace": f"ns-{i % 50}"},
        "spec": {
            "order": i,
            "selector": f'app == "app-{i % 200}"',
            "ingress": [
                {
                    "action": "Allow",
                    "protocol": "TCP",
                    "source": {"selector": f'tier == "{("web", "db")[i % 2]}"'},
                    "destination": {"ports": [80, 443, "8000:8100"]},
                }
            ],
            "egress": [{"action": "Allow"}],
        },
    }


def documents(endpoints: int, policies: int) -> list[dict[str, Any]]:
    return [workload(i) for i in range(endpoints)] + [policy(i) for i in range(policies)]


class Counter:
    def __init__(self) -> None:
        self.updates = 0
        self.in_sync = trio.Event()

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.updates += len(updates)

    def on_status(self, status: SyncStatus) -> None:
        if status is SyncStatus.IN_SYNC:
            self.in_sync.set()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def time_files(directory: Path) -> tuple[float, int]:
    counter = Counter()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(FileSyncer(directory, counter).run)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed, counter.updates


async def time_etcd(url: str) -> tuple[float, int]:
    counter = Counter()
    async with EtcdClient(EtcdConfig.from_url(url)) as client:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            await nursery.start(EtcdSyncer(client, counter).run)
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
    return elapsed, counter.updates


async def fill_etcd(url: str, docs: list[dict[str, Any]]) -> None:
    async with EtcdClient(EtcdConfig.from_url(url)) as client:
        items = []
        for doc in docs:
            res = KINDS[doc["kind"]].from_manifest(doc)
            items.append((resource_key(res), encode(res)))
        await client.put_many(items)


def agent_from_etcd(
    endpoints: int, policies: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``pyfelix run`` (root) on node-0 of the same cluster in etcd: process start to the
    driver's first apply (the dataplane in sync), and the agent's peak RSS at that moment.
    etcd runs inside the agent's network namespace, filled from a child there."""
    namespace = f"pfb-agent-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True)
    data = tempfile.mkdtemp(prefix="pfb-etcd-")
    etcd = EtcdServer(data, netns=namespace)
    agent = None
    try:
        etcd.start()
        fill = [sys.executable, __file__, "--fill", etcd.etcd_url]
        fill += ["--endpoints", str(endpoints), "--policies", str(policies)]
        subprocess.run(["ip", "netns", "exec", namespace, *fill], check=True)
        # etcd's writes on disk before the agent starts, as on a node whose etcd has been up.
        subprocess.run(["sync"], check=True)
        time.sleep(SETTLE)
        with tempfile.NamedTemporaryFile("w+", prefix="pfb-agent-", suffix=".log") as log:
            started = time.perf_counter()
            run = ["run", "--hostname", "node-0", "--datastore", etcd.etcd_url]
            agent = subprocess.Popen(
                ["ip", "netns", "exec", namespace, sys.executable, "-m", "pyfelix", *run],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={
                    **os.environ,
                    # Endpoint status files go to a scratch directory.
                    "FELIX_ENDPOINTSTATUSPATHPREFIX": tempfile.mkdtemp(prefix="pyfelix-bench-"),
                    **(env or {}),
                },
            )
            while "apply 1:" not in Path(log.name).read_text():
                if agent.poll() is not None:
                    raise SystemExit("the agent stopped:\n" + Path(log.name).read_text())
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            status = Path(f"/proc/{agent.pid}/status").read_text()
            peak = next(
                int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
            )
            lines = Path(log.name).read_text().splitlines()
            in_sync = next(line for line in lines if "in sync:" in line)
            first_apply = next(line for line in lines if "apply 1:" in line)
        return {
            "seconds": elapsed,
            "peak_rss_mb": peak / 1024,
            "in_sync": in_sync,
            "first_apply": first_apply.split("apply 1: ", 1)[-1],
        }
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        etcd.stop()
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", namespace], check=False)


def child(mode: str, target: str) -> None:
    """Runs in a fresh process: one timed sync, then a JSON line with the result."""
    # The agent's calc loop pauses the cyclic collector from its start until InSync, and the
    # syncer's snapshot is read in that time: measured the same way here.
    gc.disable()
    runner = time_files(Path(target)) if mode == "files" else time_etcd(target)
    elapsed, updates = trio.run(lambda: runner)
    print(json.dumps({"seconds": elapsed, "updates": updates, "peak_rss_mb": peak_rss_mb()}))


def measure(mode: str, target: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, target],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", type=int, default=100_000)
    parser.add_argument("--policies", type=int, default=1_000)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "TARGET"))
    parser.add_argument("--fill", metavar="ETCD_URL", help=argparse.SUPPRESS)
    parser.add_argument("--agent", action="store_true", help="also time `pyfelix run` (root)")
    parser.add_argument("--baseline", type=Path, help="time `pyfelix run` against a worktree's")
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.fill:
        trio.run(fill_etcd, args.fill, documents(args.endpoints, args.policies))
        return
    print(f"{args.endpoints} workload endpoints, {args.policies} policies")
    compile_agent()
    if args.baseline:
        paired_agents(args.endpoints, args.policies, args.baseline.resolve(), args.pairs)
        return
    docs = documents(args.endpoints, args.policies)
    with tempfile.TemporaryDirectory(prefix="pfb-") as directory:
        for start in range(0, len(docs), PER_FILE):
            path = Path(directory) / f"m{start // PER_FILE:05}.yaml"
            path.write_text(yaml.safe_dump_all(docs[start : start + PER_FILE]))
        result = measure("files", directory)
        print(
            f"files: {result['seconds']:.1f} s to IN_SYNC, {result['updates']:.0f} updates, "
            f"peak RSS {result['peak_rss_mb']:.0f} MB"
        )
    with running_etcd() as etcd:
        trio.run(fill_etcd, etcd.etcd_url, docs)
        result = measure("etcd", etcd.etcd_url)
        print(
            f"etcd:  {result['seconds']:.1f} s to IN_SYNC, {result['updates']:.0f} updates, "
            f"peak RSS {result['peak_rss_mb']:.0f} MB"
        )
    if args.agent:
        result = agent_from_etcd(args.endpoints, args.policies)
        print(
            f"agent: {result['seconds']:.1f} s from process start to the dataplane in sync "
            f"(node-0, real kernel in a namespace), peak RSS {result['peak_rss_mb']:.0f} MB"
        )
        print(f"       {str(result['in_sync']).split(': ', 1)[-1]}")
        print(f"       first apply: {result['first_apply']}")


def paired_agents(endpoints: int, policies: int, baseline: Path, pairs: int) -> None:
    """``agent_from_etcd`` for the baseline's code and this one, alternately."""
    path = compile_baseline(baseline)
    sides: dict[str, dict[str, str]] = {"base": {"PYTHONPATH": path}, "this": {}}
    found: dict[str, list[float]] = {name: [] for name in sides}
    for n in range(pairs):
        for name in list(sides) if n % 2 == 0 else list(reversed(sides)):
            result = agent_from_etcd(endpoints, policies, sides[name])
            found[name].append(result["seconds"])
            print(f"{name}: {result['seconds']:.2f} s; first apply: {result['first_apply']}")
    base, this = found["base"], found["this"]
    paired = [b - a for a, b in zip(base, this, strict=True)]
    print(
        f"to the dataplane in sync: base median {statistics.median(base):.2f} s, this "
        f"{statistics.median(this):.2f} s; paired difference median "
        f"{statistics.median(paired):+.2f} s (each: {', '.join(f'{d:+.2f}' for d in paired)})"
    )


if __name__ == "__main__":
    main()
