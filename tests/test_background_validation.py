"""Validation on the second core finds what validating the whole load finds, in the same
order, and a worker that fails changes nothing but the time."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
from _pytest.capture import CaptureResult

from pyfelix import cli, dryrun
from pyfelix.resources import json_items, load_paths
from pyfelix.resources.loader import LoadResult, load_file
from pyfelix.syncer.plain_namespaces import (
    plain_digest,
    plain_entry,
    plain_identity,
    plain_text_digest,
)
from pyfelix.syncer.plain_policies import policy_fields
from pyfelix.validation import loading, validate_loaded

WEP = """apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {{name: node-k8s-pod{i}-eth0, namespace: default}}
spec:
  node: node
  orchestrator: k8s
  pod: pod{i}
  endpoint: eth0
  interfaceName: cali{i}
  ipNetworks: [{net}]
{spoof}"""
SPOOFING_ANY = """apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {workloadSourceSpoofing: Any}
"""


def _policy(name: str, selector: str) -> dict[str, object]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "GlobalNetworkPolicy",
        "metadata": {"name": name},
        "spec": {"selector": selector, "order": 1},
    }


def _cluster(directory: Path, spoofing_any: bool) -> Path:
    directory.mkdir()
    (directory / "a.yaml").write_text(
        "---\n".join(
            WEP.format(
                i=i, net=net, spoof=f"  allowSpoofedSourcePrefixes: {spoof}\n" if spoof else ""
            )
            for i, net, spoof in [
                (1, "10.0.0.1/32", ""),
                (2, "10.0.0.300/32", "[]"),
                (3, "10.0.0.3/32", "[192.0.2.0/24]"),
                (4, "10.0.0.4/24", "[bad]"),
            ]
        )
    )
    policies = [_policy("ok", "all()"), _policy("bad", "app == "), _policy("Upper", "all()")]
    (directory / "b.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": policies})
    )
    # Defined again in another file: reported as a duplicate, its own problems not at all.
    (directory / "c.json").write_text(json.dumps([_policy("bad", "also bad ==")]))
    (directory / "d.yaml").write_text("kind: [unclosed\n")
    # Endpoints defined twice: a plain one again with named ports, and the one with spoofing
    # prefixes again as a plain one (the dry-run's direct path takes plain ones).
    again = WEP.format(i=1, net="10.0.0.1/32", spoof="").replace(
        "  endpoint: eth0\n", "  endpoint: eth0\n  ports: [{name: http, protocol: TCP, port: 80}]\n"
    )
    plain_again = WEP.format(i=3, net="10.0.0.3/32", spoof="")
    (directory / "f.yaml").write_text(again + "---\n" + plain_again)
    if spoofing_any:
        (directory / "e.yaml").write_text(SPOOFING_ANY)
    return directory


@pytest.mark.parametrize("spoofing_any", [False, True])
def test_streaming_validation_equals_validate_loaded(tmp_path: Path, spoofing_any: bool) -> None:
    directory = _cluster(tmp_path / "cluster", spoofing_any)
    paths = [directory, tmp_path / "missing.yaml"]
    expected = validate_loaded(load_paths(paths))
    assert len(expected) >= 7
    assert any("duplicate" in p.message for p in expected)
    assert any("workloadSourceSpoofing" in p.message for p in expected) != spoofing_any
    assert loading.validate_paths(paths) == expected


def test_the_direct_path_finds_the_same_problems(tmp_path: Path) -> None:
    """Plain endpoints taken straight to the model (the dry-run's path) change no problem:
    duplicates between them and resources are found, and named, as before."""
    directory = _cluster(tmp_path / "cluster", False)
    expected = validate_loaded(load_paths([directory]))
    direct = load_paths([directory], direct=plain_entry)
    assert [d.key[2] for d in direct.direct] == ["node-k8s-pod1-eth0"]
    assert sum("duplicate" in p.message for p in expected) == 3
    assert validate_loaded(direct) == expected
    assert loading.validate_paths([directory], direct=plain_entry) == expected
    # The validating child's identity-only form.
    assert loading.validate_paths([directory], direct=plain_identity) == expected


def test_worker_and_its_failure_give_the_same_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = _cluster(tmp_path / "cluster", False)
    result = load_paths([directory])
    expected = validate_loaded(result)
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    worker = loading.BackgroundValidation([directory])
    assert worker.pid, "no worker started"
    assert worker.problems(result) == expected

    def broken(paths: object) -> object:
        raise RuntimeError("worker broke")

    monkeypatch.setattr(loading, "validate_paths", broken)
    worker = loading.BackgroundValidation([directory])
    assert worker.pid
    assert worker.problems(result) == expected


def test_dry_run_prints_problems_not_the_speculative_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the worker on, an invalid input (whose computation may even fail) is refused with
    its problems, exactly as without it."""
    directory = _cluster(tmp_path / "cluster", False)
    code = cli.main(["dry-run", "--hostname", "node", str(directory)])
    without = capsys.readouterr()
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    assert cli.main(["dry-run", "--hostname", "node", str(directory)]) == code == 1
    with_worker = capsys.readouterr()
    assert with_worker.out == without.out == ""
    assert with_worker.err == without.err
    assert "problem(s) found" in with_worker.err
    for name in ("a.yaml", "b.json", "c.json", "d.yaml"):
        (directory / name).unlink()
    (directory / "ok.json").write_text(json.dumps([_policy("ok", "all()")]))
    assert cli.main(["dry-run", "--hostname", "node", "--format", "json", str(directory)]) == 0
    assert json.loads(capsys.readouterr().out)["hostname"] == "node"


def test_a_failed_worker_still_refuses_what_the_trusting_load_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside a worker, plain endpoints are loaded without checking their values (the worker
    checks them); when the worker fails, the check happens here, so an endpoint with an
    invalid address is still refused."""
    directory = _cluster(tmp_path / "cluster", False)
    assert cli.main(["dry-run", "--hostname", "node", str(directory)]) == 1
    without = capsys.readouterr()
    assert "10.0.0.300/32" in without.err

    def broken(paths: object, direct: object = None) -> object:
        raise RuntimeError("worker broke")

    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(loading, "validate_paths", broken)
    assert cli.main(["dry-run", "--hostname", "node", str(directory)]) == 1
    refused = capsys.readouterr()
    assert refused.out == ""
    assert set(without.err.splitlines()) <= set(refused.err.splitlines())


EXAMPLES = Path(__file__).parent.parent / "examples"
WORKLOAD_IPS = """apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node-a}
spec: {routeSource: WorkloadIPs}
"""


def _streamed(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The worker forced on; the list fills with each streamed computation's result."""
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    computed: list[object] = []
    original = dryrun.compute_files

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append(result := original(*args, **kwargs))
        return result

    monkeypatch.setattr(dryrun, "compute_files", counted)
    return computed


