"""The active rules calculator: which policies and profiles this node needs.

Policy selectors are matched against the *local* endpoints (with their profiles' labels). A
policy that matches at least one local endpoint is active: its rules go to the rule scanner and
the dataplane. A profile named by a local endpoint is active too; if it does not exist, a
deny-all stand-in takes its place, so an endpoint never falls open. Staged policies are never
matched: they are carried for visibility only.

Each policy/endpoint match change is passed to the policy resolver, which orders the matches;
it reads them from here (``policies_matching``) rather than keep a copy of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from collections.abc import Set as AbstractSet
from typing import cast

from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, endpoint_of, value_of
from pyfelix.calc.labelindex import (
    FewItemsLabelIndex,
    ItemMatchesCallback,
    MatchCallback,
    SelectorCallback,
    SelectorMatchesCallback,
)
from pyfelix.model import EndpointKey
from pyfelix.selector import SelectorError, parse_selector
from pyfelix.syncer.api import Update

Endpoint = model.WorkloadEndpoint | model.HostEndpoint
DENY_ALL = model.ProfileRules((model.Rule(action="deny"),), (model.Rule(action="deny"),))


class ActiveRulesCalculator:
    """Which policies and profiles are active on this node (matching a local endpoint), as
    Felix's calculator of that name: tells the rule scanner when one starts or stops being
    active, and the policy resolver which endpoints each policy matches. Ordering them is the
    resolver's."""

    def __init__(
        self,
        *,
        on_policy_active: Callable[[model.PolicyKey, model.Policy], None],
        on_policy_inactive: Callable[[model.PolicyKey], None],
        on_profile_active: Callable[[str, model.ProfileRules], None],
        on_profile_inactive: Callable[[str], None],
        on_match_started: Callable[[model.PolicyKey, EndpointKey], None],
        on_match_stopped: Callable[[model.PolicyKey, EndpointKey], None],
        on_endpoint_matches_started: Callable[[EndpointKey, list[model.PolicyKey]], None]
        | None = None,
        on_policy_matches_started: Callable[[model.PolicyKey, list[EndpointKey]], None]
        | None = None,
    ) -> None:
        """``on_endpoint_matches_started``, if given, takes a new endpoint's matches in one
        call, in place of an ``on_match_started`` for each; ``on_policy_matches_started`` a
        new or changed policy's."""
        self._policy_active = on_policy_active
        self._profile_active = on_profile_active
        self._profile_inactive = on_profile_inactive
        # The index hands back the ids it was given: policy keys as selectors, endpoint keys
        # as items (typed once here, not asserted for each of a snapshot's 2M matches); a
        # policy is active from its first match to its last, which the index tells.
        self._index = FewItemsLabelIndex(
            cast(MatchCallback, on_match_started),
            cast(MatchCallback, on_match_stopped),
            cast(SelectorCallback, self._first_match),
            cast(SelectorCallback, on_policy_inactive),
            on_item_matches_started=cast(ItemMatchesCallback | None, on_endpoint_matches_started),
            on_selector_matches_started=cast(
                SelectorMatchesCallback | None, on_policy_matches_started
            ),
        )
        self._policies: dict[model.PolicyKey, model.Policy] = {}
        self._profiles: dict[str, model.ProfileRules] = {}
        self._profile_users: dict[str, set[EndpointKey]] = {}
        self._endpoint_profiles: dict[EndpointKey, tuple[str, ...]] = {}

    def register_with(self, updates: Dispatcher, local_updates: Dispatcher) -> None:
        updates.register(model.PolicyKey, self._on_policy_update)
        updates.register(model.ProfileRulesKey, self._on_profile_rules_update)
        updates.register(model.ProfileLabelsKey, self._on_profile_labels_update)
        local_updates.register(model.WorkloadEndpointKey, self._on_endpoint_update)
        local_updates.register(model.HostEndpointKey, self._on_endpoint_update)

    def _on_policy_update(self, update: Update) -> None:
        assert isinstance(update.key, model.PolicyKey)
        self.on_policy(update.key, value_of(update, model.Policy))

    def _on_profile_rules_update(self, update: Update) -> None:
        assert isinstance(update.key, model.ProfileRulesKey)
        self.on_profile_rules(update.key.name, value_of(update, model.ProfileRules))

    def _on_profile_labels_update(self, update: Update) -> None:
        assert isinstance(update.key, model.ProfileLabelsKey)
        labels = value_of(update, model.ProfileLabels)
        self.on_profile_labels(update.key.name, labels.labels if labels else None)

    def _on_endpoint_update(self, update: Update) -> None:
        self.on_endpoint(*endpoint_of(update))

    # Policies.

    def on_policy(self, key: model.PolicyKey, policy: model.Policy | None) -> None:
        if key.staged:
            return
        old = self._policies.get(key)
        if policy is None:
            if old is not None:
                self._index.delete_selector(key)
                del self._policies[key]
            return
        try:
            selector = parse_selector(policy.selector)
        except SelectorError:
            selector = parse_selector("!all()")
        self._policies[key] = policy
        if old is not None and self._index.has_matches(key) and old != policy:
            self._policy_active(key, policy)
        self._index.update_selector(key, selector)

    def _first_match(self, key: model.PolicyKey) -> None:
        self._policy_active(key, self._policies[key])

    def policies_matching(self, endpoint: EndpointKey) -> Collection[model.PolicyKey]:
        """The policies matching ``endpoint`` now, as the index holds them (read-only)."""
        return cast(Collection[model.PolicyKey], self._index.item_matching_now(endpoint))

    def endpoints_matching(self, key: model.PolicyKey) -> AbstractSet[EndpointKey]:
        """The endpoints ``key`` matches now, as the index holds them (read-only)."""
        return cast(AbstractSet[EndpointKey], self._index.matching_now(key))

    # Profiles.

    def on_profile_rules(self, name: str, rules: model.ProfileRules | None) -> None:
        if rules is None:
            self._profiles.pop(name, None)
        else:
            self._profiles[name] = rules
        if name in self._profile_users:
            self._profile_active(name, self._profiles.get(name, DENY_ALL))

    def on_profile_labels(self, name: str, labels: Mapping[str, str] | None) -> None:
        if labels is None:
            self._index.delete_parent_labels(name)
        else:
            self._index.update_parent_labels(name, labels)

    # Local endpoints.

    def on_endpoint(self, key: EndpointKey, endpoint: Endpoint | None) -> None:
        profiles = endpoint.profile_ids if endpoint is not None else ()
        old = self._endpoint_profiles.get(key, ())
        for name in profiles:
            users = self._profile_users.setdefault(name, set())
            if not users:
                self._profile_active(name, self._profiles.get(name, DENY_ALL))
            users.add(key)
        for name in old:
            if name in profiles:
                continue
            users = self._profile_users.get(name, set())
            users.discard(key)
            if not users:
                self._profile_users.pop(name, None)
                self._profile_inactive(name)
        if endpoint is None:
            self._endpoint_profiles.pop(key, None)
            self._index.delete_item(key)
        else:
            self._endpoint_profiles[key] = profiles
            self._index.update_item(key, endpoint.labels, profiles)
