"""Update processors: v3 resources -> Felix model keys and values, shared by both datastores.

``convert(resource)`` gives the (key, value) pairs one resource stands for; a value of None means
"this key is absent" (a WorkloadEndpoint without addresses, a staged Delete). ``Converter``
remembers which keys each source produced, so a change that drops a key (a Node losing its
VXLAN address) emits that key's deletion, and deleting the source deletes them all.

One module per kind family, as libcalico-go's update processors are split: policies and tiers
(``policies``), profiles with namespaces and service accounts (``profiles``), endpoints and pods
(``endpoints``), network sets, pools, blocks and nodes (``networks``), Felix's configuration
(``config``); what they share is ``common``'s. This module dispatches by kind and tracks
sources.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, cast

import attrs

from pyfelix import model
from pyfelix.syncer.api import Update, UpdateType

if TYPE_CHECKING:
    from pyfelix.resources import Resource
from pyfelix.syncer.processors.common import (
    KV,
)
from pyfelix.syncer.processors.config import (
    _cluster_information,
    _felix_configuration,
)
from pyfelix.syncer.processors.endpoints import (
    _host_endpoint,
    _pod,
    _workload_endpoint,
    workload_key,
    workload_key_of,
    workload_label_dict,
)
from pyfelix.syncer.processors.networks import (
    _ip_pool,
    _ipam_block,
    _kubernetes_node,
    _network_set,
    _node,
    use_pod_cidr,
)
from pyfelix.syncer.processors.policies import (
    _admin_network_policy,
    _baseline_admin_network_policy,
    _kubernetes_cluster_network_policy,
    _kubernetes_network_policy,
    _policy,
    _tier,
    convert_rule,
    entity_selector,
    policy_selector,
)
from pyfelix.syncer.processors.profiles import (
    _namespace,
    _profile,
    _service_account,
    namespace_kvs,
    service_account_kvs,
)


def _passthrough(resource: Resource) -> list[KV]:
    key = model.ResourceKey(resource.KIND, resource.namespace, resource.name)
    return [(key, model.Passthrough(resource))]


#: Each kind's conversion, by its KIND (the classes are imported only with their kinds).
_CONVERTERS: dict[str, Callable[[Any], list[KV]]] = {
    "GlobalNetworkPolicy": _policy,
    "NetworkPolicy": _policy,
    "KubernetesNetworkPolicy": _kubernetes_network_policy,
    "StagedKubernetesNetworkPolicy": _kubernetes_network_policy,
    "KubernetesClusterNetworkPolicy": _kubernetes_cluster_network_policy,
    "AdminNetworkPolicy": _admin_network_policy,
    "BaselineAdminNetworkPolicy": _baseline_admin_network_policy,
    "Pod": _pod,
    "StagedGlobalNetworkPolicy": _policy,
    "StagedNetworkPolicy": _policy,
    "Tier": _tier,
    "Profile": _profile,
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
    "WorkloadEndpoint": _workload_endpoint,
    "HostEndpoint": _host_endpoint,
    "GlobalNetworkSet": _network_set,
    "NetworkSet": _network_set,
    "IPPool": _ip_pool,
    "IPAMBlock": _ipam_block,
    "Node": _node,
    "KubernetesNode": _kubernetes_node,
    "FelixConfiguration": _felix_configuration,
    "ClusterInformation": _cluster_information,
    "BGPConfiguration": _passthrough,
    "Service": _passthrough,
    "EndpointSlice": _passthrough,
    "BlockAffinity": _passthrough,
}


#: The profile every Calico datastore backend holds without its being written.
DEFAULT_ALLOW_PROFILE = "projectcalico-default-allow"


def default_allow_profile() -> Resource:
    """libcalico-go's DefaultAllowProfile: allow everything in and out."""
    from pyfelix.resources import Profile  # noqa: PLC0415

    return Profile.from_manifest(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "Profile",
            "metadata": {"name": DEFAULT_ALLOW_PROFILE},
            "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}]},
        }
    )


def convert(resource: Resource) -> list[KV]:
    """The model keys and values ``resource`` stands for (None values mean "absent")."""
    return _CONVERTERS[resource.KIND](resource)


