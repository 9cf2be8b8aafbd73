"""Linux driver benchmark (root): start to programmed kernel, against the floor of loading the
same final scripts directly; then the latency from a label change in the file datastore to the
kernel, p50 and p99 over 200 changes, back to back and 100 ms apart.

Run: sudo .venv/bin/python bench/bench_driver.py [ENDPOINTS POLICIES CHANGES ROUNDS [ipv4]
[nftables | both] [cold] [inplace] [refresh]]

With ``ipv4`` the cluster is IPv4-only as calico.yaml deploys one (FelixConfiguration
ipv6Support: false), so the agent and the floor leave IPv6 alone; by default, as Felix's own
default, both IPv4 and IPv6 tables are written. With ``nftables`` the agent runs in the
nftables mode (FELIX_NFTABLESMODE=Enabled) and the floor is loading the same final nft
scripts with ``nft -f``; ``both`` measures the iptables mode and the nftables mode round by
round, alternating, on the same cluster. The agents keep their parse cache
(``pyfelix.resources.parse_cache``) in a directory of the benchmark's: by default one start
before the rounds fills it, as a restarted agent finds it; with ``cold`` it is emptied before
every start, as on a node's first start. With ``inplace`` every round also restarts the agent in
the namespace its first agent programmed (a node's restart: the tables hold the last run's
rules), timed the same way. Besides the floor (loading the final scripts into an empty
namespace), the floor as an agent must load them (``--noflush``) is measured and shown. With
``refresh`` a fresh agent in each mode then re-reads every area of the kernel each second
(the refresh intervals at 1 s), finding nothing to repair: the CPU time (the agent's and its
iptables-save, ipset and nft children's) per such no-op refresh, against an idle agent's
second (the intervals at their defaults), is printed.

Scenario: ENDPOINTS workload endpoints (200 on the node, their veth interfaces present) and
POLICIES global policies selecting by app label and admitting traffic from role=client.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import attrs
import yaml

from bytecode import compile_agent
from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.rules.nft import render_nftables, set_name
from pyfelix_dataplane.state import NodeState

NODE = "bench-node"
PROBE = Path(__file__).with_name("set_probe.py")
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


def programmed(
    ns: str, versions: tuple[str, ...] = ("iptables", "ip6tables"), mode: str = "iptables"
) -> bool:
    """Independently of the agent's word: every local route and endpoint chain is in place."""
    routes = ns_exec(ns, "ip", "route", "show", "proto", "boot").count("\n")
    if mode == "nftables":
        families = ["ip", "ip6"][: len(versions)]
        return routes >= LOCAL and all(
            ns_exec(ns, "nft", "list", "table", family, "calico").count("chain filter-cali-tw-")
            >= LOCAL
            for family in families
        )
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


def load_nft_floor(ns: str, scripts: list[str]) -> float:
    """The nftables mode's floor: each family's final script, loaded by ``nft -f``."""
    start = time.perf_counter()
    for script in scripts:
        ns_exec(ns, "nft", "-f", "-", stdin=script)
    return time.perf_counter() - start


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


@attrs.define
class AgentCache:
    """The agents' parse cache (PYFELIX_CACHE_DIR), emptied before each start when ``cold``."""

    path: Path | None = None
    cold: bool = False


#: Set by main.
AGENT_CACHE = AgentCache()


def start_agent(
    ns: str,
    directory: Path,
    log_file: Any,
    mode: str = "iptables",
    settings: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    argv = ["run", "--hostname", NODE, "--datastore", str(directory)]
    nftables = "Enabled" if mode == "nftables" else "Disabled"
    env = {**os.environ, **(settings or {}), "FELIX_NFTABLESMODE": nftables}
    # Endpoint status files (Felix's, for the CNI plugin) go to a scratch directory.
    env["FELIX_ENDPOINTSTATUSPATHPREFIX"] = tempfile.mkdtemp(prefix="pyfelix-bench-status-")
    if AGENT_CACHE.path is not None:
        env["PYFELIX_CACHE_DIR"] = str(AGENT_CACHE.path)
        if AGENT_CACHE.cold:
            shutil.rmtree(AGENT_CACHE.path, ignore_errors=True)
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "pyfelix", *argv],
        stdout=subprocess.DEVNULL,
        stderr=log_file,
        env=env,
    )


