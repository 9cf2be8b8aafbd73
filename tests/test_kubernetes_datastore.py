"""The Kubernetes API datastore against a real kube-apiserver (tests/kube_server.py).

The syncer lists and watches every kind Felix's syncer watches; the API server is restarted
over a compacted etcd so the watches come back expired (410) and the relist must send
nothing that did not change; a token without RBAC rights gets one clear line per kind; the
dry-run computes from the API exactly what it computes from a dump of the same objects; and
``pyfelix run`` on the API follows pods as they are created.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from functools import partial
from typing import Any

import attrs
import pytest
import trio
import yaml

from pyfelix import model
from pyfelix.datastore.kubernetes import KubeClient, KubeConfig
from pyfelix.resources.k8s_conversion import veth_name
from pyfelix.resources.meta import load_document
from pyfelix.resources.skipped import unread_kind
from pyfelix.status import KubeNodeStore, WireguardKeyUpdater
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.kubernetes import (
    WATCHED,
    KubernetesSyncer,
    decode_object,
    listed_document,
    object_source,
    page_reader,
)
from pyfelix.syncer.plain_namespaces import plain_entry
from pyfelix.syncer.processors import convert
from tests.conftest import REPO
from tests.etcd_server import EtcdServer
from tests.kube_server import VIEWER_TOKEN, KubeServer, collection_path, kube_server

LIVE = REPO / "tests" / "data" / "live-cluster"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    with kube_server(tmp_path_factory.mktemp("kube")) as server:
        yield server


class Recorder:
    def __init__(self) -> None:
        self.updates: list[Update] = []
        self.statuses: list[SyncStatus] = []

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.updates.extend(updates)

    def on_status(self, status: SyncStatus) -> None:
        self.statuses.append(status)

    def present(self) -> dict[object, object]:
        """Every key's last value, deletions removed."""
        state: dict[object, object] = {}
        for update in self.updates:
            if update.value is None:
                state.pop(update.key, None)
            else:
                state[update.key] = update.value
        return state


def _pod(
    name: str, namespace: str, address: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": {"cni.projectcalico.org/podIP": f"{address}/32"},
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "agnhost"}]},
    }


def wep_key(namespace: str, pod: str) -> model.WorkloadEndpointKey:
    return model.WorkloadEndpointKey("node-1", "k8s", f"{namespace}/{pod}", "eth0")


@contextlib.asynccontextmanager
async def in_sync(
    kube: KubeServer, config: KubeConfig | None = None
) -> AsyncIterator[tuple[KubernetesSyncer, Recorder]]:
    """A KDD syncer on ``kube`` (the admin's kubeconfig by default), once it is in sync;
    stopped on the way out."""
    recorder = Recorder()
    config = config or KubeConfig.from_kubeconfig(kube.kubeconfig())
    async with KubeClient(config) as client, trio.open_nursery() as nursery:
        syncer = KubernetesSyncer(client, recorder)
        await nursery.start(syncer.run)
        await _until(lambda: SyncStatus.IN_SYNC in recorder.statuses)
        yield syncer, recorder
        nursery.cancel_scope.cancel()


async def _until(check: Any, seconds: float = 10.0) -> None:
    with trio.fail_after(seconds):
        while not check():
            await trio.sleep(0.05)


def _in_thread(call: Any) -> Any:
    return trio.to_thread.run_sync(call)


