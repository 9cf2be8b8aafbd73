"""Calculation-graph benchmark, after Felix's own calc-graph benchmark scenarios.

Model updates (what the syncer's update processors produce) are fed straight into the graph,
as Felix's benchmark feeds KVs, so this measures the graph and sequencer, not YAML or etcd.
For each scenario: time from the first update to the last message after InSync, messages
emitted, and peak RSS (each scenario in its own process). Then a steady stream of endpoint
label changes, to measure sustained throughput.

Run: .venv/bin/python bench/bench_calc_graph.py [scenario ...]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator

from pyfelix import model
from pyfelix.calc.pipeline import build_pipeline
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.values import FrozenMap

HOST = "host-local"
LOCAL = 200
BATCH = 100


def endpoint(i: int, labels: dict[str, str], local: bool, profile: str) -> Update:
    host = HOST if local else f"host-{i % 1000}"
    key = model.WorkloadEndpointKey(host, "k8s", f"ns/pod-{i}", "eth0")
    value = model.WorkloadEndpoint(
        state="active",
        name=f"cali{i:011x}",
        mac="",
        profile_ids=(profile,),
        ipv4_nets=(f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}/32",),
        ipv6_nets=(),
        labels=FrozenMap(labels),
    )
    return Update(key, value)


def policy(name: str, selector: str, source: str, namespace: str = "") -> Update:
    rule = model.Rule(action="allow", src_selector=source, protocol="tcp")
    value = model.Policy(
        namespace=namespace,
        tier="default",
        order=1.0,
        inbound_rules=(rule,),
        outbound_rules=(model.Rule(action="allow"),),
        selector=selector,
    )
    kind = "NetworkPolicy" if namespace else "GlobalNetworkPolicy"
    return Update(model.PolicyKey(name, namespace, kind, "default"), value)


def profile(name: str, labels: dict[str, str]) -> list[Update]:
    rules = model.ProfileRules((model.Rule(action="allow"),), (model.Rule(action="allow"),))
    return [
        Update(model.ProfileRulesKey(name), rules),
        Update(model.ProfileLabelsKey(name), model.ProfileLabels(FrozenMap(labels))),
    ]


def tag_policies(endpoints: int, policies: int) -> Iterator[Update]:
    """Felix's tag-policy scenario: each endpoint carries a few tags, each policy selects one."""
    yield from profile("kns.default", {"pcns.projectcalico.org/name": "default"})
    for i in range(policies):
        yield policy(f"tag-{i}", f"has(tag-{i})", f"has(tag-{(i + 1) % policies})")
    for i in range(endpoints):
        tags = {f"tag-{(i * k) % policies}": "" for k in (1, 7, 13)}
        yield endpoint(i, {"app": f"app-{i % 100}", **tags}, i < LOCAL, "kns.default")


def netset_policies(endpoints: int, policies: int) -> Iterator[Update]:
    """Network-set policies: each policy admits traffic from its own network set."""
    yield from profile("kns.default", {"pcns.projectcalico.org/name": "default"})
    for i in range(policies):
        value = model.NetworkSet(
            (f"172.{16 + (i >> 16) % 16}.{(i >> 8) & 255}.{i & 255}/32",),
            FrozenMap({"netset": f"ns-{i}"}),
        )
        yield Update(model.NetworkSetKey(f"netset-{i}"), value)
        yield policy(f"netset-{i}", f'app == "app-{i % 100}"', f'netset == "ns-{i}"')
    for i in range(endpoints):
        yield endpoint(i, {"app": f"app-{i % 100}"}, i < LOCAL, "kns.default")


def tenants(namespaces: int) -> Iterator[Update]:
    """Isolated tenants: one namespace per tenant, each with a policy admitting only itself."""
    endpoints = max(namespaces * 2, 1000)
    for n in range(namespaces):
        ns = f"tenant-{n}"
        yield from profile(f"kns.{ns}", {"pcns.projectcalico.org/name": ns})
        yield policy(
            "isolate",
            f"projectcalico.org/namespace == '{ns}'",
            f"projectcalico.org/namespace == '{ns}'",
            namespace=ns,
        )
    for i in range(endpoints):
        ns = f"tenant-{i % namespaces}"
        labels = {"projectcalico.org/namespace": ns, "app": f"app-{i % 10}"}
        yield endpoint(i, labels, i < LOCAL, f"kns.{ns}")


SCENARIOS = {
    "tags-250k-10k": lambda: tag_policies(250_000, 10_000),
    "netsets-10k-1k": lambda: netset_policies(10_000, 1_000),
    "netsets-10k-10k": lambda: netset_policies(10_000, 10_000),
    "tenants-1k": lambda: tenants(1_000),
    "tenants-10k": lambda: tenants(10_000),
    "tenants-100k": lambda: tenants(100_000),
}


def run_scenario(name: str) -> dict[str, float]:
    updates = list(SCENARIOS[name]())
    messages = 0

    def count(_: object) -> None:
        nonlocal messages
        messages += 1

    # The graph alone is measured (model updates carry no resource to validate).
    graph = build_pipeline(HOST, count).graph
    start = time.perf_counter()
    for offset in range(0, len(updates), BATCH):
        graph.on_updates(updates[offset : offset + BATCH])
    graph.on_status(SyncStatus.IN_SYNC)
    graph.flush()
    elapsed = time.perf_counter() - start
    return {
        "updates": len(updates),
        "seconds": elapsed,
        "messages": messages,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_label_stream(changes: int = 20_000) -> dict[str, float]:
    """Sustained endpoint label changes on the 10k/1k network-set scenario, flushed every
    100 changes: changes per second through graph and sequencer."""
    graph = build_pipeline(HOST, lambda _: None).graph
    updates = list(netset_policies(10_000, 1_000))
    graph.on_updates(updates)
    graph.on_status(SyncStatus.IN_SYNC)
    graph.flush()
    start = time.perf_counter()
    for n in range(changes):
        i = n % 10_000
        graph.on_updates([endpoint(i, {"app": f"app-{(i + n) % 100}"}, i < LOCAL, "kns.default")])
        if n % 100 == 99:
            graph.flush()
    graph.flush()
    elapsed = time.perf_counter() - start
    return {"changes": changes, "seconds": elapsed, "per_second": changes / elapsed}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        name = sys.argv[2]
        result = run_label_stream() if name == "label-stream" else run_scenario(name)
        print(json.dumps(result))
        return
    names = sys.argv[1:] or [*SCENARIOS, "label-stream"]
    for name in names:
        out = subprocess.run(
            [sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if name == "label-stream":
            print(
                f"{name:18} {result['changes']} changes in {result['seconds']:.2f} s "
                f"= {result['per_second']:.0f}/s"
            )
        else:
            print(
                f"{name:18} {result['updates']:>7} updates {result['seconds']:7.2f} s "
                f"{result['messages']:>7} messages  peak RSS {result['peak_rss_mb']:.0f} MB"
            )


if __name__ == "__main__":
    main()
