"""The file datastore against real files: initial sync, minimal updates on edits, deletes,
renames, partial writes, unparsable files, new directories, polling, and 10k files."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import yaml

from pyfelix import model
from pyfelix.resources.meta import load_document
from pyfelix.syncer import files
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.files import FileSyncer
from pyfelix.syncer.processors import convert
from tests.test_plain_pods import BASE

# How long a test waits for the watcher to report a change before failing.
CHANGE_TIMEOUT = 5.0
# How long a test waits to be sure that nothing is reported.
QUIET = 0.5


@attrs.define
class Recorder:
    batches: list[list[Update]] = attrs.Factory(list)
    statuses: list[SyncStatus] = attrs.Factory(list)
    changed: trio.Event = attrs.Factory(trio.Event)

    def on_updates(self, updates: Sequence[Update]) -> None:
        self.batches.append(list(updates))
        self.changed.set()

    def on_status(self, status: SyncStatus) -> None:
        self.statuses.append(status)

    async def next_batch(self) -> list[Update]:
        with trio.fail_after(CHANGE_TIMEOUT):
            while not self.batches:
                await self.changed.wait()
                self.changed = trio.Event()
        return self.batches.pop(0)

    async def nothing_more(self) -> None:
        await trio.sleep(QUIET)
        assert self.batches == []


def tier(name: str, order: float) -> dict[str, Any]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "Tier",
        "metadata": {"name": name},
        "spec": {"order": order},
    }


def write(path: Path, *docs: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump_all(docs))


def keys(batch: list[Update]) -> dict[object, object | None]:
    return {u.key: u.value for u in batch}


@asynccontextmanager
async def syncer(root: Path, **options: Any) -> AsyncIterator[tuple[FileSyncer, Recorder]]:
    recorder = Recorder()
    file_syncer = FileSyncer(root, recorder, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(file_syncer.run)
        yield file_syncer, recorder
        nursery.cancel_scope.cancel()


async def test_initial_load_then_in_sync(tmp_path: Path) -> None:
    """Everything is sent before IN_SYNC, and the syncer is 'started' only then."""
    write(tmp_path / "a.yaml", tier("a", 1), tier("b", 2))
    async with syncer(tmp_path) as (_, recorder):
        assert recorder.statuses == [
            SyncStatus.WAIT_FOR_DATASTORE,
            SyncStatus.RESYNC_IN_PROGRESS,
            SyncStatus.IN_SYNC,
        ]
        (batch,) = recorder.batches
        assert keys(batch) == {
            model.TierKey("a"): model.Tier(1.0, "Deny"),
            model.TierKey("b"): model.Tier(2.0, "Deny"),
        }


async def test_edit_emits_only_the_changed_resource(tmp_path: Path) -> None:
    """Changing one resource in a multi-document file updates just that resource."""
    path = tmp_path / "tiers.yaml"
    write(path, tier("a", 1), tier("b", 2))
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        write(path, tier("a", 1), tier("b", 3))
        assert keys(await recorder.next_batch()) == {model.TierKey("b"): model.Tier(3.0, "Deny")}
        await recorder.nothing_more()


async def test_delete_and_rename(tmp_path: Path) -> None:
    """A rename changes nothing; a deleted file deletes its resources."""
    write(tmp_path / "a.yaml", tier("a", 1))
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        (tmp_path / "a.yaml").rename(tmp_path / "renamed.yaml")
        await recorder.nothing_more()
        (tmp_path / "renamed.yaml").unlink()
        assert keys(await recorder.next_batch()) == {model.TierKey("a"): None}


async def test_unparsable_file_keeps_last_values(tmp_path: Path) -> None:
    """Broken YAML is not a deletion; once fixed, only real changes are sent."""
    path = tmp_path / "a.yaml"
    write(path, tier("a", 1), tier("b", 2))
    async with syncer(tmp_path) as (file_syncer, recorder):
        recorder.batches.clear()
        path.write_text("kind: [\n")
        await recorder.nothing_more()
        assert file_syncer.identities == {("Tier", "", "a"), ("Tier", "", "b")}
        write(path, tier("a", 1), tier("b", 5))
        assert keys(await recorder.next_batch()) == {model.TierKey("b"): model.Tier(5.0, "Deny")}


async def test_partial_write_is_not_read_until_closed(tmp_path: Path) -> None:
    """A writer that pauses mid-file causes no update until it closes the file."""
    path = tmp_path / "a.yaml"
    write(path, tier("a", 1), tier("b", 2))
    full = yaml.safe_dump_all([tier("a", 1), tier("b", 7)])
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        with path.open("w") as handle:
            handle.write(full[: len(full) // 3])
            handle.flush()
            await recorder.nothing_more()
            handle.write(full[len(full) // 3 :])
        assert keys(await recorder.next_batch()) == {model.TierKey("b"): model.Tier(7.0, "Deny")}


async def test_editor_save_by_rename(tmp_path: Path) -> None:
    """Write a hidden temp file and rename it over the original: one minimal update."""
    path = tmp_path / "a.yaml"
    write(path, tier("a", 1), tier("b", 2))
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        temp = tmp_path / ".a.yaml.tmp"
        write(temp, tier("a", 1), tier("b", 2), tier("c", 3))
        os.replace(temp, path)
        assert keys(await recorder.next_batch()) == {model.TierKey("c"): model.Tier(3.0, "Deny")}
        await recorder.nothing_more()


async def test_only_a_path_that_went_waits_for_quiet(tmp_path: Path) -> None:
    """A completed write is read at once; a deletion waits for the quiet period, in case a
    replacement follows (here the period is a second, so the difference is plain)."""
    path = tmp_path / "a.yaml"
    write(path, tier("a", 1))
    async with syncer(tmp_path, debounce=1.0) as (_, recorder):
        recorder.batches.clear()
        with trio.fail_after(0.5):
            write(path, tier("a", 2))
            assert keys(await recorder.next_batch()) == {
                model.TierKey("a"): model.Tier(2.0, "Deny")
            }
        path.unlink()
        await trio.sleep(0.5)
        assert recorder.batches == []
        assert keys(await recorder.next_batch()) == {model.TierKey("a"): None}


async def test_editor_delete_and_recreate(tmp_path: Path) -> None:
    """Delete then quickly recreate (some editors do): no delete-then-add of everything."""
    path = tmp_path / "a.yaml"
    write(path, tier("a", 1), tier("b", 2))
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        path.unlink()
        write(path, tier("a", 1), tier("b", 2))
        await recorder.nothing_more()


async def test_new_subdirectory_is_watched(tmp_path: Path) -> None:
    """Files in a directory created after start-up are picked up, and edits in it too."""
    async with syncer(tmp_path) as (_, recorder):
        sub = tmp_path / "team"
        sub.mkdir()
        write(sub / "t.yaml", tier("t", 1))
        assert keys(await recorder.next_batch()) == {model.TierKey("t"): model.Tier(1.0, "Deny")}
        write(sub / "t.yaml", tier("t", 2))
        assert keys(await recorder.next_batch()) == {model.TierKey("t"): model.Tier(2.0, "Deny")}


async def test_polling_fallback(tmp_path: Path) -> None:
    """Without inotify, changes are still found by polling."""
    write(tmp_path / "a.yaml", tier("a", 1))
    async with syncer(tmp_path, use_inotify=False, poll_interval=0.1) as (_, recorder):
        recorder.batches.clear()
        await trio.sleep(0.01)
        write(tmp_path / "a.yaml", tier("a", 9))
        assert keys(await recorder.next_batch()) == {model.TierKey("a"): model.Tier(9.0, "Deny")}
        (tmp_path / "a.yaml").unlink()
        assert keys(await recorder.next_batch()) == {model.TierKey("a"): None}


async def test_duplicate_across_files_first_path_wins(tmp_path: Path) -> None:
    """The same resource in two files: the first path wins, the other takes over after."""
    write(tmp_path / "a.yaml", tier("t", 1))
    write(tmp_path / "b.yaml", tier("t", 2))
    async with syncer(tmp_path) as (_, recorder):
        (batch,) = recorder.batches
        assert keys(batch) == {model.TierKey("t"): model.Tier(1.0, "Deny")}
        recorder.batches.clear()
        (tmp_path / "a.yaml").unlink()
        assert keys(await recorder.next_batch()) == {model.TierKey("t"): model.Tier(2.0, "Deny")}


@pytest.mark.parametrize("count", [10_000])
async def test_ten_thousand_files(tmp_path: Path, count: int) -> None:
    """A directory of 10k manifests loads fully, and one edit among them is one update."""
    for i in range(count):
        write(tmp_path / f"t{i:05}.yaml", tier(f"t{i:05}", i))
    async with syncer(tmp_path) as (_, recorder):
        assert sum(len(b) for b in recorder.batches) == count
        recorder.batches.clear()
        write(tmp_path / "t04242.yaml", tier("t04242", -1))
        assert keys(await recorder.next_batch()) == {
            model.TierKey("t04242"): model.Tier(-1.0, "Deny")
        }


async def test_a_missing_datastore_is_waited_for_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A datastore path that does not exist is not an empty datastore: nothing (not even
    IN_SYNC) is sent until it appears, and the error says so."""
    root = tmp_path / "not-yet"
    recorder = Recorder()
    file_syncer = FileSyncer(root, recorder, poll_interval=0.1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(file_syncer.run)
        await trio.sleep(QUIET)
        assert SyncStatus.IN_SYNC not in recorder.statuses
        assert recorder.batches == []
        assert "does not exist" in caplog.text
        root.mkdir()
        write(root / "t.yaml", tier("t", 1))
        batch = await recorder.next_batch()
        assert keys(batch) == {model.TierKey("t"): model.Tier(1.0, "Deny")}
        assert SyncStatus.IN_SYNC in recorder.statuses
        nursery.cancel_scope.cancel()


async def test_a_replaced_directory_is_followed(tmp_path: Path) -> None:
    """The datastore directory moved away and copied back (edited): the new one is watched and
    read; while it was gone, nothing was deleted."""
    root = tmp_path / "store"
    root.mkdir()
    write(root / "t.yaml", tier("t", 1))
    async with syncer(root, poll_interval=0.1) as (_, recorder):
        recorder.batches.clear()
        root.rename(tmp_path / "away")
        await recorder.nothing_more()
        (tmp_path / "away").rename(root.with_name("staging"))
        write(root.with_name("staging") / "t.yaml", tier("t", 5))
        root.with_name("staging").rename(root)
        assert keys(await recorder.next_batch()) == {model.TierKey("t"): model.Tier(5.0, "Deny")}
        write(root / "u.yaml", tier("u", 2))
        assert keys(await recorder.next_batch()) == {model.TierKey("u"): model.Tier(2.0, "Deny")}


async def test_a_file_replaced_by_a_directory(tmp_path: Path) -> None:
    """The file's resources go, and the manifests inside the new directory count."""
    write(tmp_path / "a.yaml", tier("a", 1))
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        (tmp_path / "a.yaml").unlink()
        (tmp_path / "a.yaml").mkdir()
        write(tmp_path / "a.yaml" / "b.yaml", tier("b", 2))
        seen: dict[object, object | None] = {}
        with trio.fail_after(CHANGE_TIMEOUT):
            while seen.get(model.TierKey("b")) is None or model.TierKey("a") not in seen:
                seen.update(keys(await recorder.next_batch()))
        assert seen[model.TierKey("a")] is None
        assert seen[model.TierKey("b")] == model.Tier(2.0, "Deny")


async def test_a_file_held_open_is_not_read_half_written(tmp_path: Path) -> None:
    """A writer that pauses with the file open: other files' changes go ahead after the write
    timeout, the open file's half is never applied, and its whole is once it is closed."""
    write(tmp_path / "t.yaml", tier("t", 1))
    async with syncer(tmp_path, write_timeout=0.3) as (_, recorder):
        recorder.batches.clear()
        half, rest = yaml.safe_dump(tier("t", 2)), yaml.safe_dump(tier("v", 3))
        with (tmp_path / "t.yaml").open("w") as held:
            held.write(half)
            held.flush()
            write(tmp_path / "u.yaml", tier("u", 9))
            assert keys(await recorder.next_batch()) == {
                model.TierKey("u"): model.Tier(9.0, "Deny")
            }
            await recorder.nothing_more()
            held.write("---\n" + rest)
        assert keys(await recorder.next_batch()) == {
            model.TierKey("t"): model.Tier(2.0, "Deny"),
            model.TierKey("v"): model.Tier(3.0, "Deny"),
        }


async def test_a_new_symlink_is_read_at_once(tmp_path: Path) -> None:
    """A symlink to a manifest inside the directory (as a ConfigMap's ..data links are) is
    complete when it appears (it is never "written"): no wait for the write timeout."""
    versions = tmp_path / "..data"
    versions.mkdir()
    write(versions / "t.yaml", tier("t", 1))
    async with syncer(tmp_path, write_timeout=30) as (_, recorder):
        (tmp_path / "t.yaml").symlink_to(versions / "t.yaml")
        with trio.fail_after(2):
            batch = await recorder.next_batch()
        assert keys(batch) == {model.TierKey("t"): model.Tier(1.0, "Deny")}


async def test_links_out_of_the_directory_are_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent runs as root: a link to a file elsewhere (a private key, say) is not read,
    at start or when it appears, and nothing of its content reaches the log."""
    secret = tmp_path / "key.pem"
    secret.write_text("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n")
    store = tmp_path / "store"
    store.mkdir()
    (store / "early.yaml").symlink_to(secret)
    write(store / "t.yaml", tier("t", 1))
    async with syncer(store) as (_, recorder):
        assert [set(keys(batch)) for batch in recorder.batches] == [{model.TierKey("t")}]
        recorder.batches.clear()
        (store / "late.yaml").symlink_to(secret)
        await recorder.nothing_more()
    assert "leads out of" in caplog.text
    assert "PRIVATE KEY" not in caplog.text
    assert "MIIEvQ" not in caplog.text


async def test_parsing_a_large_file_leaves_the_trio_loop_responsive(tmp_path: Path) -> None:
    """Reading and parsing run in a worker thread: while a large file (20,000 documents) is
    loaded, other tasks (the health server, the calc loop) keep running."""
    document = (
        "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: t%d}\nspec: {order: 1}\n"
    )
    (tmp_path / "big.yaml").write_text("---\n".join(document % i for i in range(20_000)))
    gaps: list[float] = []

    async def heartbeat() -> None:
        last = trio.current_time()
        while True:
            await trio.sleep(0.01)
            now = trio.current_time()
            gaps.append(now - last)
            last = now

    recorder = Recorder()
    file_syncer = FileSyncer(tmp_path, recorder)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        await trio.sleep(0.05)
        started = trio.current_time()
        await nursery.start(file_syncer.run)
        loading = trio.current_time() - started
        await trio.sleep(0.05)  # the heartbeat records the gap it was woken after
        nursery.cancel_scope.cancel()
    assert sum(len(batch) for batch in recorder.batches) == 20_000
    assert loading > 0.3, "the file should take a while to parse"
    assert max(gaps) < loading / 3, (max(gaps), loading)


def endpoint(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "projectcalico.org/v3",
        "kind": "WorkloadEndpoint",
        "metadata": {"name": "node-k8s-web-eth0", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {
            "node": "node",
            "orchestrator": "k8s",
            "pod": "web",
            "endpoint": "eth0",
            "interfaceName": "cali1",
            "ipNetworks": ["10.0.0.1/32"],
            **spec,
        },
    }


def endpoint_value(update: Update) -> model.WorkloadEndpoint:
    assert isinstance(update.value, model.WorkloadEndpoint)
    return update.value


async def test_endpoints_plain_or_not_and_invalid_ones(tmp_path: Path) -> None:
    """A plain endpoint goes straight to the model (no v3 origin); one with named ports takes
    the general path, so does an invalid one, whose origin lets the validation filter
    downstream treat it as absent; edits between the forms update the endpoint."""
    path = tmp_path / "wep.yaml"
    write(path, endpoint())
    key = model.WorkloadEndpointKey("node", "k8s", "prod/web", "eth0")
    async with syncer(tmp_path) as (_, recorder):
        (batch,) = recorder.batches
        recorder.batches.clear()
        (plain,) = batch
        assert plain.key == key
        assert endpoint_value(plain).origin is None
        assert endpoint_value(plain).ipv4_nets == ("10.0.0.1/32",)
        write(path, endpoint(ports=[{"name": "http", "protocol": "TCP", "port": 80}]))
        (general,) = await recorder.next_batch()
        assert endpoint_value(general).origin is not None
        assert endpoint_value(general).ports == (model.EndpointPort("http", "tcp", 80),)
        write(path, endpoint(interfaceName="-bad"))
        (invalid,) = await recorder.next_batch()
        assert endpoint_value(invalid).origin is not None
        assert endpoint_value(invalid).ports == ()
        write(path, endpoint())
        (again,) = await recorder.next_batch()
        assert again.value == plain.value
        write(path, endpoint())  # the same again: nothing to send
        await recorder.nothing_more()


@pytest.mark.parametrize("when", ["before the start", "while running"])
async def test_a_fifo_among_the_manifests_leaves_the_syncer_listening(
    tmp_path: Path, when: str
) -> None:
    """A FIFO named like a manifest is not a manifest: opening it for reading would wait for a
    writer for ever, so it is never opened, and edits beside it still arrive."""
    path = tmp_path / "tiers.yaml"
    write(path, tier("a", 1))
    if when == "before the start":
        os.mkfifo(tmp_path / "pipe.yaml")
    with trio.fail_after(CHANGE_TIMEOUT):
        async with syncer(tmp_path) as (_, recorder):
            recorder.batches.clear()
            if when == "while running":
                os.mkfifo(tmp_path / "pipe.yaml")
                await trio.sleep(QUIET)
            write(path, tier("a", 2))
            assert keys(await recorder.next_batch()) == {
                model.TierKey("a"): model.Tier(2.0, "Deny")
            }


def test_inotify_watches_running_out_at_run_time_falls_back_to_polling(tmp_path: Path) -> None:
    """New directories past the inotify watch limit (ENOSPC from inotify_add_watch): the
    syncer polls from then on, as at a start without inotify, and reads what it may have
    missed. The limit is lowered in a user namespace of the test's own (unshare), so no other
    process on the machine is touched."""
    program = Path(__file__).parent / "e2e" / "programs" / "inotify_limit.py"
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, str(program), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "alive"
    assert sorted(set(lines[:-1])) == ["tier first"] + [f"tier sub{i}" for i in range(5)]
    assert "inotify failed" in result.stderr
    assert "polling every" in result.stderr


async def test_a_new_directory_re_reads_only_what_is_below_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory made, filled and removed beside 200 manifests: only the files below it are
    read again (a whole re-read of 100,000 files took 194 s for one mkdir)."""
    for index in range(200):
        write(tmp_path / f"t{index}.yaml", tier(f"t{index}", index))
    read: list[Path] = []
    original = files._read_all

    def counting(paths: list[Path], *args: Any) -> Any:
        read.extend(paths)
        return original(paths, *args)

    monkeypatch.setattr(files, "_read_all", counting)
    async with syncer(tmp_path) as (_, recorder):
        recorder.batches.clear()
        read.clear()
        sub = tmp_path / "team"
        sub.mkdir()
        write(sub / "new.yaml", tier("new", 1))
        assert keys(await recorder.next_batch()) == {model.TierKey("new"): model.Tier(1.0, "Deny")}
        (sub / "new.yaml").unlink()
        sub.rmdir()
        assert keys(await recorder.next_batch()) == {model.TierKey("new"): None}
        await recorder.nothing_more()
    assert read
    assert set(read) <= {sub / "new.yaml"}


async def test_a_dumps_pods_namespaces_and_accounts_as_the_general_path_reads_them(
    tmp_path: Path,
) -> None:
    """A cluster's dump (a pod as kubectl prints it, its namespace, its service account),
    which the file datastore reads by the direct path: the model is what decoding each whole
    and converting it gives; an edit of the pod's labels sends its endpoint again, and the
    namespace's deletion deletes its profile."""
    labels = {"kubernetes.io/metadata.name": "prod", "team": "a"}
    namespace: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace"}
    namespace["metadata"] = {"name": "prod", "labels": labels}
    account: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount"}
    account["metadata"] = {"name": "web", "namespace": "prod", "labels": {"tier": "front"}}
    pod = copy.deepcopy(BASE)
    docs = [namespace, account, pod]
    expected: dict[object, object] = {}
    for doc in docs:
        resource, problems = load_document(copy.deepcopy(doc), "<test>")
        assert resource is not None, problems
        expected.update((k, attrs.evolve(v, origin=None)) for k, v in convert(resource))  # type: ignore[misc]
    write(tmp_path / "dump.yaml", namespace, account)
    (tmp_path / "pods.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]})
    )
    async with syncer(tmp_path) as (_, recorder):
        (batch,) = recorder.batches
        assert keys(batch) == expected
        recorder.batches.clear()
        pod["metadata"]["labels"]["app"] = "api"
        (tmp_path / "pods.json").write_text(json.dumps([pod]))
        (endpoint,) = await recorder.next_batch()
        assert endpoint.value.labels["app"] == "api"  # type: ignore[attr-defined]
        write(tmp_path / "dump.yaml", account)
        gone = keys(await recorder.next_batch())
        assert gone
        assert set(gone.values()) == {None}
        assert all("prod" in str(key) for key in gone)
