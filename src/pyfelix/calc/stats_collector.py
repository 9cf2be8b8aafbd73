"""The stats collector: what the whole cluster holds, as Felix's StatsCollector counts it for
its ``felix_cluster_num_*`` metrics. Hosts are the nodes that have anything keyed by them (a
Node, a workload or host endpoint, a per-node configuration value); workload and host
endpoints, tiers, policies and profiles are counted over the cluster, not this node.

It only counts; the metrics are read from it when scraped (pyfelix.metrics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.syncer.api import Update


class StatsCollector:
    """Counts keys by kind, and keys by host, as the updates come."""

    def __init__(self) -> None:
        #: Per counted kind, the keys present (a key is counted once, however often updated).
        self._keys: dict[str, set[Hashable]] = {
            kind: set() for kind in ("workload_endpoints", "host_endpoints")
        }
        self._keys.update(tiers=set(), policies=set(), profiles=set())
        #: Per host, how many of its keys are present; the Node and configuration keys.
        self._by_host: Counter[str] = Counter()
        self._host_keys: set[Hashable] = set()

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.WorkloadEndpointKey, self._counted("workload_endpoints"))
        updates.register(model.HostEndpointKey, self._counted("host_endpoints"))
        updates.register(model.TierKey, self._counted("tiers"))
        updates.register(model.PolicyKey, self._counted("policies"))
        updates.register(model.ProfileRulesKey, self._counted("profiles"))
        updates.register(model.HostConfigKey, self._on_host_key)
        updates.register(model.ResourceKey, self._on_resource)

    def _counted(self, kind: str) -> Callable[[Update], None]:
        keys = self._keys[kind]

        endpoints = kind in ("workload_endpoints", "host_endpoints")

        def on_update(update: Update) -> None:
            key = update.key
            present = key in keys
            if update.value is None and present:
                keys.discard(key)
                if endpoints:
                    self._host_gone(getattr(key, "hostname", ""))
            elif update.value is not None and not present:
                keys.add(key)
                if endpoints:
                    self._by_host[getattr(key, "hostname", "")] += 1

        return on_update

    def _host_gone(self, host: str) -> None:
        self._by_host[host] -= 1
        if self._by_host[host] <= 0:
            del self._by_host[host]

    def _on_resource(self, update: Update) -> None:
        key = update.key
        if isinstance(key, model.ResourceKey) and key.kind == "Node":
            self._on_host_key(update)

    def _on_host_key(self, update: Update) -> None:
        """A Node or a per-node configuration value (few: their keys are kept)."""
        key = update.key
        host = getattr(key, "hostname", None) or getattr(key, "name", "")
        if not host:
            return
        if update.value is None:
            if key in self._host_keys:
                self._host_keys.discard(key)
                self._host_gone(host)
        elif key not in self._host_keys:
            self._host_keys.add(key)
            self._by_host[host] += 1

    @property
    def hosts(self) -> int:
        return len(self._by_host)

    def count(self, kind: str) -> int:
        """How many of a counted kind ("workload_endpoints", "host_endpoints", "tiers",
        "policies", "profiles") the cluster holds."""
        return len(self._keys[kind])
