"""The config batcher: global and this node's Felix configuration, merged, sent once in sync.

Per-node values override global ones. Nothing is sent before the datastore is in sync (a partial
configuration could make the agent restart for nothing); afterwards every effective change is
sent. A ready flag of false means the datastore is not ready and the agent must stop.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyfelix import model
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.config.params import BY_FELIX_NAME


def environment_config(environ: Mapping[str, str]) -> dict[str, str]:
    """Felix parameters set as FELIX_<NAME> (case-insensitive), by their canonical names."""
    out = {}
    for key, value in environ.items():
        if key.upper().startswith("FELIX_"):
            param = BY_FELIX_NAME.get(key[6:].lower())
            if param is not None:
                out[param.felix] = value
    return out


class ConfigBatcher:
    def __init__(self, hostname: str, sequencer: EventSequencer) -> None:
        self._hostname = hostname
        self._seq = sequencer
        self._global: dict[str, str] = {}
        self._host: dict[str, str] = {}
        self._sent: dict[str, str] | None = None
        self._in_sync = False
        self._environment = environment_config(os.environ)

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
        """Global, then this node's, then the environment's (FELIX_<NAME>, any case)."""
        return {**self._global, **self._host, **self._environment}

    def _maybe_send(self) -> None:
        if not self._in_sync:
            return
        merged = self.merged
        if merged != self._sent:
            self._sent = merged
            self._seq.on_config_update(merged)