def test_a_late_route_source_has_the_streamed_dry_run_computed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The streamed dry-run starts computing before it has read every FelixConfiguration;
    one in the last file that sets RouteSource (which the graph is built with) has the whole
    computed again with it."""
    late = tmp_path / "late"
    late.mkdir()
    (late / "zz.yaml").write_text(WORKLOAD_IPS)
    command = ["dry-run", "--hostname", "node-a", "--format", "json", str(EXAMPLES), str(late)]
    assert cli.main(command) == 0
    alone = capsys.readouterr().out
    routes = [route["dst"] for route in json.loads(alone)["routes"]]
    assert "10.65.1.2/32" in routes  # a remote workload's own route: WorkloadIPs
    assert "10.65.1.0/26" not in routes  # no IPAM block routes
    computed = _streamed(monkeypatch)
    assert cli.main(command) == 0
    assert capsys.readouterr().out == alone
    assert len(computed) == 1


@pytest.mark.parametrize("valid", [True, False])
def test_a_worker_dying_mid_stream_changes_nothing_but_the_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    valid: bool,
) -> None:
    """The child hands on its first file, then dies: the rest is loaded here, everything is
    validated here, and the output (or the refusal) is the same."""
    source = EXAMPLES if valid else _cluster(tmp_path / "cluster", False)
    command = ["dry-run", "--hostname", "node-a", "--format", "json", str(source)]
    code = cli.main(command)
    alone = capsys.readouterr()
    assert code == (0 if valid else 1)
    handing_on = loading._handing_on

    def dying(*args: Any) -> Any:
        load = handing_on(*args)
        handed: list[Path] = []

        def load_once(file: Path, direct: Any) -> Any:
            if handed:
                os._exit(3)
            handed.append(file)
            return load(file, direct)

        return load_once

    computed = _streamed(monkeypatch)
    monkeypatch.setattr(loading, "_handing_on", dying)
    assert cli.main(command) == code
    streamed = capsys.readouterr()
    assert streamed.out == alone.out
    assert len(computed) == 1
    assert "(status 768)" in caplog.text  # it died where it was meant to (exit 3)


ENDPOINTS = """apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-web-eth0, namespace: prod, labels: {app: web}}
spec: {node: node-a, orchestrator: k8s, pod: web, endpoint: eth0, interfaceName: cali1,
       ipNetworks: [10.65.0.1/32], profiles: [kns.prod]}