async def test_the_syncer_lists_then_follows_every_kind(kube: KubeServer) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "follow"}})
    kube.apply(_pod("a", "follow", "10.1.0.5", {"app": "web"}))
    async with in_sync(kube) as (syncer, recorder):
        # One IN_SYNC, only once every kind has been listed, with the listed pod before it.
        assert recorder.statuses.count(SyncStatus.IN_SYNC) == 1
        assert wep_key("follow", "a") in recorder.present()
        assert syncer.resyncs == len(syncer.watched)
        # The profile Calico's backend always holds (kube-controllers' host endpoints use it).
        default_allow = recorder.present()[model.ProfileRulesKey("projectcalico-default-allow")]
        assert [r.action for r in default_allow.inbound_rules] == ["allow"]  # type: ignore[attr-defined]
        assert [r.action for r in default_allow.outbound_rules] == ["allow"]  # type: ignore[attr-defined]
        policy = {
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "GlobalNetworkPolicy",
            "metadata": {"name": "follow-deny"},
            "spec": {"selector": "app == 'web'", "types": ["Ingress"]},
        }
        await _in_thread(lambda: kube.apply(policy))
        key = model.PolicyKey("follow-deny", "", "GlobalNetworkPolicy", "default")
        await _until(lambda: key in recorder.present())
        await _in_thread(
            lambda: kube.request("DELETE", "/api/v1/namespaces/follow/pods/a?gracePeriodSeconds=0")
        )
        await _until(lambda: wep_key("follow", "a") not in recorder.present())
        await _in_thread(lambda: kube.delete(policy))
        await _until(lambda: key not in recorder.present())
        # Calico's staged twin of a Kubernetes NetworkPolicy, as its custom resource.
        staged = {
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "StagedKubernetesNetworkPolicy",
            "metadata": {"name": "follow-staged", "namespace": "follow"},
            "spec": {"stagedAction": "Set", "podSelector": {}, "policyTypes": ["Ingress"]},
        }
        await _in_thread(lambda: kube.apply(staged))
        staged_key = model.PolicyKey(
            "follow-staged", "follow", "StagedKubernetesNetworkPolicy", "default"
        )
        await _until(lambda: staged_key in recorder.present())


def _etcd_compact(kube: KubeServer) -> None:
    """Compact etcd to its current revision, through its JSON gateway."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{kube.etcd.url}/v3/{path}", json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    revision = post("kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
    post("kv/compaction", {"revision": revision, "physical": True})


async def test_an_expired_watch_relists_and_flaps_nothing(kube: KubeServer) -> None:
    """The API server restarts over a compacted etcd: each watch's version is gone (410), so
    the syncer lists again; what did not change sends nothing, what changed meanwhile is
    sent, and nothing is deleted while the API server is away."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "expiry"}})
    for index in range(3):
        kube.apply(_pod(f"p{index}", "expiry", f"10.2.0.{index + 2}"))
    async with in_sync(kube) as (syncer, recorder):
        before = recorder.present()
        resyncs = syncer.resyncs
        sent = len(recorder.updates)
        await _in_thread(kube.stop)
        await trio.sleep(1.0)
        assert len(recorder.updates) == sent  # nothing deleted while it is away
        await _in_thread(lambda: _etcd_compact(kube))
        await _in_thread(kube.start)
        await _until(lambda: syncer.resyncs >= resyncs + len(syncer.watched), seconds=60)
        assert recorder.updates[sent:] == []
        assert recorder.present() == before
        assert recorder.statuses.count(SyncStatus.IN_SYNC) == 1
        await _in_thread(lambda: kube.apply(_pod("late", "expiry", "10.2.0.9")))
        await _until(lambda: wep_key("expiry", "late") in recorder.present())


