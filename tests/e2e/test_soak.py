"""Soak with faults: seeded random edits (policies, network sets, namespace labels) through
the file datastore or through etcd, while faults are injected (the agent SIGKILLed mid-apply
and restarted, kernel tampering; hostile files or a FIFO dropped into the directory, or
hostile values and keys put into etcd; etcd stopped, killed, compacted, or its watch
connection stalled; an IP set over MaxIpsetSize; the health port flooded with connections),
ending with the oracle: the kernel's cali chains and IP sets equal a fresh dry-run of the
final datastore (its sets cut to MaxIpsetSize as the agent cuts them), and the agent is alive
and ready once the oversized set is gone.

CI runs a short seeded run of each; a long one is ``PYFELIX_SOAK_EDITS=2000
PYFELIX_SOAK_SEED=7 pytest tests/e2e/test_soak.py`` (bench/RESULTS.md records one).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.linux.ipsets import parse_save as parse_ipset_save
from pyfelix_dataplane.linux.iptables import parse_save
from pyfelix_dataplane.rules.render import render
from tests.e2e.cluster import AGENT_LOGS, CLIENT_IP, MANIFESTS, SERVER_IP, Cluster, fetch
from tests.etcd_server import EtcdServer
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns

EDITS = int(os.environ.get("PYFELIX_SOAK_EDITS", "40"))
#: Each etcd edit is a `pyfelix datastore` process; 40 still bring each of its ten faults.
ETCD_EDITS = int(os.environ.get("PYFELIX_SOAK_EDITS", "40"))
SEED = int(os.environ.get("PYFELIX_SOAK_SEED", "1"))
#: A fault after every this many edits; each kind comes once before any comes again.
FAULT_EVERY = 4

SELECTORS = ['app == "server"', 'app == "client"', "all()", 'app in {"server", "client"}']
LEVELS = zip("abcdefgh", "bcdefghi", strict=True)
HOSTILE = {
    "bomb.yaml": 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in LEVELS),
    "deep.json": "[" * 5000 + "]" * 5000,
    "garbage.yaml": "\x07\x00not: [yaml",
}
POLICIES = "/calico/resources/v3/projectcalico.org/globalnetworkpolicies/"
#: etcd keys and values that must be treated as absent (bytes: a key need not be UTF-8).
HOSTILE_ETCD = {
    POLICIES.encode() + b"deep": b"[" * 5000 + b"]" * 5000,
    POLICIES.encode() + b"not-utf8-\xff\xfe": b'{"kind": "GlobalNetworkPolicy"}',
    POLICIES.encode() + b"garbage": b"\x07{not json",
    POLICIES.encode() + b"wrong-shape": b'{"spec": {"order": "high", "selector": 7}}',
}

Kernel = tuple[dict[str, tuple[str, ...]], dict[str, frozenset[str]]]

#: The soak's MaxIpsetSize: small, so that one network set of the "maxelem" fault exceeds it.
MAXELEM = 48
#: The "maxelem" fault's network set: more nets than MAXELEM, in the sets all() selects.
BIG_NETSET = (
    "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkSet\nmetadata:\n  name: soak-big\n"
    "  labels: {big: 'yes'}\n"
    f"spec: {{nets: [{', '.join(f'10.200.{i}.0/24' for i in range(MAXELEM + 12))}]}}\n"
)
#: A deny of what that set holds: programmed cut, the set weakens it.
BIG_DENY = (
    "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata:\n"
    "  name: soak-big-deny\nspec:\n  order: 1\n  selector: all()\n  types: [Ingress]\n"
    "  ingress: [{action: Deny, source: {selector: has(big)}}]\n"
)
BASE = MANIFESTS.replace(
    "  healthEnabled: true\n", f"  healthEnabled: true\n  maxIpsetSize: {MAXELEM}\n"
)
#: How long the "etcd-stall" fault keeps the watch's connection silent: past the agent's
#: keepalive (30 s of silence, then 10 s for the answer).
STALL_SECONDS = 45.0
#: Connections the "descriptors" fault opens to the health port at once, and holds a second.
FLOOD = """
import resource, socket, time
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
held = []
for _ in range(1100):
    try:
        held.append(socket.create_connection(("127.0.0.1", 9099), timeout=2))
    except OSError:
        break