---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--b-k8s-db-eth0, namespace: prod, labels: {app: db}}
spec: {node: node-b, orchestrator: k8s, pod: db, endpoint: eth0, interfaceName: cali2,
       ipNetworks: [10.65.1.1/32], profiles: [kns.prod]}
"""
POLICY = """apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: from-db}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {selector: app == 'db'}}]
"""


def test_the_graph_working_ahead_while_it_waits_changes_no_output(tmp_path: Path) -> None:
    """The streamed dry-run has the graph work ahead whenever the next file is not ready
    (a None among the loads): the endpoints that came are filed by their labels before any
    selector asks. The policy that comes later still finds them, and the view is the one
    computed without waits."""
    (tmp_path / "a.yaml").write_text(ENDPOINTS)
    (tmp_path / "b.yaml").write_text(POLICY)
    loads = [load_file(tmp_path / name, plain_entry) for name in ("a.yaml", "b.yaml")]

    def reload() -> LoadResult:
        raise AssertionError("no FelixConfiguration here: nothing to compute again")

    alone, _ = dryrun.compute_files(loads, "node-a", reload=reload)
    members = [s["members"] for s in alone["ipsets"]]
    assert ["10.65.1.1/32"] in members  # the remote db endpoint, matched by the rule
    for waits in ([None, loads[0], None, loads[1], None], [loads[0], None, None, loads[1]]):
        assert dryrun.compute_files(waits, "node-a", reload=reload)[0] == alone


def _same_without_the_child(
    command: list[str],
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> CaptureResult[str]:
    """Run ``command`` as set up (with the child), then with no child: the same exit code and
    the same output both times. Returns the output."""
    assert cli.main(command) == code
    with_child = capsys.readouterr()
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 1 << 40)
    assert cli.main(command) == code
    assert capsys.readouterr() == with_child
    return with_child


def _dumped_pod(i: int, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"web-{i}", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "node-a" if i % 2 else "node-b",
            "containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]}],
            **spec,
        },
        "status": {"phase": "Running", "podIP": f"10.0.0.{i}", "podIPs": [{"ip": f"10.0.0.{i}"}]},
    }


def test_a_dumped_list_is_read_as_its_items_texts_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl's dump is one JSON List: the validating child splits it into its items' texts
    and reads pods from theirs. Beside plain pods it holds what the typed decoder leaves to
    the general path (a host port, an invalid label, a namespace, a policy, a non-object) and
    a repeated key: the dry-run prints what it prints without the child, problems included,
    and a file msgspec refuses (NaN) is parsed whole, as before."""
    items: list[object] = [_dumped_pod(i) for i in range(1, 40)]
    items += [
        _dumped_pod(40, containers=[{"name": "a", "ports": [{"containerPort": 8, "hostPort": 8}]}]),
        {
            **_dumped_pod(41),
            "metadata": {"name": "bad", "namespace": "prod", "labels": {"k": "-v"}},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}},
        _policy("web", "app == 'web'"),
        7,
    ]
    dump = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}
    text = json.dumps(dump).replace(
        '"phase": "Running"', '"phase": "Failed", "phase": "Running"', 1
    )
    (tmp_path / "pods.json").write_text(text)
    (tmp_path / "nan.json").write_text(
        json.dumps([_dumped_pod(50)]).replace('"image"', '"x": NaN, "image"')
    )
    command = ["dry-run", "--hostname", "node-a", "--format", "json", str(tmp_path)]
    code = cli.main(command)
    alone = capsys.readouterr()
    assert code == 1
    assert "Pod/prod/bad: metadata.labels.k" in alone.err
    assert "Pod/prod/web-50: spec.containers[0].x: unknown field" in alone.err
    typed = plain_text_digest()
    assert typed is not None  # msgspec is installed: the typed decoder is what runs here
    parsed = loading._typed_documents(text, plain_digest, typed)
    assert parsed is not None
    assert typed.split is not None  # the compiled reader is built: it read the pods
    assert loading._typed_documents(text, plain_digest, attrs.evolve(typed, split=None)) == parsed
    assert sum(type(item) is tuple for item in parsed[0][0]["items"]) == 39 + 1  # + namespace
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    assert cli.main(command) == code
    assert capsys.readouterr() == alone
    valid = text.replace('"labels": {"k": "-v"}', '"labels": {}').replace(", 7]", "]")
    (tmp_path / "pods.json").write_text(valid)
    (tmp_path / "nan.json").unlink()
    with_child = _same_without_the_child(command, 0, monkeypatch, capsys)
    assert "10.0.0.1/32" in with_child.out


