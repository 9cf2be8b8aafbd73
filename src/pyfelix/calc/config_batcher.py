"""The config batcher: global and this node's Felix configuration, merged, sent once in sync.

Per-node values override global ones. Nothing is sent before the datastore is in sync (a partial
configuration could make the agent restart for nothing); afterwards every effective change is
sent. A ready flag of false means the datastore is not ready and the agent must stop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_config_of, value_of
from pyfelix.calc.outputs import ConfigOutput
from pyfelix.config import FelixConfig, parse_config
from pyfelix.config.params import BY_FELIX_NAME
from pyfelix.resources import FelixConfiguration, Resource
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.processors import convert


def environment_config(environ: Mapping[str, str]) -> dict[str, str]:
    """Felix parameters set as FELIX_<NAME> (case-insensitive), by their canonical names."""
    out = {}
    for key, value in environ.items():
        if key.upper().startswith("FELIX_"):
            param = BY_FELIX_NAME.get(key[6:].lower())
            if param is not None:
                out[param.felix] = value
    return out


def startup_config(
    resources: Iterable[Resource], hostname: str, environ: Mapping[str, str] | None = None
) -> FelixConfig:
    """The configuration the calculation graph is built with (RouteSource), from the
    FelixConfigurations at start-up: the global one, this node's, then the environment, merged
    as the batcher merges them (a later change restarts the agent, so this one holds)."""
    found = [r for r in resources if isinstance(r, FelixConfiguration)]
    text: dict[str, str] = {}
    for scope in ("default", f"node.{hostname}"):
        for config in (r for r in found if r.name == scope):
            for key, value in convert(config):
                if not isinstance(key, model.GlobalConfigKey | model.HostConfigKey):
                    continue
                if isinstance(value, model.ConfigValue) and value.value:
                    text[key.name] = value.value
    text.update(environment_config(os.environ if environ is None else environ))
    return parse_config(text)


class ConfigBatcher:
    def __init__(self, hostname: str, output: ConfigOutput) -> None:
        self._hostname = hostname
        self._out = output
        self._global: dict[str, str] = {}
        self._host: dict[str, str] = {}
        self._sent: dict[str, str] | None = None
        self._in_sync = False
        self._environment = environment_config(os.environ)

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.GlobalConfigKey, self._on_global_update)
        updates.register(model.HostConfigKey, self._on_host_update)
        updates.register(model.ReadyFlagKey, self._on_ready_update)
        updates.register_status(self._on_status)

    def _on_global_update(self, update: Update) -> None:
        assert isinstance(update.key, model.GlobalConfigKey)
        self.on_global(update.key.name, value_of(update, model.ConfigValue))

    def _on_host_update(self, update: Update) -> None:
        self.on_host(*host_config_of(update))

    def _on_ready_update(self, update: Update) -> None:
        self.on_ready_flag(value_of(update, model.ReadyFlag))

    def _on_status(self, status: SyncStatus) -> None:
        if status is SyncStatus.IN_SYNC:
            self.on_in_sync()

    def on_global(self, name: str, value: model.ConfigValue | None) -> None:
        self._set(self._global, name, value)

    def on_host(self, hostname: str, name: str, value: model.ConfigValue | None) -> None:
        if hostname == self._hostname:
            self._set(self._host, name, value)

    def on_ready_flag(self, flag: model.ReadyFlag | None) -> None:
        if flag is not None and not flag.ready:
            self._out.on_datastore_not_ready()

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
            self._out.on_config_update(merged)