async def test_a_token_without_rbac_rights_is_named_once_per_kind(
    kube: KubeServer, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    config = KubeConfig.from_kubeconfig(kube.kubeconfig(VIEWER_TOKEN, "viewer-kubeconfig"))
    caplog.set_level(logging.ERROR, logger="pyfelix.syncer.kubernetes")
    async with KubeClient(config) as client, trio.open_nursery() as nursery:
        syncer = KubernetesSyncer(client, recorder)
        await nursery.start(syncer.run)
        await trio.sleep(3.0)  # several retries of each kind
        nursery.cancel_scope.cancel()
    refusals = [r.getMessage() for r in caplog.records if "RBAC" in r.getMessage()]
    pods = [line for line in refusals if "read pods " in line]
    assert len(pods) == 1
    assert pods[0].startswith(
        "the API server refuses to let pyfelix read pods (RBAC): grant list and watch on it"
    )
    assert 'User "viewer" cannot list resource "pods"' in pods[0]
    assert len(refusals) == len(syncer.watched)
    assert SyncStatus.IN_SYNC not in recorder.statuses
    # Nothing read from the API: only the profile every Calico backend holds.
    assert all("projectcalico-default-allow" in str(u.key) for u in recorder.updates)


def _created(kube: KubeServer, doc: dict[str, Any]) -> None:
    """``doc`` as a dump holds it, created through the API: the server's own metadata left
    out, and the status (which a create ignores) written through its subresource."""
    metadata = {
        k: v
        for k, v in doc["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp", "generation")
        and k not in ("ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds")
    }
    body = {k: v for k, v in doc.items() if k != "status"} | {"metadata": metadata}
    try:
        kube.apply(body)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # kube-system is there already
            raise
    if "status" in doc and doc["kind"] in ("Pod", "Node"):
        path = f"{collection_path(doc)}/{metadata['name']}/status"
        kube.request("PATCH", path, {"status": doc["status"]})


def _dry_run(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyfelix",
            "dry-run",
            "--hostname",
            "worker-1",
            "--format",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    return view


def test_the_view_from_the_api_is_the_view_from_its_dump_and_from_etcd(
    kube: KubeServer, etcd: EtcdServer
) -> None:
    """The live-cluster dump, created object by object through the API server, and written
    into etcd with ``pyfelix datastore apply``: the dry-run from ``kubernetes://`` and from
    ``etcd://`` computes exactly what it computes from the files (the deleting pod aside: a
    create cannot set a deletion timestamp, so it is left out of all three)."""
    documents = []
    for path in sorted(LIVE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            documents.extend(doc["items"])
    kept = [
        d for d in documents if unread_kind(d) is None and "deletionTimestamp" not in d["metadata"]
    ]
    order = {"Namespace": 0, "Tier": 1}
    for doc in sorted(kept, key=lambda d: order.get(d["kind"], 2)):
        _created(kube, doc)
    dump = kube.directory / "dump.yaml"
    dump.write_text(yaml.safe_dump_all(kept))
    from_api = _dry_run(f"kubernetes://{kube.kubeconfig()}")
    from_files = _dry_run(str(dump))
    assert from_api == from_files
    apply = ("datastore", "--datastore", etcd.etcd_url, "apply", "-f", str(dump))
    applied = subprocess.run(
        [sys.executable, "-m", "pyfelix", *apply],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    assert _dry_run(etcd.etcd_url) == from_files
    assert len(from_api["workload_endpoints"]) == 2


def test_objects_as_the_api_lists_them_take_the_direct_path(kube: KubeServer) -> None:
    """A pod as Calico's CNI plugin leaves it, its namespace and its service account, as
    the API server lists them (no kind, a generation, managedFields): the direct path takes
    each, and gives what decoding the object whole gives, its managedFields kept."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "listed"}})
    account = {"name": "web", "namespace": "listed", "labels": {"team": "a"}}
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": account})
    pod = _pod("web-0", "listed", "10.4.0.9", {"app": "web"})
    pod["metadata"]["annotations"]["cni.projectcalico.org/containerID"] = "0f" * 32
    pod["spec"]["serviceAccountName"] = "web"
    pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 8080}]
    kube.apply(pod)
    kube.request(
        "PATCH",
        "/api/v1/namespaces/listed/pods/web-0/status",
        {"status": {"phase": "Running", "podIP": "10.4.0.9", "podIPs": [{"ip": "10.4.0.9"}]}},
    )
    watched = {w.kind: w for w in WATCHED}
    for kind, path in (
        ("Pod", "/api/v1/namespaces/listed/pods"),
        ("Namespace", "/api/v1/namespaces?fieldSelector=metadata.name%3Dlisted"),
        ("ServiceAccount", "/api/v1/namespaces/listed/serviceaccounts"),
    ):
        (item,) = kube.request("GET", path)["items"]
        assert "managedFields" in item["metadata"], kind
        entry = plain_entry(listed_document(watched[kind], item))
        assert entry is not None, kind
        whole = {"apiVersion": watched[kind].api_version, "kind": kind, **item}
        resource, problems = load_document(whole, "<api>")
        assert resource is not None, problems
        assert [(key, _without_origin(value)) for key, value in convert(resource)] == list(entry[1])
        assert decode_object(watched[kind], item, "<api>") == entry[1]
        # The syncer's compiled reader of a listing's pages reads the object as it is
        # listed: the same entry, under the same source.
        read = page_reader(watched[kind])
        assert read is not None
        body = kube.request("GET", path)
        page = read(json.dumps(body).encode())
        assert page is not None
        ((version, fields),) = page["items"]
        assert version == body["items"][0]["metadata"]["resourceVersion"]
        assert plain_entry(fields) == plain_entry(listed_document(watched[kind], body["items"][0]))
        assert object_source(watched[kind], (version, fields)) == object_source(
            watched[kind], body["items"][0]
        )


def _without_origin(value: object) -> object:
    return None if value is None else attrs.evolve(value, origin=None)  # type: ignore[misc]


def test_the_agent_follows_pods_created_through_the_api(kube: KubeServer) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "agent"}})
    kube.apply(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "deny", "namespace": "agent"},
            "spec": {"podSelector": {}},
        }
    )
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyfelix",
            "run",
            "--dry-run",
            "--hostname",
            "node-1",
            "--datastore",
            f"kubernetes://{kube.kubeconfig()}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    lines: queue.Queue[str] = queue.Queue()
    output = agent.stdout
    assert output is not None

    def read() -> None:
        for line in output:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    chain = "cali-tw-" + veth_name("agent", "late")
    seen: list[str] = []

    def wait_for(text: str) -> None:
        deadline = time.monotonic() + 30
        while not any(line.startswith(text) or text in line for line in seen):
            assert time.monotonic() < deadline, f"no {text!r} in the agent's output"
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=0.5))

    try:
        wait_for("InSync")
        kube.apply(_pod("late", "agent", "10.3.0.7"))
        wait_for(f"chain {chain}")
        wait_for("cali-pi-knp/agent/deny")
    finally:
        agent.terminate()
        agent.communicate(timeout=30)


async def test_a_thousand_pods_churned_arrive_and_leave(kube: KubeServer) -> None:
    """1,000 pods created and then deleted as fast as eight writers go: the syncer ends with
    each one's endpoint, then with none, and nothing else changed on the way."""
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "churn"}})
    names = [f"p{i}" for i in range(1000)]
    async with in_sync(kube) as (_, recorder):
        before = {k: v for k, v in recorder.present().items() if not _churned(k)}

        def create(name: str) -> None:
            index = int(name[1:])
            kube.apply(_pod(name, "churn", f"10.9.{index >> 8}.{index & 255}"))

        def delete(name: str) -> None:
            kube.request("DELETE", f"/api/v1/namespaces/churn/pods/{name}?gracePeriodSeconds=0")

        await _in_thread(lambda: _in_parallel(create, names))
        await _until(lambda: sum(map(_churned, recorder.present())) == 1000, seconds=60)
        await _in_thread(lambda: _in_parallel(delete, names))
        await _until(lambda: sum(map(_churned, recorder.present())) == 0, seconds=60)
        assert {k: v for k, v in recorder.present().items() if not _churned(k)} == before


def _churned(key: object) -> bool:
    return isinstance(key, model.WorkloadEndpointKey) and key.workload.startswith("churn/")


def _in_parallel(call: Any, items: Sequence[str]) -> None:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(call, items))


