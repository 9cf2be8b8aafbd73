"""Linux driver benchmark (root): start to programmed kernel, against the floor of loading the
same final scripts directly; then the latency from a label change in the file datastore to the
kernel, p50 and p99 over 200 changes, back to back and 100 ms apart.

Run: sudo .venv/bin/python bench/bench_driver.py [ENDPOINTS POLICIES CHANGES ROUNDS [ipv4]]

With ``ipv4`` the cluster is IPv4-only as calico.yaml deploys one (FelixConfiguration
ipv6Support: false), so the agent and the floor leave IPv6 alone; by default, as Felix's own
default, both IPv4 and IPv6 tables are written.

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


def write_manifests(directory: Path, endpoints: int, policies: int, ipv6: bool = True) -> None:
    docs = [gnp(i) for i in range(policies)] + [wep(i) for i in range(1, endpoints)]
    if not ipv6:
        config = {"name": "default"}
        spec = {"ipv6Support": False}
        kind = {"apiVersion": "projectcalico.org/v3", "kind": "FelixConfiguration"}
        docs.insert(0, {**kind, "metadata": config, "spec": spec})
    for start in range(0, len(docs), 1000):
        (directory / f"m{start // 1000:04}.yaml").write_text(
            yaml.safe_dump_all(docs[start : start + 1000])
        )
    (directory / "probe.yaml").write_text(yaml.safe_dump(wep(0)))


def programmed(ns: str, versions: tuple[str, ...] = ("iptables", "ip6tables")) -> bool:
    """Independently of the agent's word: every local route and endpoint chain is in place."""
    routes = ns_exec(ns, "ip", "route", "show", "proto", "boot").count("\n")
    return routes >= LOCAL and all(
        ns_exec(ns, f"{tool}-nft-save", "-t", "filter").count(":cali-tw-") >= LOCAL
        for tool in versions
    )


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


def settle(busy: float = 0.1, window: float = 0.25, limit: float = 10.0) -> None:
    """Wait for an idle machine. The kernel tears a deleted namespace down in the background
    (veths, tables, sets); that work would be billed to whichever measurement comes next."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        idle, total = _cpu_times()
        time.sleep(window)
        idle_after, total_after = _cpu_times()
        if idle_after - idle >= (1 - busy) * max(total_after - total, 1):
            return


def load_floor(ns: str, view: dict[str, Any], noflush: bool = False) -> float:
    """The floor: every final script the driver writes (ipsets, then each table of IPv4 and
    IPv6), loaded directly into a fresh namespace, one tool run after another. With
    ``noflush``, as an agent must load them (without it, a restore empties the whole table,
    other software's rules included)."""
    flags = ["--noflush"] if noflush else []
    start = time.perf_counter()
    ns_exec(ns, "ipset", "restore", stdin=view["ipset_restore"])
    for version, tool in (("ipv4", "iptables-nft-restore"), ("ipv6", "ip6tables-nft-restore")):
        for text in view["iptables"].get(version, {}).values():
            ns_exec(ns, tool, *flags, stdin=text)
    return time.perf_counter() - start


def add_interfaces(ns: str) -> None:
    batch = "".join(
        f"link add cali{i:011x} type veth peer name pod{i}\n"
        f"link set cali{i:011x} up\nlink set pod{i} up\n"
        for i in range(LOCAL)
    )
    ns_exec(ns, "ip", "-batch", "-", stdin=batch)


def wait_for(log_path: Path, text: str, agent: subprocess.Popen[bytes]) -> str:
    """Poll the agent's log (cheap: no kernel dumps competing with the agent for the CPU);
    stop the benchmark, showing the log's end, if the agent exits first."""
    while True:
        lines = log_path.read_text().splitlines()
        for line in lines:
            if text in line:
                return line
        if agent.poll() is not None:
            tail = "\n".join(lines[-20:])
            raise SystemExit(f"the agent exited ({agent.returncode}) before {text!r}:\n{tail}")
        time.sleep(0.005)


def start_agent(ns: str, directory: Path, log_file: Any) -> subprocess.Popen[bytes]:
    argv = ["run", "--hostname", NODE, "--datastore", str(directory)]
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "pyfelix", *argv],
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )


