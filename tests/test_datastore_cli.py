"""``pyfelix datastore`` against a real etcd, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.etcd_server import EtcdServer

TIER = """\
apiVersion: projectcalico.org/v3
kind: Tier
metadata:
  name: security
spec:
  order: {order}
"""


def datastore(etcd: EtcdServer, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", "datastore", "--datastore", etcd.etcd_url, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        input=stdin,
    )


def test_apply_get_replace_delete(etcd: EtcdServer, tmp_path: Path) -> None:
    """The calicoctl cycle: apply, get (one and list), replace with revision check, delete."""
    manifest = tmp_path / "tier.yaml"
    manifest.write_text(TIER.format(order=100))
    applied = datastore(etcd, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == "Successfully applied 1 resource(s)\n"
    got = yaml.safe_load(datastore(etcd, "get", "tier", "security").stdout)
    assert got["spec"] == {"order": 100}
    assert got["metadata"]["uid"]
    assert got["metadata"]["creationTimestamp"]
    revision = got["metadata"]["resourceVersion"]

    manifest.write_text(
        TIER.format(order=200).replace("name: security", "name: security\n  resourceVersion: '1'")
    )
    conflict = datastore(etcd, "replace", "-f", str(manifest))
    assert conflict.returncode == 1
    assert "update conflict: Tier(security)" in conflict.stderr

    manifest.write_text(
        TIER.format(order=200).replace(
            "name: security", f"name: security\n  resourceVersion: '{revision}'"
        )
    )
    assert datastore(etcd, "replace", "-f", str(manifest)).returncode == 0
    listed = yaml.safe_load(datastore(etcd, "list", "tiers").stdout)
    assert listed["kind"] == "TierList"
    assert [i["spec"]["order"] for i in listed["items"]] == [200]
    assert listed["items"][0]["metadata"]["uid"] == got["metadata"]["uid"]

    deleted = datastore(etcd, "delete", "tier", "security")
    assert (deleted.returncode, deleted.stdout) == (0, "Successfully deleted 1 resource(s)\n")
    missing = datastore(etcd, "get", "tier", "security")
    assert missing.returncode == 1
    assert "resource does not exist: Tier(security)" in missing.stderr


def test_create_conflict_and_missing_replace(etcd: EtcdServer) -> None:
    """create refuses an existing resource; replace and delete refuse a missing one."""
    assert datastore(etcd, "create", "-f", "-", stdin=TIER.format(order=1)).returncode == 0
    again = datastore(etcd, "create", "-f", "-", stdin=TIER.format(order=1))
    assert again.returncode == 1
    assert "resource already exists: Tier(security)" in again.stderr
    other = TIER.format(order=1).replace("security", "other")
    replaced = datastore(etcd, "replace", "-f", "-", stdin=other)
    assert "resource does not exist: Tier(other)" in replaced.stderr
    assert "resource does not exist" in datastore(etcd, "delete", "gnp", "nope").stderr


def test_invalid_input_writes_nothing(etcd: EtcdServer) -> None:
    """Validation runs before any write: one bad resource means nothing is written."""
    text = TIER.format(order=1) + "---\n" + TIER.format(order='"x"').replace("security", "bad")
    result = datastore(etcd, "apply", "-f", "-", stdin=text)
    assert result.returncode == 1
    assert "spec.order" in result.stdout
    assert "nothing was written" in result.stderr
    assert datastore(etcd, "get", "tier", "security").returncode == 1


def test_bundled_example_round_trip(etcd: EtcdServer) -> None:
    """The whole example applies; namespaced kinds list per namespace; JSON output works."""
    result = datastore(etcd, "apply", "-f", "examples/")
    assert result.returncode == 0, result.stdout + result.stderr
    weps = yaml.safe_load(datastore(etcd, "get", "wep", "-n", "shop").stdout)
    assert len(weps["items"]) == 3
    everywhere = yaml.safe_load(datastore(etcd, "get", "workloadendpoints", "-A").stdout)
    assert len(everywhere["items"]) == 4
    blocks = yaml.safe_load(
        datastore(etcd, "get", "ipamblock", "10-65-0-0-26", "-o", "json").stdout
    )
    assert blocks["spec"]["affinity"] == "host:node-a"
    two = yaml.safe_load(
        datastore(etcd, "get", "ippool", "default-ipv4-ippool", "legacy-pool").stdout
    )
    assert [p["metadata"]["name"] for p in two] == ["default-ipv4-ippool", "legacy-pool"]


def test_no_datastore_configured() -> None:
    """Without --datastore or ETCD_ENDPOINTS the command says what to do."""
    result = subprocess.run(
        [sys.executable, "-m", "pyfelix", "datastore", "list", "tiers"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert "--datastore etcd://HOST:PORT" in result.stderr


KUBERNETES_POLICY = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{namespaceSelector: {}}], ports: [{port: 80}]}]
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec: {selector: all()}
"""


def test_kubernetes_network_policy_beside_calicos(etcd: EtcdServer, tmp_path: Path) -> None:
    """Kubernetes' NetworkPolicy is stored apart from Calico's of the same name and read back
    by kubectl's full name; the list is Kubernetes' NetworkPolicyList."""
    manifest = tmp_path / "policies.yaml"
    manifest.write_text(KUBERNETES_POLICY)
    applied = datastore(etcd, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    shown = datastore(etcd, "get", "networkpolicies.networking.k8s.io", "web", "-n", "prod")
    assert shown.returncode == 0, shown.stderr
    got = yaml.safe_load(shown.stdout)
    assert (got["apiVersion"], got["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert got["spec"]["ingress"] == [
        {"from": [{"namespaceSelector": {}}], "ports": [{"port": 80}]}
    ]
    calico = yaml.safe_load(datastore(etcd, "get", "networkpolicy", "web", "-n", "prod").stdout)
    assert calico["apiVersion"] == "projectcalico.org/v3"
    listed = yaml.safe_load(datastore(etcd, "list", "knp", "-n", "prod").stdout)
    assert (listed["kind"], len(listed["items"])) == ("NetworkPolicyList", 1)
    assert datastore(etcd, "delete", "knp", "web", "-n", "prod").returncode == 0
    assert datastore(etcd, "get", "networkpolicy", "web", "-n", "prod").returncode == 0
