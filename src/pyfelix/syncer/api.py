"""The syncer contract: batches of Updates and SyncStatus changes, pushed to callbacks.

``Update.value`` is None when the key is absent (deleted, or rejected by validation); existence
is decided from the value alone, ``update_type`` is for statistics. The stream is eventually
consistent: a consumer may see any interleaving that ends at the datastore's current state.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence
from typing import Protocol

import attrs


class SyncStatus(enum.Enum):
    WAIT_FOR_DATASTORE = "wait-for-datastore"
    RESYNC_IN_PROGRESS = "resync-in-progress"
    IN_SYNC = "in-sync"


class UpdateType(enum.Enum):
    UNKNOWN = "unknown"
    NEW = "new"
    UPDATED = "updated"
    DELETED = "deleted"


@attrs.frozen
class Update:
    key: Hashable
    value: object | None
    revision: str = ""
    update_type: UpdateType = UpdateType.UNKNOWN

    @property
    def is_delete(self) -> bool:
        return self.value is None


class SyncerCallbacks(Protocol):
    """What a syncer (and every stage after it) is fed; both calls must not block."""

    def on_updates(self, updates: Sequence[Update]) -> None: ...

    def on_status(self, status: SyncStatus) -> None: ...