#: Between two changes of the "spaced" series: each change is then alone in the pipeline.
SPACING = 0.1


def measure_changes(ns: str, directory: Path, changes: int, spacing: float) -> None:
    """Each change is written once the previous one is in the kernel: back to back (a steady
    stream, which the apply throttle meets) or ``spacing`` seconds apart (a change alone)."""
    clients = ipset_name(IPSetData(selector='role == "client"').id)
    latencies = []
    for n in range(changes):
        role = "client" if n % 2 == 0 else ""
        time.sleep(spacing)
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
    series = f"{spacing * 1000:.0f} ms apart" if spacing else "back to back"
    print(
        f"label change to kernel over {changes} changes {series}: p50 {p50 * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms"
    )


def main() -> None:
    endpoints = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    policies = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    changes = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    ipv6 = not (len(sys.argv) > 5 and sys.argv[5] == "ipv4")
    stack_kind = "IPv4 and IPv6" if ipv6 else "IPv4 only"
    print(
        f"{endpoints} endpoints ({LOCAL} local), {policies} policies, {stack_kind}, {rounds} rounds"
    )
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        write_manifests(directory, endpoints, policies, ipv6)
        view, _ = compute([i.resource for i in load_paths([directory]).resources], NODE)
        floors: list[float] = []
        noflush_floors: list[float] = []
        drivers: list[float] = []
        totals: list[float] = []
        for n in range(rounds):
            last = n == rounds - 1
            ns, floor_ns = f"pfb-driver-{os.getpid()}-{n}", f"pfb-floor-{os.getpid()}-{n}"
            agent = None
            try:
                for noflush, results in ((False, floors), (True, noflush_floors)):
                    subprocess.run(["ip", "netns", "add", floor_ns], check=True)
                    settle()
                    results.append(load_floor(floor_ns, view, noflush))
                    subprocess.run(["ip", "netns", "del", floor_ns], check=True)
                subprocess.run(["ip", "netns", "add", ns], check=True)
                add_interfaces(ns)
                log_path = directory / f"agent-{n}.log"
                log_file = stack.enter_context(log_path.open("w"))
                settle()
                start = time.perf_counter()
                agent = start_agent(ns, directory, log_file)
                # The driver logs when the complete snapshot (InSync) reaches it, and each
                # apply when it has finished writing.
                wait_for(log_path, "in sync:", agent)
                in_sync = time.perf_counter() - start
                first_apply = wait_for(log_path, "apply 1:", agent)
                total = time.perf_counter() - start
                if not programmed(ns, ("iptables", "ip6tables") if ipv6 else ("iptables",)):
                    raise SystemExit("the agent reported its first apply, the kernel disagrees")
                totals.append(total)
                drivers.append(total - in_sync)
                print(
                    f"round {n + 1}: floor {floors[-1]:.2f} s (--noflush "
                    f"{noflush_floors[-1]:.2f} s); agent process start to "
                    f"programmed {total:.2f} s, of which InSync to programmed "
                    f"{drivers[-1]:.2f} s ({drivers[-1] / floors[-1]:.2f}x the floor)"
                )
                print("  first apply, as the driver timed it:", first_apply.split("apply 1: ")[1])
                if last:
                    measure_changes(ns, directory, changes, 0.0)
                    measure_changes(ns, directory, changes, SPACING)
            finally:
                if agent is not None:
                    agent.terminate()
                    agent.wait()
                for name in (ns, floor_ns):
                    subprocess.run(
                        ["ip", "netns", "del", name], check=False, stderr=subprocess.DEVNULL
                    )
        floor, noflush_floor, driver, total = map(
            statistics.median, (floors, noflush_floors, drivers, totals)
        )
        print(
            f"medians: floor {floor:.2f} s (--noflush {noflush_floor:.2f} s), "
            f"InSync to programmed {driver:.2f} s "
            f"({driver / floor:.2f}x), process start to programmed {total:.2f} s "
            f"({total / floor:.2f}x)"
        )


if __name__ == "__main__":
    main()
