"""YAML parsed on two cores (the agent's first read, the dry-run's handing-on child) loads
exactly what one process loads, whatever the child does."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from pyfelix import cli, model
from pyfelix.resources import parse_cache, shared_parse
from pyfelix.resources.loader import Digest, parse_text
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.files import FileSyncer, _read_all
from pyfelix.validation import loading
from tests.test_background_validation import WEP
from tests.test_file_syncer import Recorder

POLICY = """apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {{name: p{i}}}
spec: {{selector: app == 'web', ingress: [{{action: Allow}}]}}
"""


def _cluster(
    directory: Path,
    *,
    broken: bool = False,
    duplicate: bool = True,
    duplicate_net: str = "10.0.0.3/32",
) -> list[Path]:
    """Ten YAML files (endpoints, policies, a duplicate across the halves, optionally one
    that does not parse and one with an invalid endpoint) and a JSON file."""
    directory.mkdir()
    for n in range(10):
        docs = [WEP.format(i=n * 10 + k, net=f"10.0.{n}.{k}/32", spoof="") for k in range(10)]
        docs.append(POLICY.format(i=n))
        if n == 8 and duplicate:
            docs.append(WEP.format(i=3, net=duplicate_net, spoof=""))  # defined in file 0 first
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
def prefetch_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)


def test_dry_run_of_big_yaml_refuses_and_prints_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dry-run through the child that parses, checks and hands on prints the same view,
    and refuses an invalid input with the same problems, as the load in one process."""
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 0)
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
        refused = capsys.readouterr()
        assert refused.out == ""  # problems go to stderr: stdout holds a view or nothing
        return code, out, broken_code, refused.err

    shared = runs()
    monkeypatch.setattr(loading, "PARALLEL_MIN_BYTES", 1 << 40)
    assert runs() == shared
    assert shared[0] == 0
    assert shared[2] == 1
    assert json.loads(shared[1])["workload_endpoints"]
    assert "10.0.0.300/32" in shared[3]


def _child_done(prefetch: shared_parse.ParsePrefetch) -> None:
    """Wait until the prefetching child has exited, leaving it to be reaped by the prefetch."""
    os.waitid(os.P_PID, prefetch._pid, os.WEXITED | os.WNOWAIT)


@pytest.mark.parametrize("broken", [False, True])
@pytest.mark.parametrize("digest", [None, cli._endpoint_checks], ids=["documents", "checked"])
def test_the_agents_first_read_is_the_plain_read(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    broken: bool,
    digest: Callable[[], Digest] | None,
) -> None:
    """Whoever parsed a file, and whether the child checked its endpoints or handed the
    documents over, the syncer's first read finds what reading every file here finds: a file
    that does not parse and an invalid endpoint included."""
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory, broken=broken)
    expected = _read_all(paths)
    for wait in (False, True):
        prefetch = shared_parse.ParsePrefetch(directory, digest)
        assert prefetch._pid
        if wait:  # the child parsed everything before the first read began
            _child_done(prefetch)
        assert _read_all(paths, prefetch) == expected
        prefetch.close()


def _parsed_ahead(
    tmp_path: Path, digest: Callable[[], Digest] | None = None
) -> tuple[Path, list[Path], shared_parse.ParsePrefetch]:
    """The test cluster, and a prefetch whose child has parsed all of it."""
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    prefetch = shared_parse.ParsePrefetch(directory, digest)
    _child_done(prefetch)
    return directory, paths, prefetch


@pytest.mark.usefixtures("prefetch_threshold")
def test_a_file_changed_after_the_child_parsed_it_is_read_again(tmp_path: Path) -> None:
    directory, paths, prefetch = _parsed_ahead(tmp_path)
    (directory / "m5.yaml").write_text(POLICY.format(i="changed"))
    reads = _read_all(paths, prefetch)
    names = {name for _, _, name in reads[paths.index(directory / "m5.yaml")].resources or ()}
    assert names == {"pchanged"}


