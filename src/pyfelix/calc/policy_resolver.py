"""The policy resolver: for each local endpoint, its policies grouped into ordered tiers.

Tiers sort by order (unset last), then name; the default tier has order 1,000,000 unless a Tier
resource says otherwise. Within a tier, policies sort by order (unset last), then by
"name/namespace/kind". A policy applies to ingress, egress or both according to its types
(none listed: both). For host endpoints, untracked (doNotTrack), pre-DNAT and apply-on-forward
policies are listed separately, as Felix renders them into other chains.

Nothing is sent before the datastore is in sync: until then endpoints are only marked dirty.

Which policies match which endpoint is the active rules calculator's: its label index keeps
both directions, and the resolver reads them there when it sends (``reads_matches_from``). A
copy of its own, kept from the match callbacks as Felix keeps one, was a set for each
endpoint: with 10,000 policies selecting 200 endpoints, 100 MB.

Endpoints on the same policies (nearly all of them, on a real node) get the same tiers: they
are computed once per set of matching policies and shared (the same TierInfo and PolicyID
objects), until a policy or tier changes. Sorting 10,000 policies for each of 200 endpoints
was most of a large network-set cluster's time, and sharing the objects lets the renderer
group them once too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from collections.abc import Set as AbstractSet
from typing import Protocol

from pyfelix import messages, model
from pyfelix.calc.dispatcher import Dispatcher, endpoint_of, value_of
from pyfelix.calc.outputs import EndpointOutput
from pyfelix.model import EndpointKey
from pyfelix.resources.policy import BUILTIN_TIERS
from pyfelix.syncer.api import SyncStatus, Update

Endpoint = model.WorkloadEndpoint | model.HostEndpoint
EndpointMessage = messages.WorkloadEndpointUpdate | messages.HostEndpointUpdate


def policy_id(key: model.PolicyKey) -> messages.PolicyID:
    return messages.PolicyID(key.tier, key.name, key.namespace, key.kind)


def _policy_sort_key(item: tuple[model.PolicyKey, model.Policy]) -> tuple[float, str]:
    key, policy = item
    order = math.inf if policy.order is None else policy.order
    return (order, f"{key.name}/{key.namespace}/{key.kind}")


def _normal(policy: model.Policy) -> bool:
    return not (policy.do_not_track or policy.pre_dnat)


class MatchSource(Protocol):
    """Where the resolver reads the current matches (the active rules calculator)."""

    def policies_matching(self, endpoint: EndpointKey) -> Collection[model.PolicyKey]: ...

    def endpoints_matching(self, key: model.PolicyKey) -> AbstractSet[EndpointKey]: ...


class _NoMatches:
    """The source before one is given: nothing matches."""

    def policies_matching(self, endpoint: EndpointKey) -> Collection[model.PolicyKey]:
        return frozenset()

    def endpoints_matching(self, key: model.PolicyKey) -> AbstractSet[EndpointKey]:
        return frozenset()


#: Which policies each kind of tiers holds (host endpoints get all four, workloads normal).
WANTED: dict[str, Callable[[model.Policy], bool]] = {
    "normal": _normal,
    "untracked": lambda p: p.do_not_track,
    "pre-DNAT": lambda p: p.pre_dnat,
    "forward": lambda p: p.apply_on_forward and _normal(p),
}


class PolicyResolver:
    """Each local endpoint's policies, ordered into tiers as Felix orders them (tier order,
    then policy order, then name), sent once in sync and whenever a match, a policy or a tier
    changes; the rules themselves are the rule scanner's."""

    def __init__(self, output: EndpointOutput) -> None:
        self._out = output
        self._tiers: dict[str, model.Tier] = {}
        self._policies: dict[model.PolicyKey, model.Policy] = {}
        self._endpoints: dict[EndpointKey, Endpoint] = {}
        self._source: MatchSource = _NoMatches()
        self._dirty: set[EndpointKey] = set()
        self._sent: set[EndpointKey] = set()
        self._in_sync = False
        self._ids: dict[model.PolicyKey, messages.PolicyID] = {}
        self._tier_cache: dict[
            tuple[frozenset[model.PolicyKey], str], tuple[messages.TierInfo, ...]
        ] = {}

    def reads_matches_from(self, source: MatchSource) -> None:
        """Read the matches from ``source``, whose match callbacks come here (it is made
        after the resolver, as its callbacks are the resolver's)."""
        self._source = source

    def register_with(self, updates: Dispatcher, local_updates: Dispatcher) -> None:
        updates.register(model.TierKey, self._on_tier_update)
        updates.register(model.PolicyKey, self._on_policy_update)
        local_updates.register(model.WorkloadEndpointKey, self._on_endpoint_update)
        local_updates.register(model.HostEndpointKey, self._on_endpoint_update)
        updates.register_status(self._on_status)

    def _on_tier_update(self, update: Update) -> None:
        assert isinstance(update.key, model.TierKey)
        self.on_tier(update.key.name, value_of(update, model.Tier))

    def _on_policy_update(self, update: Update) -> None:
        assert isinstance(update.key, model.PolicyKey)
        self.on_policy(update.key, value_of(update, model.Policy))

    def _on_endpoint_update(self, update: Update) -> None:
        self.on_endpoint(*endpoint_of(update))

    def _on_status(self, status: SyncStatus) -> None:
        if status is SyncStatus.IN_SYNC:
            self.on_in_sync()

    def on_tier(self, name: str, tier: model.Tier | None) -> None:
        self._tier_cache.clear()
        if tier is None:
            self._tiers.pop(name, None)
        else:
            self._tiers[name] = tier
        matching = self._source.policies_matching
        for key in self._endpoints:
            if any(p.tier == name for p in matching(key)):
                self._dirty.add(key)

    def on_policy(self, key: model.PolicyKey, policy: model.Policy | None) -> None:
        self._tier_cache.clear()
        known = key in self._policies
        if policy is None:
            self._policies.pop(key, None)
            self._ids.pop(key, None)
        else:
            self._policies[key] = policy
        if known:
            # A new policy's endpoints are made dirty by its matches. This runs before the
            # calculator takes the change, so these are the endpoints it matched until now.
            self._dirty.update(self._source.endpoints_matching(key))

    def on_match_started(self, key: model.PolicyKey, endpoint: EndpointKey) -> None:
        self._dirty.add(endpoint)

    def on_matches_started(self, endpoint: EndpointKey, keys: list[model.PolicyKey]) -> None:
        """``on_match_started`` for each of ``keys``, in one call."""
        self._dirty.add(endpoint)

    def on_policy_matches_started(self, key: model.PolicyKey, endpoints: list[EndpointKey]) -> None:
        """``on_match_started`` for each of ``endpoints``, in one call."""
        self._dirty.update(endpoints)

    def on_match_stopped(self, key: model.PolicyKey, endpoint: EndpointKey) -> None:
        self._dirty.add(endpoint)

    def on_endpoint(self, key: EndpointKey, endpoint: Endpoint | None) -> None:
        if endpoint is None:
            self._endpoints.pop(key, None)
        else:
            self._endpoints[key] = endpoint
        self._dirty.add(key)

    def on_in_sync(self) -> None:
        self._in_sync = True

    def flush(self) -> None:
        """Send every dirty endpoint (only once in sync)."""
        if not self._in_sync:
            return
        for key in sorted(self._dirty, key=str):
            endpoint = self._endpoints.get(key)
            if endpoint is None:
                if key in self._sent:
                    self._sent.discard(key)
                    self._out.on_endpoint_remove(key)
                continue
            self._sent.add(key)
            self._out.on_endpoint_update(self._message(key, endpoint))
        self._dirty.clear()

    def _tier_info(
        self, tier: str, matched: list[tuple[model.PolicyKey, model.Policy]]
    ) -> messages.TierInfo:
        definition = self._tiers.get(tier)
        builtin = BUILTIN_TIERS.get(tier)
        if definition is not None:
            action = definition.default_action
        else:
            action = builtin[1] if builtin is not None else "Deny"
        ids = self._ids
        for k, _ in matched:
            if k not in ids:
                ids[k] = policy_id(k)
        ingress = tuple(ids[k] for k, p in matched if not p.types or "ingress" in p.types)
        egress = tuple(ids[k] for k, p in matched if not p.types or "egress" in p.types)
        return messages.TierInfo(tier, action, ingress, egress)

    def _tier_order(self, tier: str) -> tuple[float, str]:
        definition = self._tiers.get(tier)
        if definition is not None and definition.order is not None:
            return (definition.order, tier)
        builtin = BUILTIN_TIERS.get(tier)
        return (builtin[0] if builtin is not None else math.inf, tier)

    def tiers(self, key: EndpointKey, kind: str = "normal") -> tuple[messages.TierInfo, ...]:
        """The ordered tiers of the policies matching ``key`` of one kind (WANTED)."""
        matching = frozenset(self._source.policies_matching(key))
        cached = self._tier_cache.get((matching, kind))
        if cached is None:
            cached = self._tier_cache[(matching, kind)] = self._compute_tiers(
                matching, WANTED[kind]
            )
        return cached

    def _compute_tiers(
        self, matching: frozenset[model.PolicyKey], wanted: Callable[[model.Policy], bool]
    ) -> tuple[messages.TierInfo, ...]:
        by_tier: dict[str, list[tuple[model.PolicyKey, model.Policy]]] = {}
        for policy_key in matching:
            policy = self._policies.get(policy_key)
            if policy is not None and wanted(policy):
                by_tier.setdefault(policy.tier, []).append((policy_key, policy))
        return tuple(
            self._tier_info(tier, sorted(by_tier[tier], key=_policy_sort_key))
            for tier in sorted(by_tier, key=self._tier_order)
        )

    def _message(self, key: EndpointKey, endpoint: Endpoint) -> EndpointMessage:
        if isinstance(key, model.WorkloadEndpointKey):
            assert isinstance(endpoint, model.WorkloadEndpoint)
            return messages.WorkloadEndpointUpdate(key, endpoint, self.tiers(key))
        assert isinstance(endpoint, model.HostEndpoint)
        return messages.HostEndpointUpdate(
            key,
            endpoint,
            self.tiers(key),
            untracked_tiers=self.tiers(key, "untracked"),
            pre_dnat_tiers=self.tiers(key, "pre-DNAT"),
            forward_tiers=self.tiers(key, "forward"),
        )