time.sleep(1)
print(len(held))
"""


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


def host_addresses(node: str) -> frozenset[str]:
    """The node's own addresses as the agent reads them (the this-host set): every
    interface's but the workloads' and kube-proxy's dummy device."""
    found = set()
    for line in run_in(node, "ip", "-o", "addr", "show").stdout.splitlines():
        words = line.split()
        if words[1].startswith("cali") or words[1] == "kube-ipvs0":
            continue
        found.add(words[3].split("/")[0])
    return frozenset(found)


def expected(manifests: Path, host_ips: frozenset[str] = frozenset()) -> Kernel:
    """What a fresh dry-run of the datastore says the kernel should hold (IPv4), on a node
    with these addresses."""
    resources = [item.resource for item in load_paths([manifests]).resources]
    _, dataplane = compute(resources, "node")
    dataplane.host_ips = host_ips
    rendered = render(dataplane, versions=(4,), with_text=False)
    chains = {
        f"{table}/{chain.name}": tuple(chain.rule_hashes())
        for table, table_chains in rendered.chains[4].items()
        for chain in table_chains
    }
    sets = {
        name: frozenset(m.removesuffix("/32") for m in sorted(members)[:MAXELEM])
        for name, (_, members) in rendered.ipsets.items()
        if name.startswith("cali40")
    }
    return chains, sets


class FileStore:
    """Edits are files written into (and removed from) the datastore directory."""

    #: The faults both stores take.
    common: tuple[str, ...] = ("kill", "flush", "ipset", "hostile", "descriptors", "maxelem")
    faults: tuple[str, ...] = (*common, "fifo")

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.directory = cluster.manifests

    def start_agent(self) -> None:
        self.cluster.start_agent()

    def write(self, name: str, text: str) -> None:
        (self.directory / name).write_text(text)

    def delete(self, name: str) -> None:
        (self.directory / name).unlink(missing_ok=True)

    def hostile(self, rng: random.Random) -> None:
        name, text = rng.choice(sorted(HOSTILE.items()))
        (self.directory / name).write_text(text)


