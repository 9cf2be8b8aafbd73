"""The agent's first read takes what an earlier start parsed, and only while it still holds."""

from __future__ import annotations

import marshal
import os
import time
from pathlib import Path

import pytest
import trio

from pyfelix import cli
from pyfelix.resources import parse_cache, shared_parse
from pyfelix.resources.loader import parse_text
from pyfelix.resources.parse_cache import ParseCache, cache_base
from pyfelix.startup import _felix_configurations
from pyfelix.syncer.files import _read_all
from tests.test_dry_run_cli import running_dry_run_agent, wait_for
from tests.test_file_syncer import syncer, tier, write
from tests.test_shared_parse import POLICY, _child_done, _cluster


def _cache(tmp_path: Path, directory: Path) -> ParseCache:
    cache = ParseCache.for_datastore(directory, cli.FIRST_READ)
    assert cache is not None
    assert cache.directory.parent == tmp_path / "cache"
    return cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYFELIX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _entries(cache: ParseCache) -> set[str]:
    return {p.name for p in cache.directory.glob("*.marshal")}


def _parsing_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources parse_text is asked to parse, in this process, through the cache."""
    parsed: list[str] = []
    real = parse_text

    def counted(text: str, source: str) -> object:
        parsed.append(Path(source).name)
        return real(text, source)

    monkeypatch.setattr(parse_cache, "parse_text", counted)
    return parsed


@pytest.mark.parametrize("broken", [False, True])
def test_a_restart_reads_what_the_last_start_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: bool
) -> None:
    """The first read with an empty cache and again with a full one finds what a read
    without the cache finds (a file that does not parse and an invalid endpoint included);
    the second parses nothing that parsed the first time."""
    directory = tmp_path / "cluster"
    paths = _cluster(directory, broken=broken)
    expected = _read_all(paths)
    parsed = _parsing_counted(monkeypatch)
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected
    assert len(parsed) == len(paths)
    parsed.clear()
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected
    assert parsed == (["m9.yaml"] if broken else [])  # what does not parse is never kept


def test_the_prefetching_child_fills_and_reads_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    for _ in range(2):
        prefetch = shared_parse.ParsePrefetch(
            directory, cli._endpoint_checks, _cache(tmp_path, directory)
        )
        _child_done(prefetch)
        assert _read_all(paths, prefetch) == expected
    assert len(_entries(_cache(tmp_path, directory))) == len(paths)


def test_an_edited_file_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    _read_all(paths, cache=_cache(tmp_path, directory))
    edited = directory / "m5.yaml"
    edited.write_text(POLICY.format(i="changed"))
    parsed = _parsing_counted(monkeypatch)
    reads = _read_all(paths, cache=_cache(tmp_path, directory))
    assert parsed == ["m5.yaml"]
    assert {name for _, _, name in reads[paths.index(edited)].resources or ()} == {"pchanged"}


def test_another_pyfelix_does_not_read_this_ones_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed source file of pyfelix (here, of a stand-in package) changes every key."""
    package = tmp_path / "package"
    package.mkdir()
    source = package / "loader.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(parse_cache, "_PACKAGE", package)
    before = _cache(tmp_path, tmp_path).key("kind: Tier\n")
    source.write_text("x = 22\n")
    assert _cache(tmp_path, tmp_path).key("kind: Tier\n") != before
    other = ParseCache.for_datastore(tmp_path, "another purpose")
    assert other is not None
    assert other.key("kind: Tier\n") != before


def test_an_unreadable_entry_is_parsed_and_kept_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    cache = _cache(tmp_path, directory)
    _read_all(paths, cache=cache)
    for n, entry in enumerate(sorted(cache.directory.glob("*.marshal"))):
        entry.write_bytes(b"" if n % 2 else b"\xff not marshal")
    parsed = _parsing_counted(monkeypatch)
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected
    assert len(parsed) == len(paths)
    parsed.clear()
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected
    assert parsed == []