async def test_the_wireguard_key_is_the_only_thing_written_back(kube: KubeServer) -> None:
    """As Felix in KDD mode: the node's WireGuard public key goes into its v1 Node's
    annotation, by a patch that leaves every other field as it was; an emptied key removes
    the annotation."""
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "wg-node",
                "labels": {"kubernetes.io/hostname": "wg-node"},
                "annotations": {"projectcalico.org/IPv4Address": "192.168.9.9/24"},
            },
        }
    )
    before = kube.request("GET", "/api/v1/nodes/wg-node")
    key = "jlkVyQYooZYzI2wFfNhSZez5eWh44yfq1wKVjLvSXgY="
    config = KubeConfig.from_kubeconfig(kube.kubeconfig())
    async with KubeClient(config) as client, trio.open_nursery() as nursery:
        updater = WireguardKeyUpdater(KubeNodeStore(client), "wg-node")
        await nursery.start(updater.run)
        updater.on_key(key)

        def annotations() -> dict[str, str]:
            got: dict[str, str] = kube.request("GET", "/api/v1/nodes/wg-node")["metadata"][
                "annotations"
            ]
            return got

        with trio.fail_after(10):
            while annotations().get("projectcalico.org/WireguardPublicKey") != key:
                await trio.sleep(0.1)
        after = kube.request("GET", "/api/v1/nodes/wg-node")
        assert annotations() == {
            "projectcalico.org/IPv4Address": "192.168.9.9/24",
            "projectcalico.org/WireguardPublicKey": key,
        }
        assert after["metadata"]["labels"] == before["metadata"]["labels"]
        assert after.get("spec") == before.get("spec")
        updater.on_key("")
        with trio.fail_after(10):
            while "projectcalico.org/WireguardPublicKey" in annotations():
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()


