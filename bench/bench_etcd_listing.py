"""One listing of an etcd holding N endpoints and M policies, through etcd's JSON gateway (as
``EtcdClient`` lists) and over gRPC (as the agent's first listing does): wall time, this
process's CPU, and etcd's own CPU (from /proc), each way ROUNDS times, alternately.

Run: .venv/bin/python bench/bench_etcd_listing.py [--endpoints 100000] [--policies 1000]
     [--rounds 3]

Both ways fetch the same pages (``LIST_PAGE`` keys, at the first page's revision) and take
every key and value out of their encoding (base64 in JSON; protobuf), nothing more.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_datastores import documents, fill_etcd
from pyfelix.datastore.etcd import LIST_PAGE, EtcdClient, EtcdConfig
from pyfelix.datastore.etcd_grpc import RangeChannel, parse_range_response
from pyfelix.datastore.layout import WATCH_PREFIX
from tests.etcd_server import EtcdServer, running_etcd

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def through_gateway(etcd: EtcdServer) -> int:
    async def listing() -> int:
        keys = 0
        async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url, {})) as client:
            async for batch, _ in client.list_pages(WATCH_PREFIX, LIST_PAGE):
                keys += len(batch)
        return keys

    return trio.run(listing)


def over_grpc(etcd: EtcdServer) -> int:
    channel = RangeChannel("127.0.0.1", etcd.client_port, tls=None, timeout=10)
    start, end, revision, keys = WATCH_PREFIX.encode(), b"/calico0", 0, 0
    try:
        while True:
            listed_at, more, kvs = parse_range_response(
                channel.range(start, end, LIST_PAGE, revision)
            )
            revision = revision or listed_at
            keys += len(kvs)
            if not more or not kvs:
                return keys
            start = kvs[-1][0] + b"\0"
    finally:
        channel.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", type=int, default=100_000)
    parser.add_argument("--policies", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ways: dict[str, Callable[[EtcdServer], int]] = {
        "gateway": through_gateway,
        "gRPC": over_grpc,
    }
    with running_etcd() as etcd:
        assert etcd.process is not None
        trio.run(fill_etcd, etcd.etcd_url, documents(args.endpoints, args.policies))
        for _ in range(args.rounds):
            for name, way in ways.items():
                etcd_before = cpu_seconds(etcd.process.pid)
                began, mine = time.perf_counter(), time.process_time()
                keys = way(etcd)
                wall, mine = time.perf_counter() - began, time.process_time() - mine
                etcd_cpu = cpu_seconds(etcd.process.pid) - etcd_before
                print(
                    f"{name:8s} {keys} keys: {wall:.2f} s, this process {mine:.2f} s of CPU, "
                    f"etcd {etcd_cpu:.2f} s of CPU"
                )


if __name__ == "__main__":
    main()
