"""The dispatcher: fans updates out to the components registered for each key type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pyfelix import model
from pyfelix.model import EndpointKey
from pyfelix.syncer.api import SyncStatus, Update

# A receiver returns True to stop the update going to the receivers after it (the hostname
# filter uses that, as Felix's does).
Receiver = Callable[[Update], bool | None]
T = TypeVar("T")


def value_of(update: Update, cls: type[T]) -> T | None:
    """The update's value if it is a ``cls`` (None for a deletion, or a value of another kind)."""
    value = update.value
    return value if isinstance(value, cls) else None


Endpoint = model.WorkloadEndpoint | model.HostEndpoint


def endpoint_of(update: Update) -> tuple[EndpointKey, Endpoint | None]:
    """A workload or host endpoint update's key and value (None: deleted)."""
    key, value = update.key, update.value
    assert isinstance(key, model.EndpointKey)
    assert value is None or isinstance(value, model.WorkloadEndpoint | model.HostEndpoint)
    return key, value


def host_ip_of(update: Update) -> tuple[str, model.ConfigValue | None, int]:
    """A node's IPv4 or IPv6 address update: (hostname, value or None, IP version)."""
    key = update.key
    assert isinstance(key, model.HostIPKey | model.HostIPv6Key)
    version = 6 if isinstance(key, model.HostIPv6Key) else 4
    return key.hostname, value_of(update, model.ConfigValue), version


def host_config_of(update: Update) -> tuple[str, str, model.ConfigValue | None]:
    """A per-node configuration update: (hostname, parameter, value or None)."""
    key = update.key
    assert isinstance(key, model.HostConfigKey)
    return key.hostname, key.name, value_of(update, model.ConfigValue)


def passthrough_of(update: Update, kind: str) -> tuple[str, str, Any] | None:
    """(namespace, name, resource or None) for a passed-through resource whose KIND is
    ``kind``; None for other kinds' updates. Named, not given as a class: a kind's classes
    are imported only where its resources are read."""
    key = update.key
    assert isinstance(key, model.ResourceKey)
    if key.kind != kind:
        return None
    passthrough = value_of(update, model.Passthrough)
    resource = passthrough.resource if passthrough is not None else None
    assert resource is None or kind == resource.KIND
    return key.namespace, key.name, resource


class StatusReceiver(Protocol):
    """What a calculator registers to hear the syncer's status (in sync, resyncing)."""

    def __call__(self, status: SyncStatus) -> None: ...


class Dispatcher:
    """Fans updates out by key type to the calculators registered for it, as Felix's
    dispatcher; a receiver that returns True filters the update out of the others."""

    def __init__(self) -> None:
        self._receivers: dict[type, list[Receiver]] = {}
        self._status_receivers: list[StatusReceiver] = []

    def register(self, key_type: type, receiver: Receiver) -> None:
        self._receivers.setdefault(key_type, []).append(receiver)

    def register_status(self, receiver: StatusReceiver) -> None:
        self._status_receivers.append(receiver)

    def on_update(self, update: Update) -> bool:
        """Feed ``update`` to its receivers in order; True if one of them filtered it out.
        A loop, not ``any`` over a generator: a snapshot's every update passes here, some
        twice (a hostname filter's receivers are dispatchers too)."""
        for receiver in self._receivers.get(type(update.key), ()):  # noqa: SIM110 (speed)
            if receiver(update):
                return True
        return False

    def on_updates(self, updates: Sequence[Update]) -> None:
        """``on_update`` for each, its loop written out here: one call a batch, not one an
        update (a snapshot's batches hold every resource)."""
        receivers = self._receivers
        for update in updates:
            for receiver in receivers.get(type(update.key), ()):
                if receiver(update):
                    break

    def on_status(self, status: SyncStatus) -> None:
        for receiver in self._status_receivers:
            receiver(status)