def _knp(namespace: str) -> dict[str, object]:
    """A Kubernetes NetworkPolicy as kubectl prints it from a live cluster."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "isolation",
            "namespace": namespace,
            "uid": "8a2207c6-6b52-48af-9145-f60bc1c890b3",
            "resourceVersion": "5092",
            "creationTimestamp": "2026-01-05T08:16:43Z",
            "generation": 1,
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}],
            "egress": [
                {"to": [{"podSelector": {}}]},
                {
                    "ports": [{"port": 53, "protocol": "UDP"}, {"port": "dns"}],
                    "to": [{"ipBlock": {"cidr": "10.96.0.10/32"}}],
                },
            ],
        },
    }


@pytest.mark.parametrize("behind", [False, True])
def test_policies_converted_by_the_child_change_no_output(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    behind: bool,
) -> None:
    """While this process is behind, the child converts valid policies too and hands on
    their model values (a policy in a tier the report names, one with an HTTP match, and
    one with a problem stay documents). The dry-run prints what it prints without the
    child, problems and stderr included, whichever side converted them."""
    namespaces = [f"customer-{i}" for i in range(6)]
    items: list[object] = [
        _dumped_pod(i)
        | {
            "metadata": {
                "name": f"web-{i}",
                "namespace": namespaces[i % 6],
                "labels": {"app": "web"},
            }
        }
        for i in range(1, 30)
    ]
    items += [_knp(namespace) for namespace in namespaces]
    items += [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces
    ]
    ported = _policy("ported", "app == 'web'")
    ported["spec"] = {
        "selector": "app == 'web'",
        "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [80, "http"]}}],
        "egress": [
            {
                "action": "Deny",
                "protocol": "UDP",
                "destination": {"nets": ["10.1.2.3"], "notPorts": ["1:9"]},
            }
        ],
    }
    tiered = _policy("security.web", "all()")
    tiered["spec"] = {"tier": "security", "selector": "all()", "order": 5}
    http = _policy("http", "all()")
    http["spec"] = {
        "selector": "all()",
        "ingress": [{"action": "Allow", "http": {"paths": [{"exact": "/"}]}}],
    }
    items += [ported, tiered, http]
    (tmp_path / "dump.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    command = ["dry-run", "--hostname", "node-a", "--format", "json", str(tmp_path)]
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 1 << 40)
    assert cli.main(command) == 0
    alone = capsys.readouterr()
    assert "security" in alone.err  # the missing tier is named, by the general path
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(loading, "_reader_behind", lambda out: behind)
    validation = loading.BackgroundValidation(
        [str(tmp_path)],
        direct=plain_identity,
        hand_on=plain_digest,
        hand_on_text=plain_text_digest,
        hand_on_spare=policy_fields,
    )
    (load,) = validation.loaded(partial(plain_entry, validate=False))
    assert validation.problems() == []
    handed = sorted(entry.key[0] for entry in load.direct if "Policy" in entry.key[0])
    expected = ["GlobalNetworkPolicy"] + ["KubernetesNetworkPolicy"] * 6
    assert handed == (expected if behind else [])
    left = sorted(item.resource.name for item in load.resources if "Policy" in item.resource.KIND)
    assert left == (
        ["http", "security.web"]
        if behind
        else sorted(["http", "security.web", "ported", *["isolation"] * 6])
    )
    assert cli.main(command) == 0
    assert capsys.readouterr() == alone
    broken = json.loads((tmp_path / "dump.json").read_text())
    broken["items"][-3]["spec"]["selector"] = "app == "  # one the child would convert
    (tmp_path / "dump.json").write_text(json.dumps(broken))
    with_child = _same_without_the_child(command, 1, monkeypatch, capsys)
    assert "GlobalNetworkPolicy/ported: spec.selector: invalid selector" in with_child.err


def test_only_a_file_holding_the_readers_marker_is_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Splitting a file into its items' texts pays only where the typed decoder takes some:
    a JSON file without a pod is parsed whole, one with pods is split; both load as
    ``load_file`` loads them."""
    split: list[int] = []
    original = json_items.split_items

    def counted(text: str) -> Any:
        split.append(len(text))
        return original(text)

    monkeypatch.setattr(json_items, "split_items", counted)
    (tmp_path / "policies.json").write_text(json.dumps([_policy("web", "app == 'web'")]))
    (tmp_path / "pods.json").write_text(json.dumps([_dumped_pod(1), _dumped_pod(2)]))
    reader = plain_text_digest()
    assert reader is not None
    compiled = reader.split
    if compiled is not None:  # the compiled reader splits first

        def counted_compiled(text: str) -> Any:
            split.append(len(text))
            return compiled(text)

        reader = attrs.evolve(reader, split=counted_compiled)
    with open(os.devnull, "wb") as out:
        load = loading._handing_on(out, plain_digest, reader)
        for name, splits in (("policies.json", 0), ("pods.json", 1)):
            path = tmp_path / name
            result = load(path, plain_identity)
            assert len(split) == splits
            assert result == load_file(path, plain_identity)


