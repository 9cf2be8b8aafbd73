"""``pyfelix dry-run`` and ``pyfelix run --dry-run`` as a user runs them."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.etcd_server import EtcdServer

SNAPSHOT_KEYS = {
    "hostname",
    "ipsets",
    "policies",
    "profiles",
    "workload_endpoints",
    "host_endpoints",
    "routes",
    "vteps",
}


def pyfelix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_dry_run_json_is_complete_and_deterministic() -> None:
    """The JSON snapshot has the documented keys and the same bytes on every run."""
    first = pyfelix("dry-run", "--hostname", "node-a", "--format", "json", "examples/")
    assert first.returncode == 0, first.stderr
    view = json.loads(first.stdout)
    assert set(view) >= SNAPSHOT_KEYS
    assert view["hostname"] == "node-a"
    ids = [w["id"] for w in view["workload_endpoints"]]
    assert ids == sorted(ids)
    assert len(ids) == 2
    ipset = next(s for s in view["ipsets"] if s["source"] == {"service": "shop/payments"})
    assert ipset["type"] == "hash:ip,port"
    assert ipset["members"] == ["10.65.1.2,tcp:8080"]
    assert ipset["name"] == ("cali40" + ipset["id"])[:31]
    assert (
        pyfelix("dry-run", "--hostname", "node-a", "--format", "json", "examples/").stdout
        == first.stdout
    )


#: ``pyfelix`` with the IPv6 tables written ahead whatever the number of policies.
_AHEAD_ALWAYS = """
import sys
import pyfelix.dryrun
pyfelix.dryrun.AHEAD_MIN_POLICIES = 0
from pyfelix.cli import console
sys.argv = ["pyfelix", *sys.argv[1:]]
console()
"""


def test_tables_written_ahead_by_a_worker_are_the_same_view() -> None:
    """The last IP version's tables, written by a forked worker while the dry-run writes the
    rest (from 1,000 active policies; here always), leave the view byte for byte the same."""
    args = ("dry-run", "--hostname", "node-a", "--format", "json", "examples/")
    plain = pyfelix(*args)
    assert plain.returncode == 0, plain.stderr
    assert set(json.loads(plain.stdout)["iptables"]) == {"ipv4", "ipv6"}
    ahead = subprocess.run(
        [sys.executable, "-c", _AHEAD_ALWAYS, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert ahead.returncode == 0, ahead.stderr
    assert ahead.stdout == plain.stdout


#: ``pyfelix`` where the compiled module is not built.
_PURE = """
import sys
sys.modules["pyfelix._native"] = None
from pyfelix.cli import console
sys.argv = ["pyfelix", *sys.argv[1:]]
console()
"""


def test_without_the_compiled_module_the_view_is_the_same() -> None:
    """Where ``make`` could not build src/native, the pure paths (the readers' and the
    model's kept hashes) give the very same view."""
    args = ("dry-run", "--hostname", "node-a", "--format", "json", "examples/")
    compiled = pyfelix(*args)
    assert compiled.returncode == 0, compiled.stderr
    pure = subprocess.run(
        [sys.executable, "-c", _PURE, *args], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout == compiled.stdout


def test_dry_run_text_names_tiers_in_order() -> None:
    """The text form shows each endpoint's tiers in evaluation order."""
    result = pyfelix("dry-run", "--hostname", "node-b", "examples/")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    payments = lines.index(next(line for line in lines if "payments-1" in line))
    assert lines[payments + 1].strip().startswith("tier security")
    assert "Routes (" in result.stdout


def test_dry_run_invalid_input(tmp_path: Path) -> None:
    """Invalid input: exit 1 with every problem listed on stderr, nothing computed (stdout
    holds a view or nothing)."""
    shutil.copytree(REPO / "examples", tmp_path / "ex")
    (tmp_path / "ex" / "bad.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: Bad}\nspec: {order: x}\n"
    )
    result = pyfelix("dry-run", str(tmp_path / "ex"))
    assert result.returncode == 1
    assert "spec.order" in result.stderr
    assert result.stdout == ""


def test_dry_run_from_etcd(etcd: EtcdServer) -> None:
    """The same snapshot comes from etcd as from the files that were applied to it."""
    applied = pyfelix("datastore", "--datastore", etcd.etcd_url, "apply", "-f", "examples/")
    assert applied.returncode == 0, applied.stderr
    from_etcd = pyfelix("dry-run", "--hostname", "node-a", "--format", "json", etcd.etcd_url)
    from_files = pyfelix("dry-run", "--hostname", "node-a", "--format", "json", "examples/")
    assert from_etcd.returncode == 0, from_etcd.stderr
    assert json.loads(from_etcd.stdout) == json.loads(from_files.stdout)


class DryRunAgent(subprocess.Popen[str]):
    """``pyfelix run --dry-run``, both its outputs read as they come by threads: a pipe that
    nobody reads fills up (64 KB; the example cluster prints 69 KB after InSync) and stops the
    agent at its next print, so a test waiting for what it does next timed out."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._errors: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_lines, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_lines(self) -> None:
        assert self.stdout is not None
        for line in self.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_errors(self) -> None:
        assert self.stderr is not None
        self._errors.append(self.stderr.read())

    def next_line(self, timeout: float = 20.0) -> str | None:
        """The next line printed, None at the end of the output (or after ``timeout``)."""
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def error_output(self, timeout: float = 20.0) -> str:
        """What the agent wrote to stderr, once it has exited."""
        self.wait(timeout=timeout)
        self._readers[1].join(timeout=timeout)
        return "".join(self._errors)

    def stop(self) -> str:
        """Terminate the agent; what it wrote to stderr."""
        self.terminate()
        return self.error_output(timeout=10)


def wait_for(process: DryRunAgent, needle: str, timeout: float = 20.0) -> list[str]:
    seen = []
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        line = process.next_line(remaining)
        if line is None:
            break
        seen.append(line.rstrip())
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen in {seen[-20:]}")


def start_dry_run_agent(manifests: Path | None, env: dict[str, str] | None = None) -> DryRunAgent:
    """``pyfelix run --dry-run`` for node-a on ``manifests`` (None: the datastore the
    environment names), output unbuffered for reading."""
    datastore = [] if manifests is None else ["--datastore", str(manifests)]
    return DryRunAgent(
        [sys.executable, "-m", "pyfelix", "run", "--dry-run", "--hostname", "node-a", *datastore],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def test_run_reads_the_etcd_the_environment_names(etcd: EtcdServer) -> None:
    """With calico-node's ETCD_ENDPOINTS and no --datastore, the agent reads that etcd (the
    first endpoint named is down: the next one serves) and follows its changes."""
    applied = pyfelix("datastore", "--datastore", etcd.etcd_url, "apply", "-f", "examples/")
    assert applied.returncode == 0, applied.stderr
    env = {"ETCD_ENDPOINTS": f"http://127.0.0.1:9,{etcd.url}"}  # the first one is down
    process = start_dry_run_agent(None, env)
    try:
        policy = "security/GlobalNetworkPolicy/security.block-bad-actors"
        seen = wait_for(process, "InSync")
        assert any(line.startswith("WorkloadEndpointUpdate") for line in seen)
        assert any(line.startswith(f"ActivePolicyUpdate {policy}") for line in seen)
        wait_for(process, "# IPv4 filter: chain cali-FORWARD")
        name = policy.rsplit("/", 1)[1]
        deleted = pyfelix(
            "datastore", "--datastore", etcd.etcd_url, "delete", "globalnetworkpolicy", name
        )
        assert deleted.returncode == 0, deleted.stderr
        wait_for(process, f"ActivePolicyRemove {policy}")
    finally:
        process.kill()
        process.wait()


@contextmanager
def running_dry_run_agent(manifests: Path) -> Iterator[DryRunAgent]:
    """``start_dry_run_agent``, killed on the way out if it is still running."""
    process = start_dry_run_agent(manifests)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_run_dry_run_follows_changes_and_restarts_on_config(manifests: Path) -> None:
    """The agent prints each message as it goes and the chains each burst changed, follows
    file edits, and exits 129 when a configuration change needs a restart."""
    with running_dry_run_agent(manifests) as process:
        seen = wait_for(process, "InSync")
        assert any(line.startswith("WorkloadEndpointUpdate") for line in seen)
        wait_for(process, "# IPv4 filter: chain cali-FORWARD")
        policies = manifests / "50-policies.yaml"
        policies.write_text(policies.read_text().replace("- 53\n", "- 5353\n"))
        wait_for(process, "ActivePolicyUpdate platform/GlobalNetworkPolicy/platform.allow-dns")
        changed = wait_for(process, "--destination-ports 5353")
        assert any(line.startswith("# IPv4 filter: chain cali-po-") for line in changed)
        config = manifests / "00-cluster.yaml"
        config.write_text(
            config.read_text().replace("logSeverityScreen: Info", "logSeverityScreen: Warning")
        )
        assert process.wait(timeout=20) == 129
        assert "configuration changed: LogSeverityScreen" in process.error_output()


def test_run_warns_about_invalid_resources_and_goes_on(manifests: Path) -> None:
    """In the agent, an invalid resource is a warning and treated as absent; the rest runs."""
    (manifests / "90-bad.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\n"
        "metadata: {name: broken}\nspec:\n  selector: all()\n"
        "  ingress: [{action: Allow, destination: {ports: [80]}}]\n"
    )
    process = start_dry_run_agent(manifests)
    try:
        seen = wait_for(process, "InSync")
        assert not any("broken" in line for line in seen)
    finally:
        stderr = process.stop()
    assert "invalid GlobalNetworkPolicy/broken treated as absent" in stderr


@pytest.mark.parametrize(("where", "debug_shown"), [("env", True), ("config", False)])
def test_log_severity_screen(
    manifests: Path, monkeypatch: pytest.MonkeyPatch, where: str, debug_shown: bool
) -> None:
    """FELIX_LOGSEVERITYSCREEN=Debug shows the driver's debug lines; the datastore's
    logSeverityScreen: Warning silences the info lines that follow the configuration."""
    config = manifests / "00-cluster.yaml"
    if where == "config":
        config.write_text(
            config.read_text().replace("logSeverityScreen: Info", "logSeverityScreen: Warning")
        )
    else:
        monkeypatch.setenv("FELIX_LOGSEVERITYSCREEN", "Debug")
    process = start_dry_run_agent(manifests)
    try:
        wait_for(process, "# IPv4 filter: chain cali-FORWARD")
    finally:
        stderr = process.stop()
    assert ("[DEBUG]" in stderr) is debug_shown
    assert ("[INFO]" in stderr) is debug_shown


def test_ipv6_support_false_renders_ipv4_only(tmp_path: Path) -> None:
    """FelixConfiguration ipv6Support: false leaves IPv6 alone, as Felix does."""
    default = json.loads(
        pyfelix("dry-run", "--hostname", "node-a", "--format", "json", "examples/").stdout
    )
    assert set(default["iptables"]) == {"ipv4", "ipv6"}
    assert "create cali60" in default["ipset_restore"]
    manifests = tmp_path / "manifests"
    shutil.copytree(REPO / "examples" / "cluster", manifests)
    (manifests / "99-ipv4-only.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\n"
        "metadata: {name: node.node-a}\nspec: {ipv6Support: false}\n"
    )
    result = pyfelix("dry-run", "--hostname", "node-a", "--format", "json", str(manifests))
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert set(view["iptables"]) == {"ipv4"}
    assert view["iptables"]["ipv4"] == default["iptables"]["ipv4"]
    assert "create cali40" in view["ipset_restore"]
    assert "create cali60" not in view["ipset_restore"]


def test_wireguard_traffic_to_the_node_is_allowed_before_host_policy(tmp_path: Path) -> None:
    """With WireguardEnabled, cali-INPUT accepts the WireGuard port ahead of host endpoint
    policy, as Felix does, so a host policy cannot cut the nodes' tunnels."""
    manifests = tmp_path / "manifests"
    shutil.copytree(REPO / "examples" / "cluster", manifests)
    (manifests / "99-wireguard.yaml").write_text(
        "apiVersion: projectcalico.org/v3\nkind: FelixConfiguration\n"
        "metadata: {name: node.node-a}\n"
        "spec: {wireguardEnabled: true, wireguardListeningPort: 51999}\n"
    )
    result = pyfelix("dry-run", "--hostname", "node-a", "--format", "json", str(manifests))
    assert result.returncode == 0, result.stderr
    rules = json.loads(result.stdout)["iptables"]["ipv4"]["filter"].splitlines()
    accept = next(i for i, r in enumerate(rules) if "--destination-ports 51999" in r)
    dispatch = next(i for i, r in enumerate(rules) if r.endswith("--jump cali-from-host-endpoint"))
    assert rules[accept].startswith("-A cali-INPUT")
    assert accept < dispatch


def test_the_agent_validates_with_the_configured_source_spoofing(manifests: Path) -> None:
    """workloadSourceSpoofing: Any in the datastore's FelixConfiguration lets an endpoint with
    allowSpoofedSourcePrefixes through the running agent's validation too (it used to be
    dropped as invalid by pyfelix run, while dry-run accepted it)."""
    config = manifests / "00-cluster.yaml"
    config.write_text(
        config.read_text().replace(
            "logSeverityScreen: Info", "logSeverityScreen: Info\n  workloadSourceSpoofing: Any", 1
        )
    )
    workloads = manifests / "60-workloads.yaml"
    text = workloads.read_text()
    assert "  ipNetworks:\n  - 10.65.0.2/32\n" in text
    workloads.write_text(
        text.replace(
            "  ipNetworks:\n  - 10.65.0.2/32\n",
            "  ipNetworks:\n  - 10.65.0.2/32\n  allowSpoofedSourcePrefixes: [192.0.2.0/24]\n",
            1,
        )
    )
    process = start_dry_run_agent(manifests)
    try:
        wait_for(process, "# IPv4 raw: chain cali-rpf-skip")
        first_rule = process.next_line()  # the chain's first rule, or the next chain
        assert first_rule is not None
        assert "--source 192.0.2.0/24 --jump ACCEPT" in first_rule
    finally:
        stderr = process.stop()
    assert "treated as absent" not in stderr


def test_run_restarts_on_sighup_and_stops_as_a_failure_when_the_datastore_is_not_ready(
    manifests: Path,
) -> None:
    """As Felix: SIGHUP asks for a configuration reload, so the agent exits 129; a datastore
    marked not ready is a failure (exit 1), not a restart. Both after Felix's 2 s pause."""
    with running_dry_run_agent(manifests) as process:
        wait_for(process, "InSync")
        started = time.monotonic()
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=20) == 129
        assert time.monotonic() - started >= 2
    with running_dry_run_agent(manifests) as process:
        wait_for(process, "InSync")
        cluster = manifests / "00-cluster.yaml"
        text = cluster.read_text()
        assert "datastoreReady: true" in text
        cluster.write_text(text.replace("datastoreReady: true", "datastoreReady: false"))
        assert process.wait(timeout=20) == 1
        assert "stopping: datastore is not ready" in process.error_output()


def test_a_reader_that_leaves_early_ends_the_dry_run_quietly(tmp_path: Path) -> None:
    """``pyfelix dry-run ... | head``: once the reader has gone, the dry-run stops as a tool
    that SIGPIPE stops (status 141), with no traceback. The view (2,000 endpoints' chains)
    is many times what a pipe holds, so the dry-run is still writing when the reader goes."""
    endpoints = [
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "WorkloadEndpoint",
            "metadata": {"name": f"node--1-k8s-pod{i}-eth0", "namespace": "default"},
            "spec": {
                "orchestrator": "k8s",
                "node": "node-1",
                "pod": f"pod{i}",
                "endpoint": "eth0",
                "interfaceName": f"cali{i:011d}",
                "ipNetworks": [f"10.0.{i // 250}.{i % 250 + 1}/32"],
                "profiles": ["kns.default"],
            },
        }
        for i in range(2000)
    ]
    (tmp_path / "endpoints.json").write_text(json.dumps(endpoints))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyfelix",
            "dry-run",
            "--hostname",
            "node-1",
            "--format",
            "json",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.read(10) == b'{\n  "confi'
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in errors
    assert "BrokenPipeError" not in errors