class EtcdStore(FileStore):
    """Edits go through ``pyfelix datastore apply/delete`` into an etcd server inside the node
    namespace; the directory mirrors what was written, for the oracle."""

    faults: tuple[str, ...] = (
        *FileStore.common,
        "etcd-stop",
        "etcd-kill",
        "etcd-compact",
        "etcd-stall",
    )

    def __init__(self, cluster: Cluster, etcd: EtcdServer) -> None:
        super().__init__(cluster)
        self.etcd = etcd
        self.endpoints = etcd.url.replace("http://", "--endpoints=http://")
        self.datastore("apply", "-f", str(self.directory / "base.yaml"))

    def start_agent(self) -> None:
        self.cluster.start_agent(self.etcd.etcd_url)

    def datastore(self, *args: str) -> None:
        pyfelix = (sys.executable, "-m", "pyfelix", "datastore", "--datastore")
        result = run_in(self.cluster.node, *pyfelix, self.etcd.etcd_url, *args)
        assert result.returncode == 0, result.stderr

    def write(self, name: str, text: str) -> None:
        path = self.directory / name
        if path.exists() and path.read_text().split("kind:")[1] != text.split("kind:")[1]:
            self.delete(name)  # another kind under the same name: the old one goes
        path.write_text(text)
        self.datastore("apply", "-f", str(path))

    def delete(self, name: str) -> None:
        path = self.directory / name
        if path.exists():
            self.datastore("delete", "-f", str(path))
            path.unlink()

    def hostile(self, rng: random.Random) -> None:
        key, value = rng.choice(sorted(HOSTILE_ETCD.items()))
        put = ["etcdctl", self.endpoints, "put", os.fsdecode(key), os.fsdecode(value)]
        assert run_in(self.cluster.node, *put).returncode == 0

    def stall(self, rng: random.Random) -> None:
        """Drop what etcd sends on the agent's open connections for STALL_SECONDS (an nft
        table of the test's own, in the node namespace): they stay open and say nothing, as
        a stalled watch, while an edit is made. New connections (the edits', the agent's
        next) are not touched. The agent must have logged the stall and watched anew."""
        port = str(self.etcd.client_port)
        assert self.cluster.agent is not None
        # The agent's own connections only: etcd's gateway also connects to its client port.
        agent = f"pid={self.cluster.agent.pid},"
        listing = run_in(self.cluster.node, "ss", "-Htnp", "state", "established")
        ports = sorted(
            {
                line.split()[2].rsplit(":", 1)[1]
                for line in listing.stdout.splitlines()
                if line.split()[3].endswith(f":{port}") and agent in line
            }
        )
        assert ports, listing.stdout
        rules = f"""
table inet soakstall {{
    chain out {{
        type filter hook output priority -300;
        tcp sport {port} tcp dport {{ {", ".join(ports)} }} drop
    }}
}}
"""
        log = AGENT_LOGS[-1]
        logged = len(log.read_text())
        assert run_in(self.cluster.node, "nft", "-f", "-", input_text=rules).returncode == 0
        try:
            self.write("soak-stalled.yaml", random_netset(rng, 99))  # a change the watch owes
            time.sleep(STALL_SECONDS)
        finally:
            run_in(self.cluster.node, "nft", "delete", "table", "inet", "soakstall")
        assert "watching anew" in log.read_text()[logged:], "the stalled watch went unnoticed"

    def etcd_fault(self, fault: str, rng: random.Random) -> None:
        if fault == "etcd-stall":
            self.stall(rng)
            return
        if fault == "etcd-compact":
            status = run_in(
                self.cluster.node, "etcdctl", self.endpoints, "endpoint", "status", "-w", "json"
            )
            revision = json.loads(status.stdout)[0]["Status"]["header"]["revision"]
            compact = ["etcdctl", self.endpoints, "compact", str(revision)]
            assert run_in(self.cluster.node, *compact).returncode == 0
            return
        assert self.etcd.process is not None
        if fault == "etcd-kill":
            self.etcd.process.kill()
            self.etcd.process.wait()
            self.etcd.process = None
        else:
            self.etcd.stop()
        time.sleep(rng.uniform(0.2, 2.0))
        self.etcd.start()


def inject_fault(store: FileStore, rng: random.Random, faults: list[str]) -> None:
    cluster = store.cluster
    done = len(faults) % len(store.faults)
    remaining = sorted(set(store.faults) - set(faults[len(faults) - done :]))
    fault = rng.choice(remaining)
    faults.append(fault)
    if fault == "kill":
        assert cluster.agent is not None
        cluster.agent.send_signal(signal.SIGKILL)
        cluster.agent.wait(timeout=10)
        store.start_agent()
    elif fault == "flush":
        run_in(cluster.node, "iptables-nft", "-F", "cali-FORWARD")
    elif fault == "ipset":
        sets = kernel(cluster)[1]
        names = [name for name, members in sets.items() if members]
        if names:
            name = rng.choice(sorted(names))
            run_in(cluster.node, "ipset", "flush", name)
    elif fault == "hostile":
        store.hostile(rng)
    elif fault == "fifo":
        # A FIFO named as a manifest: the agent must neither open it blocking nor go deaf.
        fifo = store.directory / f"soak-fifo-{len(faults)}.yaml"
        os.mkfifo(fifo)
    elif fault == "maxelem":
        if (store.directory / "soak-big.yaml").exists():
            return  # already over, and reported
        store.write("soak-big-deny.yaml", BIG_DENY)
        store.write("soak-big.yaml", BIG_NETSET)
        assert eventually(
            lambda: (
                "weakens GlobalNetworkPolicy soak-big-deny"
                in fetch(cluster, "http://127.0.0.1:9099/readiness")
            ),
            timeout=15,
        ), fetch(cluster, "http://127.0.0.1:9099/readiness")
    elif fault == "descriptors":
        flood = run_in(cluster.node, sys.executable, "-c", FLOOD)
        assert flood.returncode == 0, flood.stderr
        assert eventually(
            lambda: fetch(cluster, "http://127.0.0.1:9099/liveness").startswith("200"),
            timeout=10,
        ), f"/liveness not answered after {flood.stdout.strip()} connections"
    else:
        assert isinstance(store, EtcdStore)
        store.etcd_fault(fault, rng)


