"""Soak with faults: seeded random edits through the file datastore (policies, network sets,
namespace labels) while faults are injected (the agent SIGKILLed mid-apply and restarted,
kernel tampering, hostile files dropped into the datastore), ending with the oracle: the
kernel's cali chains and IP sets equal a fresh dry-run of the final datastore, and the agent is
alive and ready.

CI runs a short seeded run; a long one is ``PYFELIX_SOAK_EDITS=2000 PYFELIX_SOAK_SEED=7 pytest
tests/e2e/test_soak.py`` (bench/RESULTS.md records one).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.linux.ipsets import parse_save as parse_ipset_save
from pyfelix_dataplane.linux.iptables import parse_save
from pyfelix_dataplane.rules.render import render
from tests.e2e.cluster import CLIENT_IP, SERVER_IP, Cluster, fetch
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns

EDITS = int(os.environ.get("PYFELIX_SOAK_EDITS", "40"))
SEED = int(os.environ.get("PYFELIX_SOAK_SEED", "1"))
#: A fault every this many edits, on average.
FAULT_EVERY = 8

SELECTORS = ['app == "server"', 'app == "client"', "all()", 'app in {"server", "client"}']
LEVELS = zip("abcdefgh", "bcdefghi", strict=True)
HOSTILE = {
    "bomb.yaml": 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in LEVELS),
    "deep.json": "[" * 5000 + "]" * 5000,
    "garbage.yaml": "\x07\x00not: [yaml",
}

Kernel = tuple[dict[str, tuple[str, ...]], dict[str, frozenset[str]]]


def random_policy(rng: random.Random, index: int) -> str:
    action = rng.choice(["Allow", "Deny"])
    ports = rng.sample([8080, 9090, 7000, 53], rng.randint(0, 2))
    destination = f", destination: {{ports: {ports}}}" if ports else ""
    source = f"source: {{selector: {rng.choice(SELECTORS)!r}}}" if rng.random() < 0.5 else ""
    rule = f"{{action: {action}, protocol: TCP{', ' + source if source else ''}{destination}}}"
    if rng.random() < 0.5:
        kind, namespace = "NetworkPolicy", "\n  namespace: app"
    else:
        kind, namespace = "GlobalNetworkPolicy", ""
    return (
        f"apiVersion: projectcalico.org/v3\nkind: {kind}\nmetadata:\n  name: soak-{index}"
        f"{namespace}\nspec:\n  order: {rng.randint(1, 50)}\n"
        f"  selector: {rng.choice(SELECTORS)!r}\n  types: [Ingress]\n  ingress: [{rule}]\n"
    )


def random_netset(rng: random.Random, index: int) -> str:
    nets = sorted({f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.0/24" for _ in range(3)})
    return (
        f"apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n"
        f"  name: soak-nets-{index}\n  labels: {{role: {rng.choice(['a', 'b'])}}}\n"
        f"spec: {{nets: {nets}}}\n"
    )


def random_namespace(rng: random.Random) -> str:
    return (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\n"
        f"  labels: {{team: {rng.choice(['blue', 'red', 'green'])}}}\n"
    )


def kernel(cluster: Cluster) -> Kernel:
    """The IPv4 cali chains' rule ids per table/chain, and the cali40 sets' members."""
    chains = {}
    for table, state in parse_save(run_in(cluster.node, "iptables-nft-save").stdout).items():
        chains.update({f"{table}/{n}": h for n, h in state.chains.items() if n.startswith("cali")})
    sets = parse_ipset_save(run_in(cluster.node, "ipset", "save").stdout)
    return chains, {n: s.members for n, s in sets.items() if n.startswith("cali40")}


def expected(manifests: Path) -> Kernel:
    """What a fresh dry-run of the datastore says the kernel should hold (IPv4)."""
    resources = [item.resource for item in load_paths([manifests]).resources]
    _, dataplane = compute(resources, "node")
    rendered = render(dataplane, versions=(4,), with_text=False)
    chains = {
        f"{table}/{chain.name}": tuple(chain.rule_hashes())
        for table, table_chains in rendered.chains[4].items()
        for chain in table_chains
    }
    sets = {
        name: frozenset(m.removesuffix("/32") for m in members)
        for name, (_, members) in rendered.ipsets.items()
        if name.startswith("cali40")
    }
    return chains, sets


def inject_fault(cluster: Cluster, rng: random.Random, faults: list[str]) -> None:
    fault = rng.choice(["kill", "flush", "ipset", "hostile"])
    faults.append(fault)
    if fault == "kill":
        assert cluster.agent is not None
        cluster.agent.send_signal(signal.SIGKILL)
        cluster.agent.wait(timeout=10)
        cluster.start_agent()
    elif fault == "flush":
        run_in(cluster.node, "iptables-nft", "-F", "cali-FORWARD")
    elif fault == "ipset":
        sets = kernel(cluster)[1]
        names = [name for name, members in sets.items() if members]
        if names:
            name = rng.choice(sorted(names))
            run_in(cluster.node, "ipset", "flush", name)
    else:
        name, text = rng.choice(sorted(HOSTILE.items()))
        (cluster.manifests / name).write_text(text)


def test_soak_with_faults_ends_equal_to_a_fresh_dry_run(cluster: Cluster) -> None:
    rng = random.Random(SEED)
    cluster.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    faults: list[str] = []
    started = time.monotonic()
    for edit in range(EDITS):
        choice = rng.random()
        index = rng.randint(0, 9)
        if choice < 0.45:
            (cluster.manifests / f"soak-policy-{index}.yaml").write_text(random_policy(rng, index))
        elif choice < 0.6:
            (cluster.manifests / f"soak-policy-{index}.yaml").unlink(missing_ok=True)
        elif choice < 0.8:
            (cluster.manifests / f"soak-nets-{index}.yaml").write_text(random_netset(rng, index))
        else:
            (cluster.manifests / "soak-namespace.yaml").write_text(random_namespace(rng))
        if rng.random() < 1 / FAULT_EVERY:
            inject_fault(cluster, rng, faults)
        time.sleep(rng.uniform(0, 0.15))
        assert cluster.agent is not None
        assert cluster.agent.poll() is None, f"the agent died after edit {edit}"
    want = expected(cluster.manifests)
    policies = list(cluster.manifests.glob("soak-policy-*.yaml"))
    assert not policies or any("cali-pi-" in chain for chain in want[0]), "the oracle is empty"

    def converged() -> bool:
        return kernel(cluster) == want

    assert eventually(converged, timeout=30), sorted(
        set(kernel(cluster)[0].items()) ^ set(want[0].items())
    )[:6]
    assert fetch(cluster, "http://127.0.0.1:9099/readiness").startswith("200")
    assert fetch(cluster, "http://127.0.0.1:9099/liveness").startswith("200")
    print(f"soak: {EDITS} edits, faults {faults}, {time.monotonic() - started:.1f} s")
