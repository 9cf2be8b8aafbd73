"""Linux driver benchmark (root): start to programmed kernel, against the floor of loading the
same final scripts directly; then the latency from a label change in the file datastore to the
kernel, p50 and p99 over 200 changes.

Run: sudo .venv/bin/python bench/bench_driver.py [ENDPOINTS POLICIES CHANGES]

Scenario: ENDPOINTS workload endpoints (200 on the node, their veth interfaces present) and
POLICIES global policies selecting by app label and admitting traffic from role=client.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.rules.ipsets import ipset_name

NODE = "bench-node"
LOCAL = 200


def wep(i: int, role: str = "") -> dict[str, Any]:
    local = i < LOCAL
    labels = {"app": f"app-{i % 50}"}
    if role:
        labels["role"] = role
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {"name": f"wep-{i}", "namespace": "bench", "labels": labels},
        "spec": {
            "orchestrator": "k8s",
            "node": NODE if local else f"other-{i % 100}",
            "pod": f"pod-{i}",
            "endpoint": "eth0",
            "interfaceName": f"cali{i:011x}",
            "ipNetworks": [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}/32"],
        },
    }


def gnp(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": f"policy-{i}"},
        "spec": {
            "order": i,
            "selector": f'app == "app-{i % 50}"',
            "ingress": [
                {
                    "action": "Allow",
                    "protocol": "TCP",
                    "source": {"selector": 'role == "client"'},
                    "destination": {"ports": [80, 443]},
                }
            ],
            "egress": [{"action": "Allow"}],
        },
    }


def ns_exec(ns: str, *argv: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True, check=True
    ).stdout


def write_manifests(directory: Path, endpoints: int, policies: int) -> None:
    docs = [gnp(i) for i in range(policies)] + [wep(i) for i in range(1, endpoints)]
    for start in range(0, len(docs), 1000):
        (directory / f"m{start // 1000:04}.yaml").write_text(
            yaml.safe_dump_all(docs[start : start + 1000])
        )
    (directory / "probe.yaml").write_text(yaml.safe_dump(wep(0)))


def programmed(ns: str) -> bool:
    routes = ns_exec(ns, "ip", "route", "show", "proto", "80").count("\n")
    if routes < LOCAL:
        return False
    return ns_exec(ns, "iptables-nft-save", "-t", "filter").count(":cali-tw-") >= LOCAL


def main() -> None:
    endpoints = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    policies = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    changes = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    ns = f"pfb-driver-{os.getpid()}"
    floor_ns = f"pfb-floor-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "netns", "add", floor_ns], check=True)
    agent = None
    try:
        batch = "".join(
            f"link add cali{i:011x} type veth peer name pod{i}\n"
            f"link set cali{i:011x} up\nlink set pod{i} up\n"
            for i in range(LOCAL)
        )
        ns_exec(ns, "ip", "-batch", "-", stdin=batch)
        with ExitStack() as stack:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            write_manifests(directory, endpoints, policies)
            # The floor: the same final scripts, loaded directly.
            view, _ = compute([i.resource for i in load_paths([directory]).resources], NODE)
            start = time.perf_counter()
            ns_exec(floor_ns, "ipset", "restore", stdin=view["ipset_restore"])
            for text in view["iptables"]["ipv4"].values():
                ns_exec(floor_ns, "iptables-nft-restore", stdin=text)
            floor = time.perf_counter() - start

            log_path = directory / "agent.log"
            log_file = stack.enter_context(log_path.open("w"))
            start = time.perf_counter()
            agent = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    sys.executable,
                    "-m",
                    "pyfelix",
                    "run",
                    "--hostname",
                    NODE,
                    "--datastore",
                    str(directory),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )
            # The driver logs when the first complete snapshot (InSync) reaches it.
            while "programming with" not in log_path.read_text():
                time.sleep(0.01)
            in_sync = time.perf_counter() - start
            while not programmed(ns):
                time.sleep(0.01)
            startup = time.perf_counter() - start
            print(f"{endpoints} endpoints ({LOCAL} local), {policies} policies")
            print(
                f"start to programmed: {startup:.2f} s, of which InSync to programmed "
                f"{startup - in_sync:.2f} s; loading the final scripts directly: {floor:.2f} s"
            )
            while "apply 1:" not in log_path.read_text():
                time.sleep(0.01)
            first_apply = next(
                line for line in log_path.read_text().splitlines() if "apply 1:" in line
            )
            print("first apply, as the driver timed it:", first_apply.split("apply 1: ")[1])

            clients = ipset_name(IPSetData(selector='role == "client"').id)
            latencies = []
            for n in range(changes):
                role = "client" if n % 2 == 0 else ""
                started = time.perf_counter()
                (directory / "probe.yaml").write_text(yaml.safe_dump(wep(0, role)))
                while True:
                    present = "10.0.0.0" in ns_exec(ns, "ipset", "list", clients)
                    if present == bool(role):
                        break
                    time.sleep(0.002)
                latencies.append(time.perf_counter() - started)
            latencies.sort()
            p50 = statistics.median(latencies)
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            print(
                f"label change to kernel over {changes} changes: p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms"
            )
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        subprocess.run(["ip", "netns", "del", floor_ns], check=False)


if __name__ == "__main__":
    main()
