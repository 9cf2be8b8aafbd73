"""The Kubernetes API datastore against the same objects from files, whole processes.

Run: .venv/bin/python bench/bench_kdd.py [--pods 10000] [--policies 1000] [--pairs 3]
     .venv/bin/python bench/bench_kdd.py --serve [--pods 20000] [--pods-per-namespace 1]
     .venv/bin/python bench/bench_kdd.py --latency [--rate 100] [--creates 500]

A real kube-apiserver (tests/kube_server.py) is filled with a cluster shaped as a live one
is: 100 annotated v1 Nodes, namespaces of 100 pods each (``--pods-per-namespace``), each
with its ``default`` service account, pods as Calico's CNI leaves them
(the podIP annotations as CIDRs, 1-5 labels, a service account), Kubernetes NetworkPolicies
of a few selector forms. The same objects are written as a ``kubectl get -o yaml`` List.

- Default: ``pyfelix dry-run --format json`` for node-0 from ``kubernetes://`` and from the
  dump, alternately (pairs: this machine is noisy), each run's wall time and peak RSS from
  wait4. The target is the API at most 2x the files.
- ``--latency``: ``pyfelix run --dry-run`` on node-0 from the API; pods for node-0 are
  created at ``--rate`` a second, and each one's time from its create request to the
  agent's printing of its endpoint is taken; p50, p99 and the maximum are printed.
- ``--serve``: fill the API server, print its ``kubernetes://`` source and keep it up until
  interrupted or sent SIGTERM, for paired whole-process runs of two trees against the same cluster
  (``farm-bench --vs``).
- ``--latency --linux`` (root): the agent programs the kernel, in a network namespace of its
  own that reaches the API server through the e2e tests' forwarder pair; a pod counts as
  programmed when ``nft monitor`` in that namespace shows its cali-tw chain created.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyfelix.resources.k8s_conversion import veth_name
from tests.e2e.kube import KubeDatastore
from tests.kube_server import KubeServer, kube_server

NODES = 100
PODS_PER_NAMESPACE = 100
LABELS = ("app", "tier", "team", "version", "track")


def node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {"kubernetes.io/hostname": f"node-{i}", "kubernetes.io/os": "linux"},
            "annotations": {
                "projectcalico.org/IPv4Address": f"192.168.{i // 250}.{i % 250 + 1}/16",
                "projectcalico.org/IPv4VXLANTunnelAddr": f"10.{100 + i // 250}.{i % 250}.0",
            },
        },
    }


def pod(i: int, per_namespace: int = PODS_PER_NAMESPACE) -> dict[str, Any]:
    namespace = f"ns-{i // per_namespace}"
    address = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
    labels = {LABELS[k]: f"v{(i >> k) % 7}" for k in range(1 + i % len(LABELS))}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pod-{i}",
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                "cni.projectcalico.org/containerID": f"{i:064x}",
                "cni.projectcalico.org/podIP": f"{address}/32",
                "cni.projectcalico.org/podIPs": f"{address}/32",
            },
        },
        "spec": {
            "nodeName": f"node-{i % NODES}",
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "app",
                    "image": "agnhost",
                    "ports": [{"name": "http", "containerPort": 8080}],
                }
            ],
        },
    }


def network_policy(i: int, namespaces: int) -> dict[str, Any]:
    namespace = f"ns-{i % namespaces}"
    forms = (
        {"podSelector": {"matchLabels": {"app": f"v{i % 7}"}}},
        {
            "podSelector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["v1", "v2"]}]
            }
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        {"podSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}},
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"np-{i}", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": {"app": f"v{(i + 1) % 7}"}},
            "ingress": [{"from": [forms[i % len(forms)]], "ports": [{"port": 8080}]}],
            "policyTypes": ["Ingress"],
        },
    }


def objects(
    pods: int, policies: int, per_namespace: int = PODS_PER_NAMESPACE
) -> list[dict[str, Any]]:
    """The cluster's objects: each namespace with the ``default`` service account the
    controller manager gives it (the test API server runs none), and its pods."""
    namespaces = max(1, -(-pods // per_namespace))
    docs: list[dict[str, Any]] = [node(i) for i in range(NODES)]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": f"ns-{n}", "labels": {"kubernetes.io/metadata.name": f"ns-{n}"}},
        }
        for n in range(namespaces)
    ]
    docs += [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": f"ns-{n}"},
        }
        for n in range(namespaces)
    ]
    docs += [pod(i, per_namespace) for i in range(pods)]
    docs += [network_policy(i, namespaces) for i in range(policies)]
    return docs


def fill(server: KubeServer, docs: list[dict[str, Any]]) -> None:
    """Namespaces and nodes first, then the rest, by eight writers."""
    first = [d for d in docs if d["kind"] in ("Namespace", "Node")]
    rest = [d for d in docs if d["kind"] not in ("Namespace", "Node")]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(server.apply, first))
        list(pool.map(server.apply, rest))


def timed(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (MB) of one whole process."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    assert os.waitstatus_to_exitcode(status) == 0, command
    return wall, usage.ru_maxrss // 1024


def compare(server: KubeServer, dump: Path, pairs: int) -> None:
    base = [sys.executable, "-m", "pyfelix", "dry-run", "--hostname", "node-0", "--format", "json"]
    api = [*base, f"kubernetes://{server.kubeconfig()}"]
    files = [*base, str(dump)]
    timed(api)  # warm-up
    timed(files)
    ratios, rows = [], []
    for _ in range(pairs):
        a, b = timed(api), timed(files)
        rows.append((a, b))
        ratios.append(a[0] / b[0])
    for (a_wall, a_rss), (b_wall, b_rss) in rows:
        print(f"api {a_wall:6.2f} s {a_rss:5d} MB   files {b_wall:6.2f} s {b_rss:5d} MB")
    low, mid, high = min(ratios), statistics.median(ratios), max(ratios)
    print(f"api/files wall: median {mid:.2f} (min {low:.2f}, max {high:.2f})")


def _printed(server: KubeServer, seen: dict[str, float], in_sync: threading.Event) -> Any:
    """``pyfelix run --dry-run``: a pod is programmed when its endpoint is printed."""
    argv = [sys.executable, "-m", "pyfelix", "run", "--dry-run", "--hostname", "node-0"]
    agent = subprocess.Popen(
        [*argv, "--datastore", f"kubernetes://{server.kubeconfig()}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def read() -> None:
        assert agent.stdout is not None
        for line in agent.stdout:
            if line.startswith("InSync"):
                in_sync.set()
            if line.startswith("WorkloadEndpointUpdate") and "%2flate-" in line:
                name = line.split("%2f", 1)[1].split("/", 1)[0]
                seen.setdefault(name, time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    return agent


def _programmed(
    server: KubeServer,
    seen: dict[str, float],
    in_sync: threading.Event,
    stack: ExitStack,
    agent_log: Path | None,
) -> Any:
    """``pyfelix run`` in a namespace of its own: a pod is programmed when its cali-tw chain
    is created in the kernel (``nft monitor``); in sync once cali-FORWARD is."""
    netns = f"pfbench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    stack.callback(subprocess.run, ["ip", "netns", "delete", netns], check=False)
    subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
    datastore = KubeDatastore(server).datastore(stack, netns)
    chains = {veth_name("ns-0", f"late-{i}"): f"late-{i}" for i in range(100_000)}
    monitor = subprocess.Popen(
        ["ip", "netns", "exec", netns, "nft", "monitor", "rules"],
        stdout=subprocess.PIPE,
        text=True,
    )
    stack.callback(monitor.kill)

    def read() -> None:
        assert monitor.stdout is not None
        for line in monitor.stdout:
            if " cali-FORWARD " in line:
                in_sync.set()
            if "cali-tw-" in line:
                interface = line.split("cali-tw-", 1)[1].split()[0]
                if interface in chains:
                    seen.setdefault(chains[interface], time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    env = dict(os.environ, FELIX_LOGFILEPATH="none", FELIX_LOGSEVERITYSYS="none")
    # Its endpoint status files go with the namespace's, not to this machine's /var/run/calico.
    env["FELIX_ENDPOINTSTATUSPATHPREFIX"] = stack.enter_context(tempfile.TemporaryDirectory())
    if agent_log is not None:
        env["FELIX_LOGSEVERITYSCREEN"] = "Debug"
    argv = [sys.executable, "-m", "pyfelix", "run", "--hostname", "node-0"]
    return subprocess.Popen(
        ["ip", "netns", "exec", netns, *argv, "--datastore", datastore],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL
        if agent_log is None
        else stack.enter_context(agent_log.open("w")),
        env=env,
    )


def latency(
    server: KubeServer, rate: float, creates: int, linux: bool, agent_log: Path | None = None
) -> None:
    seen: dict[str, float] = {}
    in_sync = threading.Event()
    with ExitStack() as stack:
        if linux:
            agent = _programmed(server, seen, in_sync, stack, agent_log)
        else:
            agent = _printed(server, seen, in_sync)
        assert in_sync.wait(120)
        _create(server, rate, creates, seen)
        agent.terminate()
        agent.wait(30)


def _create(server: KubeServer, rate: float, creates: int, seen: dict[str, float]) -> None:
    sent: dict[str, float] = {}
    futures = []
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        start = time.monotonic()
        for i in range(creates):
            doc = pod(10_000_000 + i * NODES)
            doc["metadata"]["name"] = f"late-{i}"
            doc["metadata"]["namespace"] = "ns-0"
            due = start + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            sent[f"late-{i}"] = time.monotonic()
            futures.append(pool.submit(server.apply, doc))
        for future in futures:
            future.result()  # a create that failed is the benchmark's failure
    deadline = time.monotonic() + 60
    while len(seen) < creates and time.monotonic() < deadline:
        time.sleep(0.1)
    delays = sorted(seen[n] - sent[n] for n in sent if n in seen)

    def p(q: float) -> float:
        return delays[min(len(delays) - 1, int(q * len(delays)))] * 1000

    print(
        f"{len(delays)}/{creates} pods programmed at {rate:g}/s: p50 {p(0.5):.0f} ms,"
        f" p99 {p(0.99):.0f} ms, max {delays[-1] * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--policies", type=int, default=1_000)
    parser.add_argument(
        "--pods-per-namespace",
        type=int,
        default=PODS_PER_NAMESPACE,
        help="1 for a cluster of tenants (a namespace and service account for each pod)",
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--linux", action="store_true")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--creates", type=int, default=500)
    parser.add_argument(
        "--agent-log", type=Path, help="with --linux: the agent's debug log, to see its applies"
    )
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as directory,
        kube_server(Path(directory) / "kube") as server,
    ):
        docs = objects(args.pods, args.policies, args.pods_per_namespace)
        started = time.monotonic()
        fill(server, docs)
        print(f"{len(docs)} objects created in {time.monotonic() - started:.1f} s")
        if args.latency:
            latency(server, args.rate, args.creates, args.linux, args.agent_log)
            return
        if args.serve:
            # Started in the background, SIGINT is ignored: SIGTERM (or ^C in a terminal)
            # leaves through the context managers, which stop the API server and etcd.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            signal.signal(signal.SIGINT, signal.default_int_handler)
            print(f"serving: kubernetes://{server.kubeconfig()}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
            return
        dump = Path(directory) / "dump.yaml"
        dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": docs}))
        compare(server, dump, args.pairs)


if __name__ == "__main__":
    main()