def test_spoilt_entries_handed_on_by_the_child_are_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child hands a cache entry on as its bytes, unread: entries spoilt on disk (empty,
    not marshal, not documents) make the first read parse those files here, with the same
    result, and keep them again."""
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    cache = _cache(tmp_path, directory)
    _read_all(paths, cache=cache)
    spoilt = [b"", b"\xff not marshal", marshal.dumps({"not": "documents"})]
    for n, entry in enumerate(sorted(cache.directory.glob("*.marshal"))):
        entry.write_bytes(spoilt[n % 3])
    parsed = _parsing_counted(monkeypatch)
    prefetch = shared_parse.ParsePrefetch(
        directory, cli._endpoint_checks, _cache(tmp_path, directory)
    )
    _child_done(prefetch)
    assert _read_all(paths, prefetch, _cache(tmp_path, directory)) == expected
    assert len(parsed) == len(paths)  # each parsed here (the child's parses are not counted)
    parsed.clear()
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected
    assert parsed == []


def test_a_cache_in_a_file_s_place_changes_nothing_but_the_time(
    tmp_path: Path, cache_dir: Path
) -> None:
    """Where the cache's directory cannot be made (here a file is in the way, which stops
    root too), reading goes on without it."""
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    cache_dir.write_text("not a directory")
    assert _read_all(paths, cache=_cache(tmp_path, directory)) == _read_all(paths)
    assert cache_dir.read_text() == "not a directory"


def test_a_first_read_removes_what_it_did_not_use(tmp_path: Path) -> None:
    """Entries of files edited or removed since, and the caches of datastores that are
    gone; the entries this read used stay."""
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    cache = _cache(tmp_path, directory)
    _read_all(paths, cache=cache)
    stale = cache.directory / ("0" * 40 + ".marshal")
    stale.write_bytes(b"")
    gone_store = tmp_path / "gone"
    gone_store.mkdir()
    gone = _cache(tmp_path, gone_store)
    gone.put(gone.key("kind: Tier\n"), [])
    gone_store.rmdir()
    long_ago = time.time() - 3600
    for entry in cache.directory.iterdir():
        os.utime(entry, (long_ago, long_ago))
    started = time.time() - 1.0
    _read_all(paths, cache=_cache(tmp_path, directory))
    assert _cache(tmp_path, directory).prune(started) == 1
    assert not stale.exists()
    assert len(_entries(cache)) == len(paths)
    assert not gone.directory.exists()


def test_where_the_cache_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYFELIX_CACHE_DIR", "none")
    assert cache_base() is None
    assert ParseCache.for_datastore(tmp_path, cli.FIRST_READ) is None
    monkeypatch.setenv("PYFELIX_CACHE_DIR", str(tmp_path))
    assert cache_base() == tmp_path
    monkeypatch.delenv("PYFELIX_CACHE_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cache_base() == Path("/var/cache/pyfelix")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_base() == tmp_path / "xdg" / "pyfelix"


async def test_the_file_syncer_keeps_its_first_read_and_no_later_one(tmp_path: Path) -> None:
    """The syncer's first read fills the cache (then indexes it, and prunes it: an entry of an
    earlier content goes); an edit after it is read without it, since nothing an earlier
    start parsed can hold an edit made now."""
    directory = tmp_path / "cluster"
    directory.mkdir()
    write(directory / "tiers.yaml", tier("a", 1))
    cache = _cache(tmp_path, directory)
    cache.put(cache.key("kind: Tier\n"), [])
    long_ago = time.time() - 3600
    for entry in cache.directory.glob("*.marshal"):
        os.utime(entry, (long_ago, long_ago))
    cached = _cache(tmp_path, directory)
    async with syncer(directory, cache=cached, cache_upkeep_delay=0) as (_, recorder):
        assert await recorder.next_batch()
        with trio.fail_after(5):
            while len(_entries(cache)) != 1:
                await trio.sleep(0.01)
        kept = _entries(cache)
        write(directory / "tiers.yaml", tier("a", 2))
        assert await recorder.next_batch()
        assert _entries(cache) == kept


def test_a_restarted_agent_prints_what_it_printed_the_first_time(
    manifests: Path, cache_dir: Path
) -> None:
    """``pyfelix run --dry-run`` twice on the same manifests: the restart reads them from the
    cache (an entry per manifest file) and sends the dataplane the same messages (not the
    same order: within a flush, the messages of sets come in their hash seed's order)."""
    runs = []
    for _ in range(2):
        with running_dry_run_agent(manifests) as process:
            runs.append(wait_for(process, "# IPv4 filter: chain cali-FORWARD"))
    assert sorted(runs[0]) == sorted(runs[1])
    assert any(line.startswith("WorkloadEndpointUpdate") for line in runs[0])
    (store,) = cache_dir.iterdir()
    assert (store / "datastore").read_text() == str(manifests.resolve())
    assert len(list(store.glob("*.marshal"))) == len(list(manifests.glob("*.yaml")))


CONFIGS = """apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {workloadSourceSpoofing: Any}
---
apiVersion: v1
kind: List
items:
- apiVersion: projectcalico.org/v3
  kind: FelixConfiguration
  metadata: {name: node.a}
  spec: {routeSource: WorkloadIPs}
"""


def test_the_start_up_configurations_come_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FelixConfigurations read before the graph starts, from a file that also holds
    policies and endpoints: the same with the cache as without, and from it once filled."""
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    paths[0].write_text(CONFIGS + "---\n" + paths[0].read_text())
    expected = _felix_configurations(directory)
    assert sorted(r.name for r in expected) == ["default", "node.a"]
    parsed = _parsing_counted(monkeypatch)
    assert _felix_configurations(directory, _cache(tmp_path, directory)) == expected
    assert _felix_configurations(directory, _cache(tmp_path, directory)) == expected
    assert parsed == ["m0.yaml"]


def test_a_restart_whose_files_are_all_indexed_reads_them_without_a_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a first read's entries are indexed by the files' stats, the next start neither
    forks nor parses; a file changed since sends it back to the child and to the parser."""
    monkeypatch.setattr(shared_parse, "MIN_PREFETCH_BYTES", 0)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    _read_all(paths, cache=_cache(tmp_path, directory))
    _cache(tmp_path, directory).write_index(paths)
    parsed = _parsing_counted(monkeypatch)
    cache = _cache(tmp_path, directory)
    prefetch = shared_parse.ParsePrefetch(directory, cli._endpoint_checks, cache)
    assert not prefetch._pid
    assert _read_all(paths, prefetch, cache) == expected
    assert parsed == []
    (directory / "m5.yaml").write_text(POLICY.format(i="changed"))
    # Read before a child is started: a child parsing the file first would leave its entry
    # in the cache, and the parsing here would depend on how far it got.
    reads = _read_all(paths, cache=_cache(tmp_path, directory))
    assert parsed == ["m5.yaml"]
    assert {n for _, _, n in reads[paths.index(directory / "m5.yaml")].resources or ()} == {
        "pchanged"
    }
    prefetch = shared_parse.ParsePrefetch(
        directory, cli._endpoint_checks, _cache(tmp_path, directory)
    )
    assert prefetch._pid
    prefetch.close()


def test_an_unreadable_index_is_no_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    cache = _cache(tmp_path, directory)
    _read_all(paths, cache=cache)
    old_format = marshal.dumps({str(path): ((0, 0), "x") for path in paths})
    for garbage in (b"\xff", marshal.dumps({"x": 1}), marshal.dumps([1, 2]), old_format):
        (cache.directory / "index").write_bytes(garbage)
        assert not _cache(tmp_path, directory).fresh(paths)
        assert _read_all(paths, cache=_cache(tmp_path, directory)) == expected


def test_an_index_another_pyfelix_wrote_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade, the index still names the entries the old code parsed (in the old
    code's shapes): the new code looks every file up by its text instead, and reads it as
    it would without any cache."""
    package = tmp_path / "package"
    package.mkdir()
    source = package / "loader.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(parse_cache, "_PACKAGE", package)
    directory = tmp_path / "cluster"
    paths = _cluster(directory)
    expected = _read_all(paths)
    _read_all(paths, cache=_cache(tmp_path, directory))
    _cache(tmp_path, directory).write_index(paths)
    assert _cache(tmp_path, directory).fresh(paths)
    index = _cache(tmp_path, directory).directory / "index"
    _, files = marshal.loads(index.read_bytes())
    for entry in {key for _, key in files.values()}:
        # What the old code kept, in a shape the new one cannot read.
        (index.parent / f"{entry}.marshal").write_bytes(marshal.dumps([(("old",), 1, [])]))
    source.write_text("x = 22\n")
    parsed = _parsing_counted(monkeypatch)
    upgraded = _cache(tmp_path, directory)
    assert not upgraded.fresh(paths)
    assert _read_all(paths, cache=upgraded) == expected
    assert sorted(parsed) == sorted(p.name for p in paths)