def test_the_streamed_dry_run_computes_the_first_of_each_resource(tmp_path: Path) -> None:
    """A resource given twice (a mistake the child's verdict refuses, computed before that
    verdict comes) is computed as its first document: one later in the same file (which its
    load drops), or in a later file, whether it came as a resource or as a direct decoder's
    fields, changes nothing."""
    (tmp_path / "a.yaml").write_text(
        ENDPOINTS + "---\n" + POLICY + "---\n" + POLICY.replace("'db'", "'web'")
    )
    moved = ENDPOINTS.replace("10.65.1.1/32", "10.65.9.9/32").replace("app: db", "app: web")
    (tmp_path / "b.yaml").write_text(moved + "---\n" + POLICY.replace("'db'", "'nobody'"))
    first = [load_file(tmp_path / name, plain_entry) for name in ("a.yaml", "b.yaml")]
    (tmp_path / "only.yaml").write_text(ENDPOINTS + "---\n" + POLICY)
    only = load_file(tmp_path / "only.yaml", plain_entry)

    def reload() -> LoadResult:
        raise AssertionError("no FelixConfiguration here: nothing to compute again")

    view, _ = dryrun.compute_files(first, "node-a", reload=reload)
    assert view == dryrun.compute_files([only], "node-a", reload=reload)[0]
    assert ["10.65.1.1/32"] in [s["members"] for s in view["ipsets"]]