def wait_for_index(cache: Path | None, limit: float = 30.0) -> None:
    """Until the agent has indexed its parse cache (some seconds after InSync): a restart
    that finds the index reads its files without a child."""
    deadline = time.monotonic() + limit
    while cache is not None and not any(cache.glob("*/index")):
        if time.monotonic() > deadline:
            raise SystemExit(f"the agent did not index its parse cache in {cache}")
        time.sleep(0.1)


def fill_cache(directory: Path, logs: Path) -> None:
    """One unmeasured start (in a namespace of its own), for the cache (and its index) the
    rounds find."""
    ns = f"pfb-fill-{os.getpid()}"
    agent = None
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        log_path = logs / "agent-fill.log"
        with log_path.open("w") as log_file:
            agent = start_agent(ns, directory, log_file)
            wait_for(log_path, "in sync:", agent)
            wait_for_index(AGENT_CACHE.path)
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)


#: Between two changes of the "spaced" series: each change is then alone in the pipeline.
SPACING = 0.1


def measure_changes(
    ns: str, directory: Path, changes: int, spacing: float, mode: str = "iptables"
) -> None:
    """Each change is written once the previous one is in the kernel: back to back (a steady
    stream, which the apply throttle meets) or ``spacing`` seconds apart (a change alone).
    The kernel is asked by bench/set_probe.py, the same netlink question in both modes."""
    clients = ipset_name(IPSetData(selector='role == "client"').id)
    name = set_name(clients) if mode == "nftables" else clients
    probe_mode = "nftables" if mode == "nftables" else "ipset"
    probe = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, str(PROBE), probe_mode, name, "10.0.0.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert probe.stdin is not None
    assert probe.stdout is not None
    latencies = []
    try:
        for n in range(changes):
            role = "client" if n % 2 == 0 else ""
            time.sleep(spacing)
            started = time.monotonic()
            (directory / "probe.yaml").write_text(yaml.safe_dump(wep(0, role)))
            probe.stdin.write("1\n" if role else "0\n")
            probe.stdin.flush()
            latencies.append(float(probe.stdout.readline()) - started)
    finally:
        probe.kill()
        probe.wait()
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    series = f"{spacing * 1000:.0f} ms apart" if spacing else "back to back"
    print(
        f"{mode}: label change to kernel over {changes} changes {series}: "
        f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    )


def main() -> None:
    endpoints = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    policies = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000
    changes = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    options = set(sys.argv[5:])
    ipv6 = "ipv4" not in options
    modes: tuple[str, ...] = ("iptables",)
    if "both" in options:
        modes = ("iptables", "nftables")
    elif "nftables" in options:
        modes = ("nftables",)
    AGENT_CACHE.cold = "cold" in options
    stack_kind = "IPv4 and IPv6" if ipv6 else "IPv4 only"
    cache = "an empty parse cache" if AGENT_CACHE.cold else "the parse cache of an earlier start"
    print(
        f"{endpoints} endpoints ({LOCAL} local), {policies} policies, {stack_kind}, "
        f"{rounds} rounds, {cache}"
    )
    compile_agent()
    with ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        write_manifests(directory, endpoints, policies, ipv6)
        view, state = compute([i.resource for i in load_paths([directory]).resources], NODE)
        # The agents' logs go beside the datastore, not into it: each line written there would
        # wake the agent's file syncer.
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        AGENT_CACHE.path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "cache"
        if not AGENT_CACHE.cold:
            fill_cache(directory, logs)
        cluster = Cluster(directory, logs, view, state, ipv6, "inplace" in options)
        keys = ("floor", "noflush", "driver", "total", "inplace driver", "inplace total")
        results: dict[str, dict[str, list[float]]] = {m: {k: [] for k in keys} for m in modes}
        for n in range(rounds):
            for mode in modes:
                run_round(stack, cluster, n, mode, results[mode])
        for mode in modes:
            report_medians(mode, results[mode])
        for mode in modes:
            measure_mode_changes(stack, directory, cluster.logs, mode, changes, endpoints=endpoints)
        if "refresh" in options:
            for mode in modes:
                measure_refresh(directory, cluster.logs, mode)


