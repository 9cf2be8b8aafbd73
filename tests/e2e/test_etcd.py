"""The agent on etcd: the datastore lost and back without the kernel changing, endpoint status
written to etcd."""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from pyfelix.status import status_prefix
from tests.e2e.cluster import (
    CLIENT_IP,
    HOST_ENDPOINT,
    MANIFESTS,
    POLICY,
    SERVER_IP,
    Cluster,
)
from tests.etcd_server import EtcdServer
from tests.netns import eventually, run_in

pytestmark = pytest.mark.netns


def test_etcd_datastore_lost_and_back(tmp_path: Path) -> None:
    """With etcd as the datastore (inside the node namespace, written with ``pyfelix
    datastore apply``): while etcd is down the kernel stays as it was and the agent keeps
    running; when etcd returns, a policy edit made meanwhile takes effect."""
    (tmp_path / "base.yaml").write_text(MANIFESTS)
    (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "8080"))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path / "unused")
        cluster.add_workload("calisrv", SERVER_IP, [8080, 9090])
        cluster.add_workload("calicli", CLIENT_IP)
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=cluster.node)
        etcd.start()
        stack.callback(etcd.stop)

        def apply(path: Path) -> None:
            run_in(
                cluster.node,
                sys.executable,
                "-m",
                "pyfelix",
                "datastore",
                "--datastore",
                etcd.etcd_url,
                "apply",
                "-f",
                str(path),
            )

        apply(tmp_path / "base.yaml")
        apply(tmp_path / "policy.yaml")
        cluster.start_agent(etcd.etcd_url)
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 8080)), "never programmed"
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)

        etcd.stop()
        time.sleep(3)  # three refresh intervals without a datastore
        assert cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 9090)
        assert cluster.agent is not None
        assert cluster.agent.poll() is None

        etcd.start()
        (tmp_path / "policy.yaml").write_text(POLICY.replace("PORT", "9090"))
        apply(tmp_path / "policy.yaml")
        assert eventually(lambda: cluster.connects(CLIENT_IP, SERVER_IP, 9090), timeout=20)
        assert not cluster.connects(CLIENT_IP, SERVER_IP, 8080)
        assert cluster.agent.poll() is None


def test_endpoint_status_reported_to_etcd(tmp_path: Path) -> None:
    """With EndpointReportingEnabled, workload and host endpoint status land in etcd under
    /calico/felix/v2/: up, down when the interface goes down, error when a host endpoint's
    interface does not exist or another endpoint governs it, and the key goes when the
    endpoint does."""
    interval = "  reportingInterval: 1s\n"
    settings = "  endpointReportingEnabled: true\n  reportingTTL: 45s\n"
    manifests = MANIFESTS.replace(interval, interval + settings)
    missing = HOST_ENDPOINT.replace("node-uplink", "node-spare").replace("eth0", "eth9")
    # Matches eth0 by address, but node-uplink names eth0 and comes first by name.
    by_address = HOST_ENDPOINT.replace("node-uplink", "z-by-address")
    by_address = by_address.replace("interfaceName: eth0, ", "")
    (tmp_path / "base.yaml").write_text(manifests + HOST_ENDPOINT + by_address)
    (tmp_path / "spare.yaml").write_text(missing)
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path / "unused")
        cluster.add_workload("calisrv", SERVER_IP, [8080])
        cluster.add_workload("calicli", CLIENT_IP)
        (tmp_path / "etcd").mkdir()
        etcd = EtcdServer(str(tmp_path / "etcd"), netns=cluster.node)
        etcd.start()
        stack.callback(etcd.stop)

        def datastore(*args: str) -> None:
            pyfelix = (sys.executable, "-m", "pyfelix", "datastore")
            run_in(cluster.node, *pyfelix, "--datastore", etcd.etcd_url, *args)

        def statuses() -> dict[str, str]:
            """Status per endpoint: host endpoints by name, workloads by pod."""
            endpoints = etcd.etcd_url.replace("etcd://", "--endpoints=http://")
            prefix = status_prefix("node") + "/"
            lines = run_in(cluster.node, "etcdctl", endpoints, "get", "--prefix", prefix)
            out = lines.stdout.splitlines()
            found = {}
            for key, value in zip(out[0::2], out[1::2], strict=True):
                if "/workload/" in key:
                    name = "server" if "server" in key else "client"
                elif "/endpoint/" in key:
                    name = key.rsplit("/", 1)[-1]
                else:
                    continue
                found[name] = json.loads(value)["status"]
            return found

        datastore("apply", "-f", str(tmp_path / "base.yaml"))
        datastore("apply", "-f", str(tmp_path / "spare.yaml"))
        cluster.start_agent(etcd.etcd_url)
        expected = {"node-uplink": "up", "node-spare": "error", "server": "up", "client": "up"}
        expected["z-by-address"] = "error"
        assert eventually(lambda: statuses() == expected, timeout=20), statuses()

        def process_status() -> dict[str, object]:
            endpoints = etcd.etcd_url.replace("etcd://", "--endpoints=http://")
            key = status_prefix("node") + "/status"
            out = run_in(cluster.node, "etcdctl", endpoints, "get", "--print-value-only", key)
            return dict(json.loads(out.stdout)) if out.stdout.strip() else {}

        # Process status too, every ReportingInterval (1 s here): the uptime moves on.
        first = process_status()
        assert first
        assert eventually(lambda: process_status().get("uptime") != first["uptime"], timeout=5)

        # Under a lease of ReportingTTLSecs (45 s here, Felix's default is 90 s).
        endpoints = etcd.etcd_url.replace("etcd://", "--endpoints=http://")
        key = status_prefix("node") + "/status"
        got = run_in(cluster.node, "etcdctl", endpoints, "get", key, "-w", "json").stdout
        lease = json.loads(got)["kvs"][0]["lease"]
        ttl = run_in(cluster.node, "etcdctl", endpoints, "lease", "timetolive", f"{lease:x}")
        assert "granted with TTL(45s)" in ttl.stdout, ttl.stdout

        run_in(cluster.node, "ip", "link", "set", "eth0", "down")
        assert eventually(lambda: statuses().get("node-uplink") == "down"), statuses()
        run_in(cluster.node, "ip", "link", "set", "eth0", "up")
        assert eventually(lambda: statuses().get("node-uplink") == "up"), statuses()

        datastore("delete", "-f", str(tmp_path / "spare.yaml"))
        assert eventually(lambda: "node-spare" not in statuses()), statuses()
        assert statuses()["server"] == "up"

        # With node-uplink gone, the endpoint expecting eth0's address governs eth0.
        (tmp_path / "uplink.yaml").write_text(HOST_ENDPOINT)
        datastore("delete", "-f", str(tmp_path / "uplink.yaml"))
        assert eventually(lambda: statuses().get("z-by-address") == "up"), statuses()
        # Written one per EndpointReportingDelaySecs (1 s, Felix's default), in order.
        assert eventually(lambda: "node-uplink" not in statuses()), statuses()
