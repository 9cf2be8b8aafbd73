"""The config batcher: the Felix configuration's datastore sources and the environment,
merged in Felix's precedence (pyfelix.resources.config_sources), sent once in sync.

Nothing is sent before the datastore is in sync (a partial configuration could make the agent
restart for nothing); afterwards every effective change is sent. A selector-scoped
FelixConfiguration applies while its nodeSelector matches this node's labels, which follow
the node's Node resource. A ready flag of false means the datastore is not ready and the
agent must stop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_config_of, passthrough_of, value_of
from pyfelix.calc.outputs import ConfigOutput
from pyfelix.config import FelixConfig, parse_config
from pyfelix.resources import Resource
from pyfelix.resources.config_sources import (
    SelectorScoped,
    environment_config,
    merged,
    selector_config,
    startup_text,
)
from pyfelix.syncer.api import SyncStatus, Update

__all__ = ["ConfigBatcher", "environment_config", "startup_config"]


def startup_config(
    resources: Iterable[Resource], hostname: str, environ: Mapping[str, str] | None = None
) -> FelixConfig:
    """The configuration the calculation graph is built with (RouteSource), from the
    FelixConfigurations (and this node's labels) at start-up and the environment, merged as
    the batcher merges them (a later change restarts the agent, so this one holds)."""
    return parse_config(
        startup_text(resources, hostname, os.environ if environ is None else environ)
    )


class ConfigBatcher:
    """Felix's configuration from the datastore's sources and the environment, merged in
    Felix's precedence and sent as one ConfigUpdate once in sync and at every effective
    change; a datastore not ready stops the agent."""

    def __init__(self, hostname: str, output: ConfigOutput) -> None:
        self._hostname = hostname
        self._out = output
        self._global: dict[str, str] = {}
        self._host: dict[str, str] = {}
        #: Selector-scoped FelixConfigurations by name, and this node's labels (None until
        #: its Node is known).
        self._scoped: dict[str, SelectorScoped] = {}
        self._labels: Mapping[str, str] | None = None
        self._sent: dict[str, str] | None = None
        self._in_sync = False
        self._environment = environment_config(os.environ)

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.GlobalConfigKey, self._on_global_update)
        updates.register(model.HostConfigKey, self._on_host_update)
        updates.register(model.ReadyFlagKey, self._on_ready_update)
        updates.register(model.ResourceKey, self._on_resource_update)
        updates.register_status(self._on_status)

    def _on_global_update(self, update: Update) -> None:
        assert isinstance(update.key, model.GlobalConfigKey)
        self.on_global(update.key.name, value_of(update, model.ConfigValue))

    def _on_host_update(self, update: Update) -> None:
        self.on_host(*host_config_of(update))

    def _on_resource_update(self, update: Update) -> None:
        found = passthrough_of(update, "FelixConfiguration")
        if found is not None:
            _, name, config = found
            entry = SelectorScoped.of(config) if config is not None else None
            if entry is None:
                self._scoped.pop(name, None)
            else:
                self._scoped[name] = entry
            self._maybe_send()
            return
        node = passthrough_of(update, "Node")
        if node is not None and node[1] == self._hostname:
            self._labels = dict(node[2].labels) if node[2] is not None else None
            self._maybe_send()

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
        """Global, then the selector-scoped one that selects this node, then this node's,
        then the environment's (FELIX_<NAME>, any case)."""
        selected = selector_config(self._scoped.values(), self._labels)
        return merged(self._global, selected, self._host, self._environment)

    def _maybe_send(self) -> None:
        if not self._in_sync:
            return
        merged = self.merged
        if merged != self._sent:
            self._sent = merged
            self._out.on_config_update(merged)