#: The areas whose refresh interval the no-op refresh measurement shortens, and how long it
#: samples the agents' CPU time.
REFRESH_SETTINGS = ("IPTABLES", "NFTABLES", "IPSETS", "ROUTE")
REFRESH_WINDOW = 20.0


def _agent_cpu(pid: int) -> float:
    """The agent's CPU seconds, with those of its children it has waited for (the kernel
    dumps it runs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def measure_refresh(directory: Path, logs: Path, mode: str) -> None:
    """The CPU cost of a refresh that finds the kernel as written: an agent's CPU time over
    REFRESH_WINDOW with every area re-read each second (FELIX_*REFRESHINTERVAL=1), per
    refresh, beside an agent's idle cost with the default intervals; each agent fresh, in a
    namespace of its own, measured once its first apply and post-write checks are done."""
    cost = {}
    for label, interval in (("idle", ""), ("refreshing", "1")):
        ns = f"pfb-refresh-{os.getpid()}-{mode}"
        agent = None
        extra = {f"FELIX_{area}REFRESHINTERVAL": interval for area in REFRESH_SETTINGS}
        try:
            subprocess.run(["ip", "netns", "add", ns], check=True)
            add_interfaces(ns)
            log_path = logs / f"agent-refresh-{mode}-{label}.log"
            with log_path.open("w") as log_file:
                agent = start_agent(ns, directory, log_file, mode, extra if interval else {})
                wait_for(log_path, "apply 1:", agent)
                time.sleep(5.0)  # the first apply's post-write checks: 0.05 s, doubling
                before = _agent_cpu(agent.pid)
                time.sleep(REFRESH_WINDOW)
                cost[label] = (_agent_cpu(agent.pid) - before) / REFRESH_WINDOW
                if agent.poll() is not None:
                    raise SystemExit(f"the agent exited while measured: {log_path}")
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait()
            subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)
    busy, idle = cost["refreshing"], cost["idle"]
    print(
        f"{mode}: every area refreshed each second: {busy * 1000:.0f} ms CPU a second, "
        f"idle {idle * 1000:.0f} ms: {(busy - idle) * 1000:.0f} ms CPU a no-op refresh"
    )


def report_medians(mode: str, found: dict[str, list[float]]) -> None:
    """The rounds' medians, as ratios to the floor measured in the same rounds."""
    if not found["floor"]:
        return
    floor = statistics.median(found["floor"])
    if found["noflush"]:
        noflush = statistics.median(found["noflush"])
        print(f"{mode} medians: floor {floor:.2f} s, with --noflush {noflush:.2f} s")
    else:
        print(f"{mode} medians: floor {floor:.2f} s")
    for label, prefix in (("start", ""), ("restart in place", "inplace ")):
        if not found[f"{prefix}total"]:
            continue
        driver, total = (statistics.median(found[f"{prefix}{k}"]) for k in ("driver", "total"))
        print(
            f"  {label}: InSync to programmed {driver:.2f} s ({driver / floor:.2f}x), "
            f"process start to programmed {total:.2f} s ({total / floor:.2f}x)"
        )