@pytest.fixture(params=["files", "etcd"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    (tmp_path / "datastore").mkdir()
    (tmp_path / "datastore" / "base.yaml").write_text(BASE)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path / "datastore")
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        if request.param == "files":
            yield FileStore(cluster)
            return
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=cluster.node)
        etcd.start()
        stack.callback(etcd.stop)
        yield EtcdStore(cluster, etcd)


def test_soak_with_faults_ends_equal_to_a_fresh_dry_run(store: FileStore) -> None:
    cluster = store.cluster
    rng = random.Random(SEED)
    store.start_agent()
    assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
    faults: list[str] = []
    started = time.monotonic()
    edits = ETCD_EDITS if isinstance(store, EtcdStore) else EDITS
    for edit in range(edits):
        choice = rng.random()
        index = rng.randint(0, 9)
        if choice < 0.45:
            store.write(f"soak-policy-{index}.yaml", random_policy(rng, index))
        elif choice < 0.6:
            store.delete(f"soak-policy-{index}.yaml")
        elif choice < 0.8:
            store.write(f"soak-nets-{index}.yaml", random_netset(rng, index))
        else:
            store.write("soak-namespace.yaml", random_namespace(rng))
        if edit % FAULT_EVERY == FAULT_EVERY - 1:
            inject_fault(store, rng, faults)
        time.sleep(rng.uniform(0, 0.15))
        assert cluster.agent is not None
        assert cluster.agent.poll() is None, f"the agent died after edit {edit}"
    lost = converge(cluster)
    if "maxelem" in faults:
        # The oversized set programmed cut, as the oracle cut it; then it goes, and with it
        # any policy it weakened, so the node is ready again.
        store.delete("soak-big.yaml")
        store.delete("soak-big-deny.yaml")
        lost += converge(cluster)
    assert fetch(cluster, "http://127.0.0.1:9099/liveness").startswith("200")
    assert eventually(
        lambda: fetch(cluster, "http://127.0.0.1:9099/readiness").startswith("200"), timeout=15
    ), fetch(cluster, "http://127.0.0.1:9099/readiness")
    kind = type(store).__name__
    print(
        f"soak ({kind}): {edits} edits, {len(faults)} faults tried and survived {faults},"
        f" updates lost {lost}, {time.monotonic() - started:.1f} s"
    )


def converge(cluster: Cluster) -> int:
    """Wait for the kernel to equal a fresh dry-run of the datastore; the differences left
    (updates lost: 0, or the assertion fails with the first of them)."""
    want = expected(cluster.manifests, host_addresses(cluster.node))
    policies = list(cluster.manifests.glob("soak-policy-*.yaml"))
    assert not policies or any("cali-pi-" in chain for chain in want[0]), "the oracle is empty"

    def converged() -> bool:
        return kernel(cluster) == want

    assert eventually(converged, timeout=30), (
        sorted(set(kernel(cluster)[0].items()) ^ set(want[0].items()))[:6]
        or sorted(set(kernel(cluster)[1].items()) ^ set(want[1].items()))[:3]
    )
    return 0
