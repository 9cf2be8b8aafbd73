"""The kernel's side of a first apply (root): bench_driver.py's node's final IPv4 and IPv6
tables loaded by iptables-nft-restore --noflush into a fresh namespace (its IP sets loaded
first, untimed): each version alone, one after the other, and both at once as the agent
writes them; with each tool's user and system CPU. It says how far writing the versions in
parallel can take the first apply below the floor: as far as the kernel lets the two
transactions overlap.

Run: sudo .venv/bin/python bench/bench_restore.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_driver import NODE, ns_exec, settle, write_manifests
from pyfelix.dryrun import compute
from pyfelix.resources import load_paths

TOOLS = {4: "iptables-nft-restore", 6: "ip6tables-nft-restore"}
NAMESPACE = f"pfb-restore-{os.getpid()}"


def final_scripts() -> tuple[dict[int, str], str]:
    """Each version's tables as one restore script, and the IP sets' script."""
    with tempfile.TemporaryDirectory() as scratch:
        write_manifests(Path(scratch), 10_000, 1_000)
        loaded = load_paths([Path(scratch)])
    view, _ = compute((item.resource for item in loaded.resources), NODE)
    tables = {v: "".join(view["iptables"][f"ipv{v}"].values()) for v in TOOLS}
    return tables, view["ipset_restore"]


def load(
    versions: tuple[int, ...], scripts: dict[int, str]
) -> tuple[float, dict[int, tuple[float, float]]]:
    """Wall time of the tools for ``versions`` run at once, and each one's user and system
    CPU."""
    started = time.perf_counter()
    tools = {}
    for version in versions:
        tool = subprocess.Popen(
            ["ip", "netns", "exec", NAMESPACE, TOOLS[version], "--noflush"],
            stdin=subprocess.PIPE,
        )
        tools[tool.pid] = (version, tool)
    for version, tool in tools.values():
        assert tool.stdin is not None
        tool.stdin.write(scripts[version].encode())
        tool.stdin.close()
    cpu: dict[int, tuple[float, float]] = {}
    while len(cpu) < len(tools):
        pid, status, usage = os.wait4(-1, 0)
        if pid in tools:
            version, tool = tools[pid]
            tool.returncode = os.waitstatus_to_exitcode(status)
            if tool.returncode != 0:
                raise SystemExit(f"{TOOLS[version]} failed ({tool.returncode})")
            cpu[version] = (usage.ru_utime, usage.ru_stime)
    return time.perf_counter() - started, cpu


def remove_namespace() -> None:
    subprocess.run(["ip", "netns", "del", NAMESPACE], check=False, stderr=subprocess.DEVNULL)


def fresh(ipsets: str) -> None:
    """A new namespace holding the node's IP sets, once the old one's teardown is over."""
    remove_namespace()
    settle()
    subprocess.run(["ip", "netns", "add", NAMESPACE], check=True)
    ns_exec(NAMESPACE, "ipset", "restore", stdin=ipsets)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    scripts, ipsets = final_scripts()
    found: dict[str, list[float]] = {"IPv4": [], "IPv6": [], "serial": [], "parallel": []}
    cpu: dict[str, list[tuple[float, float]]] = {"IPv4": [], "IPv6": []}
    try:
        for _ in range(rounds):
            for version in TOOLS:
                fresh(ipsets)
                wall, used = load((version,), scripts)
                found[f"IPv{version}"].append(wall)
                cpu[f"IPv{version}"].append(used[version])
            fresh(ipsets)
            found["serial"].append(sum(load((v,), scripts)[0] for v in TOOLS))
            fresh(ipsets)
            found["parallel"].append(load(tuple(TOOLS), scripts)[0])
    finally:
        remove_namespace()
    median = {name: statistics.median(times) for name, times in found.items()}
    for name in ("IPv4", "IPv6"):
        user = statistics.median(u for u, _ in cpu[name])
        system = statistics.median(s for _, s in cpu[name])
        print(
            f"{name} alone: {median[name]:.3f} s; the tool's CPU: user {user:.3f} s, "
            f"system {system:.3f} s"
        )
    print(
        f"one after the other: {median['serial']:.3f} s; both at once: "
        f"{median['parallel']:.3f} s ({median['parallel'] / median['serial']:.2f}x), "
        f"medians of {rounds} rounds"
    )


if __name__ == "__main__":
    main()