@attrs.define(eq=False)
class Converter:
    """Tracks the keys each source (a datastore key or file identity) produced.

    Two sources producing the same model key (two pools with one CIDR) resolve as Calico's
    conflict-resolving cache does: the source that sorts lowest wins, and the other takes over
    when the winner goes away.
    """

    #: What each source produced, and each key's sources: its one (key, value) pair itself
    #: or its pairs in one flat tuple (key, value, key, value, ...), and the source itself or
    #: (for a key several sources produce) a list of them, as nearly every source produces one
    #: key and nearly every key has one source (a dict and a set each would be a fifth of a
    #: large snapshot's memory, a list for every key 6%, a tuple around every pair 2%, a
    #: tuple of pairs for each namespace and service account, with its profile's two keys,
    #: 2% more). A source is never a list: it is hashable.
    _produced: dict[Hashable, tuple[object, ...]] = attrs.Factory(dict)
    _owners: dict[Hashable, Hashable | list[Hashable]] = attrs.Factory(dict)
    #: Whether the values keep the resource they were converted from (``origin``), which only
    #: the validation filter reads. Input validated beforehand has no filter: there the
    #: origins would only keep every decoded resource alive in the graph (100,000 policies'
    #: are 30 MB).
    keep_origins: bool = True
    #: Whether a source that stands for nothing is remembered too (as no pairs), so that
    #: ``has_source`` answers for every source given: the streamed dry-run asks it which of
    #: its files' resources came first, where a set of every identity beside these maps
    #: was 8 MB for 300,000 sources. A running agent's deleted sources would pile up: it
    #: remembers none.
    remember_every_source: bool = False

    def has_source(self, source: Hashable) -> bool:
        """Whether ``source`` produced something (with ``remember_every_source``: was
        given at all)."""
        return source in self._produced

    def update(
        self, source: Hashable, resource: Resource | None, revision: str = ""
    ) -> list[Update]:
        """The Updates that bring downstream from the old to the new form of ``source``."""
        new = tuple(convert(resource)) if resource is not None else ()
        if not self.keep_origins:
            for _, value in new:
                _drop_origin(value)
        return self.produce(source, new, revision)

    def produce(self, source: Hashable, new: tuple[KV, ...], revision: str = "") -> list[Update]:
        """As ``update``, for a source already converted (``new``: what it stands for now)."""
        held = self._produced.get(source)
        old = None if held is None else _pairs(held)
        owners = self._owners
        if old is None:
            for key, _ in new:
                if key in owners:
                    break
            else:
                # A new source with keys of its own: what it produced is what goes downstream.
                if new or self.remember_every_source:
                    self._produced[source] = _held(new)
                for key, _ in new:
                    owners[key] = source
                return [Update(k, v, revision, UpdateType.NEW) for k, v in new if v is not None]
        old_keys = [key for key, _ in old or ()]
        keys = old_keys + [key for key, _ in new if key not in old_keys]
        new_keys = {key for key, _ in new}
        before = {key: self._winning_value(key) for key in keys}
        if new or self.remember_every_source:
            self._produced[source] = _held(new)
        else:
            self._produced.pop(source, None)
        for key in keys:
            sources = self._sources(key)
            if key in new_keys:
                if source not in sources:
                    sources.append(source)
            elif source in sources:
                sources.remove(source)
            if not sources:
                owners.pop(key, None)
            else:
                owners[key] = sources[0] if len(sources) == 1 else sources
        updates = []
        for key in keys:
            after = self._winning_value(key)
            if _same(before[key], after):
                continue
            updates.append(Update(key, after, revision, self._update_type(before[key], after)))
        return updates

    def produce_new(self, source: Hashable, kv: KV, revision: str = "") -> Update | None:
        """``produce`` for a source seen for the first time, standing for one key that no
        other source has and a value: its Update; None (and nothing done) for any other
        case, which ``produce`` then takes."""
        key, value = kv
        if value is None or source in self._produced:
            return None
        if key in self._owners:
            return None  # another source's key
        self._owners[key] = source
        self._produced[source] = kv
        return Update(key, value, revision, UpdateType.NEW)

    def _sources(self, key: Hashable) -> list[Hashable]:
        """The key's sources, as a new list."""
        held = self._owners.get(key)
        if held is None:
            return []
        return list(held) if isinstance(held, list) else [held]

    def _winning_value(self, key: Hashable) -> object | None:
        held = self._owners.get(key)
        if held is None:
            return None
        winner = min(held, key=repr) if isinstance(held, list) else held
        produced = self._produced.get(winner)
        for produced_key, value in () if produced is None else _pairs(produced):
            if produced_key == key:
                return value
        return None

    @staticmethod
    def _update_type(before: object | None, after: object | None) -> UpdateType:
        if after is None:
            return UpdateType.DELETED
        return UpdateType.NEW if before is None else UpdateType.UPDATED

    def keys(self) -> Iterator[Hashable]:
        return iter(self._owners)


def _held(pairs: tuple[KV, ...]) -> tuple[object, ...]:
    """The pairs a source produced, as ``Converter._produced`` holds them: one pair as it
    is, several in one flat tuple (its length tells the two apart)."""
    if len(pairs) == 1:
        return pairs[0]
    return tuple(itertools.chain.from_iterable(pairs))


def _pairs(held: tuple[object, ...]) -> tuple[KV, ...]:
    """The pairs a source produced, from what ``Converter._produced`` holds (``_held``)."""
    if len(held) == 2:
        return (held,)
    return cast(tuple[KV, ...], tuple(zip(held[::2], held[1::2], strict=True)))


#: Whether a value class records its resource in a field ``origin`` of its own (a
#: Passthrough's is the value itself).
_ORIGIN_FIELD: dict[type, bool] = {}


def _drop_origin(value: object) -> None:
    """``value`` without the resource it records: made by ``convert`` just now and seen by
    no one yet, so changed in place (an evolved copy would construct each value twice)."""
    cls = type(value)
    has = _ORIGIN_FIELD.get(cls)
    if has is None:
        has = _ORIGIN_FIELD[cls] = attrs.has(cls) and "origin" in attrs.fields_dict(cls)
    if has:
        object.__setattr__(value, "origin", None)


def _same(a: object | None, b: object | None) -> bool:
    """Equal values from equal resources: anything else is worth an update downstream."""
    return a == b and getattr(a, "origin", None) == getattr(b, "origin", None)


__all__ = [
    "DEFAULT_ALLOW_PROFILE",
    "KV",
    "Converter",
    "convert",
    "convert_rule",
    "default_allow_profile",
    "entity_selector",
    "namespace_kvs",
    "policy_selector",
    "service_account_kvs",
    "use_pod_cidr",
    "workload_key",
    "workload_key_of",
    "workload_label_dict",
]
