"""YAML parsed on two cores loads exactly what one process loads, whatever the child does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pyfelix import cli
from pyfelix.resources import load_paths, shared_parse
from pyfelix.resources.loader import load_file
from pyfelix.syncer.files import _read_all
from pyfelix.syncer.plain_workloads import plain_workload_entry
from tests.test_background_validation import WEP

POLICY = """apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: p{i}}}
spec: {{selector: app == 'web', ingress: [{{action: Allow}}]}}
"""


def _cluster(directory: Path, *, broken: bool = False, duplicate: bool = True) -> list[Path]:
    """Ten YAML files (endpoints, policies, a duplicate across the halves, optionally one
    that does not parse and one with an invalid endpoint) and a JSON file."""
    directory.mkdir()
    for n in range(10):
        docs = [WEP.format(i=n * 10 + k, net=f"10.0.{n}.{k}/32", spoof="") for k in range(10)]
        docs.append(POLICY.format(i=n))
        if n == 8 and duplicate:
            docs.append(WEP.format(i=3, net="10.0.0.3/32", spoof=""))  # defined in file 0 first
        if broken and n == 7:
            docs.append(WEP.format(i=999, net="10.0.0.300/32", spoof=""))
        (directory / f"m{n}.yaml").write_text("---\n".join(docs))
    if broken:
        (directory / "m9.yaml").write_text("kind: [unclosed\n")
    (directory / "z.json").write_text(
        json.dumps(
            [{"apiVersion": "projectcalico.org/v3", "kind": "Tier", "metadata": {"name": "t"}}]
        )
    )
    return sorted(directory.iterdir())


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_parse, "MIN_YAML_BYTES", 0)


@pytest.mark.parametrize("broken", [False, True])
@pytest.mark.usefixtures("small_threshold")
def test_the_shared_load_is_the_single_process_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """Resources, direct entries, problems (a file that does not parse, a duplicate across
    the halves) and unparsable files are load_paths'; the child's files are not parsed here."""
    directory = tmp_path / "cluster"
    _cluster(directory, broken=broken)
    expected = load_paths([directory], direct=plain_workload_entry)
    assert any("duplicate" in p.message for p in expected.problems)
    parsed_here: list[str] = []

    def counting(file: Path, direct: object = None) -> object:
        parsed_here.append(file.name)
        return load_file(file, direct)  # type: ignore[arg-type]

    monkeypatch.setattr(shared_parse, "load_file", counting)
    shared = shared_parse.SharedParse([directory])
    assert shared.active
    assert shared.load(direct=plain_workload_entry) == expected
    # The child took the later files; the one it could not parse came back here.
    assert "m8.yaml" not in parsed_here
    assert ("m9.yaml" in parsed_here) == broken
    assert "m0.yaml" in parsed_here


@pytest.mark.usefixtures("small_threshold")
def test_a_failed_child_changes_nothing_but_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    _cluster(directory)
    expected = load_paths([directory], direct=plain_workload_entry)

    def broken(spool: object, files: object) -> None:
        raise RuntimeError("child broke")

    monkeypatch.setattr(shared_parse, "_parse_into", broken)
    shared = shared_parse.SharedParse([directory])
    assert shared.active
    assert shared.load(direct=plain_workload_entry) == expected


@pytest.mark.usefixtures("small_threshold")
def test_dry_run_of_big_yaml_refuses_and_prints_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry-run through the shared parse prints the same view, and refuses an invalid
    input with the same problems, as the load in one process."""
    directory = tmp_path / "cluster"
    _cluster(directory, duplicate=False)
    argv = ["dry-run", "--hostname", "node", "--format", "json", str(directory)]
    broken_dir = tmp_path / "broken"
    _cluster(broken_dir, broken=True)
    broken_argv = ["dry-run", "--hostname", "node", str(broken_dir)]

    def runs() -> tuple[int, str, int, str]:
        code = cli.main(argv)
        out = capsys.readouterr().out
        broken_code = cli.main(broken_argv)
        return code, out, broken_code, capsys.readouterr().out

    shared = runs()
    monkeypatch.setattr(shared_parse, "MIN_YAML_BYTES", 1 << 40)
    assert runs() == shared
    assert shared[0] == 0
    assert shared[2] == 1
    assert json.loads(shared[1])["workload_endpoints"]
    assert "10.0.0.300/32" in shared[3]


def _child_done(prefetch: shared_parse.ParsePrefetch) -> None:
    """Wait until the prefetching child has exited, leaving it to be reaped by the prefetch."""
    os.waitid(os.P_PID, prefetch._pid, os.WEXITED | os.WNOWAIT)


@pytest.mark.parametrize("broken", [False, True])
def test_the_agents_first_read_is_the_plain_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """Whoever parsed a file, the syncer's first read finds what reading every file here
    finds, a file that does not parse included."""
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory, broken=broken)
    expected = _read_all(paths)
    for wait in (False, True):
        prefetch = shared_parse.ParsePrefetch(directory)
        assert prefetch._pid
        if wait:  # the child parsed everything before the first read began
            _child_done(prefetch)
        assert _read_all(paths, prefetch) == expected
        prefetch.close()


def test_a_file_changed_after_the_child_parsed_it_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    prefetch = shared_parse.ParsePrefetch(directory)
    _child_done(prefetch)
    (directory / "m5.yaml").write_text(POLICY.format(i="changed"))
    reads = _read_all(paths, prefetch)
    names = {name for _, _, name in reads[paths.index(directory / "m5.yaml")].resources or ()}
    assert names == {"pchanged"}


def test_a_small_or_json_datastore_is_read_without_a_child(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    _cluster(directory)
    prefetch = shared_parse.ParsePrefetch(directory)
    assert not prefetch._pid
    assert prefetch.claim(directory / "m0.yaml")
    prefetch.close()