def report_memory(pid: int, mode: str, endpoints: int) -> None:
    """The running agent's resident memory once its changes are in (``ip netns exec``
    execs the agent, so ``pid`` is the agent's own), and per workload endpoint."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    rss, peak = (int(fields[name].split()[0]) for name in ("VmRSS", "VmHWM"))
    print(
        f"{mode}: agent resident {rss / 1024:.0f} MB (peak {peak / 1024:.0f} MB), "
        f"{rss / endpoints:.2f} KB a workload endpoint of {endpoints}"
    )


def measure_mode_changes(
    stack: ExitStack, directory: Path, logs: Path, mode: str, changes: int, *, endpoints: int
) -> None:
    """The label change series in one mode, against a fresh agent."""
    ns = f"pfb-changes-{os.getpid()}-{mode}"
    agent = None
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        add_interfaces(ns)
        log_path = logs / f"agent-changes-{mode}.log"
        log_file = stack.enter_context(log_path.open("w"))
        agent = start_agent(ns, directory, log_file, mode)
        wait_for(log_path, "apply 1:", agent)
        measure_changes(ns, directory, changes, 0.0, mode)
        measure_changes(ns, directory, changes, SPACING, mode)
        report_memory(agent.pid, mode, endpoints)
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)


@attrs.frozen
class Cluster:
    """The benchmark's cluster: its manifests, and their dry-run view and state."""

    directory: Path
    logs: Path
    view: dict[str, Any]
    state: NodeState
    ipv6: bool
    inplace: bool


def run_round(
    stack: ExitStack, cluster: Cluster, n: int, mode: str, results: dict[str, list[float]]
) -> None:
    """One round in one mode: the floor in a fresh namespace, then the agent from its
    process start to the kernel programmed, in another."""
    ns, floor_ns = f"pfb-driver-{os.getpid()}-{n}", f"pfb-floor-{os.getpid()}-{n}"
    agent = None
    try:
        if mode == "nftables":
            scripts = [table.script() for table in render_nftables(cluster.state).values()]
            subprocess.run(["ip", "netns", "add", floor_ns], check=True)
            settle()
            results["floor"].append(load_nft_floor(floor_ns, scripts))
            subprocess.run(["ip", "netns", "del", floor_ns], check=True)
        else:
            for noflush, key in ((False, "floor"), (True, "noflush")):
                subprocess.run(["ip", "netns", "add", floor_ns], check=True)
                settle()
                results[key].append(load_floor(floor_ns, cluster.view, noflush))
                subprocess.run(["ip", "netns", "del", floor_ns], check=True)
        subprocess.run(["ip", "netns", "add", ns], check=True)
        add_interfaces(ns)
        floor = results["floor"][-1]
        for prefix, label in (("", "start"), ("inplace ", "restart in place")):
            if prefix and not cluster.inplace:
                break
            if agent is not None:
                agent.terminate()
                agent.wait()
            log_path = cluster.logs / f"agent-{mode}-{n}{prefix.strip()}.log"
            log_file = stack.enter_context(log_path.open("w"))
            settle()
            start = time.perf_counter()
            agent = start_agent(ns, cluster.directory, log_file, mode)
            # The driver logs when the complete snapshot (InSync) reaches it, and each apply
            # when it has finished writing.
            wait_for(log_path, "in sync:", agent)
            in_sync = time.perf_counter() - start
            first_apply = wait_for(log_path, "apply 1:", agent)
            total = time.perf_counter() - start
            versions = ("iptables", "ip6tables") if cluster.ipv6 else ("iptables",)
            if not programmed(ns, versions, mode):
                raise SystemExit("the agent reported its first apply, the kernel disagrees")
            results[f"{prefix}total"].append(total)
            results[f"{prefix}driver"].append(total - in_sync)
            print(
                f"round {n + 1} {mode} {label}: floor {floor:.2f} s; agent process start to "
                f"programmed {total:.2f} s ({total / floor:.2f}x), of which InSync to "
                f"programmed {total - in_sync:.2f} s"
            )
            print("  first apply, as the driver timed it:", first_apply.split("apply 1: ")[1])
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait()
        for name in (ns, floor_ns):
            subprocess.run(["ip", "netns", "del", name], check=False, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