def _datastore(kube: KubeServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``pyfelix datastore`` with DATASTORE_TYPE=kubernetes and KUBECONFIG, as calicoctl's."""
    env = {**os.environ, "DATASTORE_TYPE": "kubernetes", "KUBECONFIG": str(kube.kubeconfig())}
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", "datastore", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=60,
    )


def test_datastore_get_reads_the_api_as_calicoctl_does_in_kdd_mode(kube: KubeServer) -> None:
    """``pyfelix datastore get`` with DATASTORE_TYPE=kubernetes and KUBECONFIG, as
    calicoctl's: Calico's custom resources shown as their v3 objects."""
    kube.apply(
        {
            "apiVersion": "crd.projectcalico.org/v1",
            "kind": "GlobalNetworkPolicy",
            "metadata": {
                "name": "default.shown",
                "annotations": {"projectcalico.org/metadata": '{"labels": {"team": "a"}}'},
            },
            "spec": {"selector": "all()", "tier": "default", "order": 5},
        }
    )

    datastore = partial(_datastore, kube)

    listed = datastore("get", "gnp", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["kind"] == "GlobalNetworkPolicyList"
    shown = next(i for i in data["items"] if i["metadata"]["name"] == "shown")
    assert shown["apiVersion"] == "projectcalico.org/v3"
    assert shown["metadata"]["labels"] == {"team": "a"}
    assert shown["spec"]["order"] == 5
    one = datastore("get", "globalnetworkpolicy", "default.shown", "-o", "json")
    assert json.loads(one.stdout)["metadata"]["name"] == "shown"
    missing = datastore("get", "gnp", "nothing")
    assert missing.returncode == 1
    assert "resource does not exist: GlobalNetworkPolicy(nothing)" in missing.stderr


def test_datastore_writes_calicos_kinds_as_custom_resources(kube: KubeServer) -> None:
    """``pyfelix datastore apply/create/replace/delete`` on the Kubernetes API, as calicoctl
    in KDD mode: Calico's kinds become crd.projectcalico.org/v1 objects (labels and
    annotations in Calico's metadata annotation) that read back as the v3 objects written;
    create refuses an existing one, replace a missing one, delete a missing one; a Kubernetes
    kind is refused (kubectl writes it)."""
    manifest = kube.directory / "write.yaml"

    datastore = partial(_datastore, kube)

    def written(order: int) -> None:
        manifest.write_text(
            "apiVersion: projectcalico.org/v3\nkind: NetworkPolicy\n"
            "metadata: {name: written, namespace: default, labels: {team: b},"
            " annotations: {note: kept}}\n"
            f"spec: {{selector: all(), order: {order}, ingress: [{{action: Allow}}]}}\n"
        )

    written(7)
    created = datastore("create", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    assert "Successfully created 1 resource(s)" in created.stdout
    again = datastore("create", "-f", str(manifest))
    assert again.returncode == 1
    assert "resource already exists" in again.stderr
    raw = kube.request(
        "GET", "/apis/crd.projectcalico.org/v1/namespaces/default/networkpolicies/written"
    )
    stored = json.loads(raw["metadata"]["annotations"]["projectcalico.org/metadata"])
    assert stored == {"annotations": {"note": "kept"}, "labels": {"team": "b"}}
    written(9)
    assert datastore("apply", "-f", str(manifest)).returncode == 0
    shown = json.loads(datastore("get", "networkpolicy", "written", "-o", "json").stdout)
    assert shown["apiVersion"] == "projectcalico.org/v3"
    assert shown["metadata"]["labels"] == {"team": "b"}
    assert shown["metadata"]["annotations"] == {"note": "kept"}
    assert shown["spec"]["order"] == 9
    written(11)
    assert datastore("replace", "-f", str(manifest)).returncode == 0
    shown = json.loads(datastore("get", "networkpolicy", "written", "-o", "json").stdout)
    assert shown["spec"]["order"] == 11
    deleted = datastore("delete", "networkpolicy", "written", "-n", "default")
    assert deleted.returncode == 0, deleted.stderr
    gone = datastore("delete", "networkpolicy", "written", "-n", "default")
    assert gone.returncode == 1
    assert "resource does not exist" in gone.stderr
    missing = datastore("replace", "-f", str(manifest))
    assert missing.returncode == 1
    assert "resource does not exist" in missing.stderr
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: nope}\n")
    refused = datastore("apply", "-f", str(manifest))
    assert refused.returncode == 1
    assert "write it with kubectl" in refused.stderr
