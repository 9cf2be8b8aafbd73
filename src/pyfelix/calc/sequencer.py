"""The event sequencer: buffers the calculation graph's output per key and flushes it in the
one order that keeps the dataplane consistent.

Buffers are dicts keyed by what the message is about, so a burst of changes to one thing costs
one message, and an add followed by a remove before a flush cancels out (nothing is sent for a
thing the dataplane never had). The flush order (ARCHITECTURE.md section 4):

1. datastore-not-ready, configuration;
2. IP set creations and member deltas, active policies, active profiles, endpoint updates
   (so nothing is referenced before it exists);
3. removals in reverse: endpoints, profiles, policies, IP sets (so nothing referenced goes away);
4. service accounts, namespaces;
5. route removals, VTEP removals, VTEP additions, route updates (a route never points at a
   VTEP the dataplane does not have);
6. WireGuard endpoints, host metadata, IP pools, encapsulation, services, the global BGP
   configuration's service CIDRs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap

Emit = Callable[[m.ToDataplane], None]
K = TypeVar("K", bound=Hashable)


class KeyedBuffer(Generic[K]):
    """Pending updates and removals for one kind of thing, remembering what was sent."""

    def __init__(self, make_remove: Callable[[K], m.ToDataplane]) -> None:
        self._make_remove = make_remove
        self.updates: dict[K, m.ToDataplane] = {}
        self.removes: set[K] = set()
        self.sent: set[K] = set()

    def update(self, key: K, message: m.ToDataplane) -> None:
        self.removes.discard(key)
        self.updates[key] = message

    def remove(self, key: K) -> None:
        self.updates.pop(key, None)
        if key in self.sent:
            self.removes.add(key)

    def flush_updates(self, emit: Emit) -> None:
        for key, message in self.updates.items():
            self.sent.add(key)
            emit(message)
        self.updates.clear()

    def flush_removes(self, emit: Emit) -> None:
        for key in sorted(self.removes, key=str):
            self.sent.discard(key)
            emit(self._make_remove(key))
        self.removes.clear()


class EventSequencer:
    """Implements every output interface of calc/outputs.py; ``flush`` emits in order."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._not_ready = False
        self._config: m.ConfigUpdate | None = None
        # IP sets: full contents for sets not yet (re)created, deltas for sets already sent.
        self._ipsets_new: dict[str, tuple[str, set[str]]] = {}
        self._ipset_deltas: dict[str, tuple[set[str], set[str]]] = {}
        self._ipsets_removed: set[str] = set()
        self._ipsets_sent: set[str] = set()
        self.policies: KeyedBuffer[m.PolicyID] = KeyedBuffer(m.ActivePolicyRemove)
        self.profiles: KeyedBuffer[str] = KeyedBuffer(m.ActiveProfileRemove)
        self.workloads: KeyedBuffer[model.WorkloadEndpointKey] = KeyedBuffer(
            m.WorkloadEndpointRemove
        )
        self.hosts: KeyedBuffer[model.HostEndpointKey] = KeyedBuffer(m.HostEndpointRemove)
        self.service_accounts: KeyedBuffer[m.ServiceAccountID] = KeyedBuffer(m.ServiceAccountRemove)
        self.namespaces: KeyedBuffer[str] = KeyedBuffer(m.NamespaceRemove)
        self.routes: KeyedBuffer[str] = KeyedBuffer(m.RouteRemove)
        self.vteps: KeyedBuffer[str] = KeyedBuffer(m.VXLANTunnelEndpointRemove)
        self.wireguard: KeyedBuffer[str] = KeyedBuffer(m.WireguardEndpointRemove)
        self.host_metadata: KeyedBuffer[str] = KeyedBuffer(m.HostMetadataRemove)
        self.pools: KeyedBuffer[str] = KeyedBuffer(m.IPAMPoolRemove)
        self.services: KeyedBuffer[tuple[str, str]] = KeyedBuffer(
            lambda key: m.ServiceRemove(key[1], key[0])
        )
        self._encapsulation: m.Encapsulation | None = None
        self._sent_encapsulation: m.Encapsulation | None = None
        self._bgp_config: m.GlobalBGPConfigUpdate | None = None
        self._sent_bgp_config: m.GlobalBGPConfigUpdate | None = None

    # -------------------------------------------------------------------------- graph inputs

    def on_datastore_not_ready(self) -> None:
        self._not_ready = True

    def on_config_update(self, config: dict[str, str]) -> None:
        self._config = m.ConfigUpdate(FrozenMap(config))

    def on_ipset_added(self, set_id: str, set_type: str) -> None:
        self._ipsets_removed.discard(set_id)
        self._ipset_deltas.pop(set_id, None)
        self._ipsets_new[set_id] = (set_type, set())

    def on_ipset_member_added(self, set_id: str, member: str) -> None:
        new = self._ipsets_new.get(set_id)
        if new is not None:
            new[1].add(member)
            return
        added, removed = self._ipset_deltas.setdefault(set_id, (set(), set()))
        removed.discard(member)
        added.add(member)

    def on_ipset_member_removed(self, set_id: str, member: str) -> None:
        new = self._ipsets_new.get(set_id)
        if new is not None:
            new[1].discard(member)
            return
        added, removed = self._ipset_deltas.setdefault(set_id, (set(), set()))
        added.discard(member)
        removed.add(member)

    def on_ipset_removed(self, set_id: str) -> None:
        self._ipsets_new.pop(set_id, None)
        self._ipset_deltas.pop(set_id, None)
        if set_id in self._ipsets_sent:
            self._ipsets_removed.add(set_id)

    def on_encapsulation(self, encapsulation: m.Encapsulation) -> None:
        self._encapsulation = encapsulation

    def on_policy_update(self, update: m.ActivePolicyUpdate) -> None:
        self.policies.update(update.id, update)

    def on_policy_remove(self, policy: m.PolicyID) -> None:
        self.policies.remove(policy)

    def on_profile_update(self, update: m.ActiveProfileUpdate) -> None:
        self.profiles.update(update.id, update)

    def on_profile_remove(self, profile: str) -> None:
        self.profiles.remove(profile)

    def on_endpoint_update(self, update: m.WorkloadEndpointUpdate | m.HostEndpointUpdate) -> None:
        if isinstance(update, m.WorkloadEndpointUpdate):
            self.workloads.update(update.id, update)
        else:
            self.hosts.update(update.id, update)

    def on_endpoint_remove(self, key: model.EndpointKey) -> None:
        if isinstance(key, model.WorkloadEndpointKey):
            self.workloads.remove(key)
        else:
            self.hosts.remove(key)

    def on_route_update(self, update: m.RouteUpdate) -> None:
        self.routes.update(update.dst, update)

    def on_route_remove(self, dst: str) -> None:
        self.routes.remove(dst)

    def on_vtep_update(self, update: m.VXLANTunnelEndpointUpdate) -> None:
        self.vteps.update(update.node, update)

    def on_vtep_remove(self, node: str) -> None:
        self.vteps.remove(node)

    def on_host_metadata_update(self, update: m.HostMetadataUpdate) -> None:
        self.host_metadata.update(update.hostname, update)

    def on_host_metadata_remove(self, hostname: str) -> None:
        self.host_metadata.remove(hostname)

    def on_pool_update(self, update: m.IPAMPoolUpdate) -> None:
        self.pools.update(update.id, update)

    def on_pool_remove(self, cidr: str) -> None:
        self.pools.remove(cidr)

    def on_wireguard_update(self, update: m.WireguardEndpointUpdate) -> None:
        self.wireguard.update(update.hostname, update)

    def on_wireguard_remove(self, hostname: str) -> None:
        self.wireguard.remove(hostname)

    def on_service_update(self, update: m.ServiceUpdate) -> None:
        self.services.update((update.namespace, update.name), update)

    def on_service_remove(self, namespace: str, name: str) -> None:
        self.services.remove((namespace, name))

    def on_global_bgp_config(self, update: m.GlobalBGPConfigUpdate) -> None:
        self._bgp_config = update

    def on_namespace_update(self, update: m.NamespaceUpdate) -> None:
        self.namespaces.update(update.id, update)

    def on_namespace_remove(self, namespace: str) -> None:
        self.namespaces.remove(namespace)

    def on_service_account_update(self, update: m.ServiceAccountUpdate) -> None:
        self.service_accounts.update(update.id, update)

    def on_service_account_remove(self, account: m.ServiceAccountID) -> None:
        self.service_accounts.remove(account)

    # -------------------------------------------------------------------------------- flush

    def flush(self) -> None:
        emit = self._emit
        if self._not_ready:
            self._not_ready = False
            emit(m.DatastoreNotReady())
        if self._config is not None:
            emit(self._config)
            self._config = None
        for set_id, (set_type, members) in self._ipsets_new.items():
            self._ipsets_sent.add(set_id)
            emit(m.IPSetUpdate(set_id, set_type, frozenset(members)))
        self._ipsets_new.clear()
        for set_id, (added, removed) in self._ipset_deltas.items():
            if added or removed:
                emit(m.IPSetDeltaUpdate(set_id, frozenset(added), frozenset(removed)))
        self._ipset_deltas.clear()
        self.policies.flush_updates(emit)
        self.profiles.flush_updates(emit)
        self.workloads.flush_updates(emit)
        self.hosts.flush_updates(emit)
        self.workloads.flush_removes(emit)
        self.hosts.flush_removes(emit)
        self.profiles.flush_removes(emit)
        self.policies.flush_removes(emit)
        for set_id in sorted(self._ipsets_removed):
            self._ipsets_sent.discard(set_id)
            emit(m.IPSetRemove(set_id))
        self._ipsets_removed.clear()
        for buffer in (self.service_accounts, self.namespaces):
            buffer.flush_updates(emit)
            buffer.flush_removes(emit)
        self.routes.flush_removes(emit)
        self.vteps.flush_removes(emit)
        self.vteps.flush_updates(emit)
        self.routes.flush_updates(emit)
        for buffer in (self.wireguard, self.host_metadata, self.pools):
            buffer.flush_updates(emit)
            buffer.flush_removes(emit)
        if self._encapsulation is not None and self._encapsulation != self._sent_encapsulation:
            self._sent_encapsulation = self._encapsulation
            emit(self._encapsulation)
        self.services.flush_updates(emit)
        self.services.flush_removes(emit)
        if self._bgp_config is not None and self._bgp_config != self._sent_bgp_config:
            self._sent_bgp_config = self._bgp_config
            emit(self._bgp_config)