def test_a_small_or_json_datastore_is_read_without_a_child(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    prefetch = shared_parse.ParsePrefetch(directory)
    assert not prefetch._pid
    assert list(prefetch.schedule(paths)) == [(n, None) for n in range(len(paths))]
    prefetch.close()


@pytest.mark.usefixtures("prefetch_threshold")
def test_files_the_child_has_delivered_are_not_parsed_again(tmp_path: Path) -> None:
    _, paths, prefetch = _parsed_ahead(tmp_path, cli._endpoint_checks)
    schedule = list(prefetch.schedule(paths))
    assert [n for n, _ in schedule] == list(range(len(paths)))  # in order, none from the end
    kinds: Counter[str] = Counter()
    for _, prefetched in schedule:
        assert prefetched is not None
        kinds.update(type(data).__name__ for data, _, _ in prefetched[1])
    # Each endpoint checked in the child, as its fields; policies and the JSON list as parsed.
    assert kinds == {"tuple": 101, "dict": 10, "list": 1}
    assert not prefetch._pid  # reaped


def _slow_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetching child parses a file in 0.3 s (its parser patched; this process's
    parsing is left as it is)."""
    parent = os.getpid()

    def slow_in_the_child(text: str, source: str) -> object:
        if os.getpid() != parent:
            time.sleep(0.3)
        return parse_text(text, source)

    monkeypatch.setattr(parse_cache, "parse_text", slow_in_the_child)  # the child's parser


def test_while_the_child_is_slow_this_process_parses_from_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that takes 0.3 s a file delivers the first file or two; this process reads
    the rest itself, from the last one backwards, and finds what the plain read finds."""
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    _slow_child(monkeypatch)
    prefetch = shared_parse.ParsePrefetch(directory)
    schedule = list(prefetch.schedule(paths))
    assert sorted(n for n, _ in schedule) == list(range(len(paths)))
    delivered = [n for n, prefetched in schedule if prefetched is not None]
    assert len(delivered) <= 3
    assert schedule[0] == (len(paths) - 1, None)  # while the child parses the first file
    prefetch = shared_parse.ParsePrefetch(directory)
    assert _read_all(paths, prefetch) == expected


def test_a_child_that_dies_leaves_its_files_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory, broken=True)
    expected = _read_all(paths)
    prefetch = shared_parse.ParsePrefetch(directory)
    os.kill(prefetch._pid, signal.SIGKILL)
    assert _read_all(paths, prefetch) == expected


async def _first_read(directory: Path, prefetch: shared_parse.ParsePrefetch | None) -> Recorder:
    """The file syncer's updates until InSync, with ``prefetch`` as the agent's first read."""
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(FileSyncer(directory, recorder, prefetch=prefetch).run)
        nursery.cancel_scope.cancel()
    return recorder


def _folded(batches: list[list[Update]]) -> dict[object, object]:
    state: dict[object, object] = {}
    for batch in batches:
        for update in batch:
            if update.value is None:
                state.pop(update.key, None)
            else:
                state[update.key] = update.value
    return state


@pytest.mark.usefixtures("prefetch_threshold")
async def test_the_first_read_hands_on_each_file_as_read_and_the_first_path_still_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's first read makes each file's updates as soon as either side has read it:
    with a slow child, the files this process reads from the end come first, among them one
    that defines again, differently, an endpoint of the first file. The updates still end
    where a plain read's end, the first file's definition winning."""
    directory = tmp_path / "cluster"
    _cluster(directory, duplicate_net="10.8.8.8/32")
    _slow_child(monkeypatch)
    streamed = await _first_read(directory, shared_parse.ParsePrefetch(directory))
    plain = await _first_read(directory, None)
    assert len(plain.batches) == 1
    assert len(streamed.batches) > 1
    # The JSON file (the last path) first, read here while the child parsed the first file.
    assert [u.key for u in streamed.batches[0]] == [model.TierKey("t")]
    final = _folded(streamed.batches)
    assert final == _folded(plain.batches)
    (duplicate,) = [
        value
        for key, value in final.items()
        if isinstance(key, model.WorkloadEndpointKey) and key.workload == "default/pod3"
    ]
    assert isinstance(duplicate, model.WorkloadEndpoint)
    assert duplicate.ipv4_nets == ("10.0.0.3/32",)


@pytest.mark.usefixtures("prefetch_threshold")
async def test_an_agent_stopped_during_its_first_read_stops_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped while the child is still parsing: the read stops at its next file, and the
    syncer leaves with nothing but the cancellation."""
    directory = tmp_path / "cluster"
    _cluster(directory)
    _slow_child(monkeypatch)
    prefetch = shared_parse.ParsePrefetch(directory)
    recorder = Recorder()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(FileSyncer(directory, recorder, prefetch=prefetch).run)
            while not recorder.batches:  # the first file's updates are out
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    prefetch.close()
    assert SyncStatus.IN_SYNC not in recorder.statuses
