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
from pyfelix.syncer.api import Update, UpdateType


class StatsCollector:
    """Counts keys by kind, and keys by host, as the updates come: a key counts from the
    update that creates it (NEW, with a value) to the one that removes it (a value of None on a
    key that had one: a deletion, or an update the validation filter found invalid). Counts,
    not sets of keys: a snapshot's hundreds of thousands of keys are not held twice."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
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
        counts, by_host = self._counts, self._by_host
        endpoints = kind in ("workload_endpoints", "host_endpoints")

        def on_update(update: Update) -> None:
            change = _change(update)
            if change:
                counts[kind] += change
                if endpoints:
                    host = update.key.hostname  # type: ignore[attr-defined]
                    by_host[host] += change
                    if by_host[host] <= 0:
                        del by_host[host]

        return on_update

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
                self._by_host[host] -= 1
                if self._by_host[host] <= 0:
                    del self._by_host[host]
        elif key not in self._host_keys:
            self._host_keys.add(key)
            self._by_host[host] += 1

    @property
    def hosts(self) -> int:
        return len(self._by_host)

    def count(self, kind: str) -> int:
        """How many of a counted kind ("workload_endpoints", "host_endpoints", "tiers",
        "policies", "profiles") the cluster holds."""
        return self._counts[kind]


def _change(update: Update) -> int:
    """+1 for an update that creates its key, -1 for one that removes it, else 0."""
    if update.value is None:
        return 0 if update.update_type in (UpdateType.NEW, UpdateType.UNKNOWN) else -1
    return 1 if update.update_type is UpdateType.NEW else 0
