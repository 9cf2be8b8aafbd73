"""The config batcher: global and this node's Felix configuration, merged, sent once in sync.

Per-node values override global ones. Nothing is sent before the datastore is in sync (a partial
configuration could make the agent restart for nothing); afterwards every effective change is
sent. A ready flag of false means the datastore is not ready and the agent must stop.
"""

from __future__ import annotations

from pyfelix import model
from pyfelix.sequencer import EventSequencer


class ConfigBatcher:
    def __init__(self, hostname: str, sequencer: EventSequencer) -> None:
        self._hostname = hostname
        self._seq = sequencer
        self._global: dict[str, str] = {}
        self._host: dict[str, str] = {}
        self._sent: dict[str, str] | None = None
        self._in_sync = False

    def on_global(self, name: str, value: model.ConfigValue | None) -> None:
        self._set(self._global, name, value)

    def on_host(self, hostname: str, name: str, value: model.ConfigValue | None) -> None:
        if hostname == self._hostname:
            self._set(self._host, name, value)

    def on_ready_flag(self, flag: model.ReadyFlag | None) -> None:
        if flag is not None and not flag.ready:
            self._seq.on_datastore_not_ready()

    def _set(self, target: dict[str, str], name: str, value: model.ConfigValue | None) -> None:
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value.value
        self._maybe_send()

    def on_in_sync(self) -> None:
        self._in_sync = True
        self._maybe_send()

    @property
    def merged(self) -> dict[str, str]:
        return {**self._global, **self._host}

    def _maybe_send(self) -> None:
        if not self._in_sync:
            return
        merged = self.merged
        if merged != self._sent:
            self._sent = merged
            self._seq.on_config_update(merged)
