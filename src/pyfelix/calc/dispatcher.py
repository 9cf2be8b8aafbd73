"""The dispatcher: fans updates out to the components registered for each key type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from pyfelix.syncer.api import SyncStatus, Update

# A receiver returns True to stop the update going to the receivers after it (the hostname
# filter uses that, as Felix's does).
Receiver = Callable[[Update], bool | None]
T = TypeVar("T")


def value_of(update: Update, cls: type[T]) -> T | None:
    """The update's value if it is a ``cls`` (None for a deletion, or a value of another kind)."""
    value = update.value
    return value if isinstance(value, cls) else None


class StatusReceiver(Protocol):
    def __call__(self, status: SyncStatus) -> None: ...


class Dispatcher:
    def __init__(self) -> None:
        self._receivers: dict[type, list[Receiver]] = {}
        self._status_receivers: list[StatusReceiver] = []

    def register(self, key_type: type, receiver: Receiver) -> None:
        self._receivers.setdefault(key_type, []).append(receiver)

    def register_status(self, receiver: StatusReceiver) -> None:
        self._status_receivers.append(receiver)

    def on_update(self, update: Update) -> bool:
        """Feed ``update`` to its receivers in order; True if one of them filtered it out."""
        return any(receiver(update) for receiver in self._receivers.get(type(update.key), ()))

    def on_updates(self, updates: Sequence[Update]) -> None:
        for update in updates:
            self.on_update(update)

    def on_status(self, status: SyncStatus) -> None:
        for receiver in self._status_receivers:
            receiver(status)
