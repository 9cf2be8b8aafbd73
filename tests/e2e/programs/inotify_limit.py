"""The file syncer past the inotify watch limit: run as root of a user namespace of its own,
it lowers that namespace's max_inotify_watches (no other process's limit changes), syncs a
directory, then adds more subdirectories than watches are left, each with a manifest. It
prints one line per tier it saw arrive, then "alive"."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import trio
import yaml

from pyfelix import model
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.files import FileSyncer

WATCHES = 3


class Printer:
    def on_updates(self, updates: Sequence[Update]) -> None:
        for update in updates:
            if isinstance(update.key, model.TierKey) and update.value is not None:
                print(f"tier {update.key.name}", flush=True)

    def on_status(self, status: SyncStatus) -> None:
        pass


def tier(path: Path, name: str) -> None:
    doc = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "Tier",
        "metadata": {"name": name},
        "spec": {"order": 10},
    }
    path.write_text(yaml.safe_dump(doc))


async def main(root: Path) -> None:
    tier(root / "first.yaml", "first")
    syncer = FileSyncer(root, Printer(), poll_interval=0.2)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        for index in range(WATCHES + 2):
            sub = root / f"sub{index}"
            sub.mkdir()
            tier(sub / "t.yaml", f"sub{index}")
            await trio.sleep(0.1)
        await trio.sleep(2)
        print("alive", flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    Path("/proc/sys/user/max_inotify_watches").write_text(f"{WATCHES}\n")
    trio.run(main, Path(sys.argv[1]))
