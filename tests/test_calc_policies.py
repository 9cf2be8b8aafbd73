"""State tables for the active rules calculator and the policy resolver: which policies and
tiers each local endpoint gets, and when."""

from __future__ import annotations

import attrs

from pyfelix import model
from pyfelix.calc.active_rules import DENY_ALL, ActiveRulesCalculator
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.policy_resolver import PolicyResolver, policy_id
from pyfelix.syncer.api import SyncStatus, Update
from tests.calc_harness import Recorder, local, orders, wep


def policy(selector: str, order: float | None = None, tier: str = "default") -> model.Policy:
    allow = (model.Rule(action="allow"),)
    return model.Policy("", tier, order, allow, allow, selector, ("ingress", "egress"))


def gnp(name: str, tier: str = "default") -> model.PolicyKey:
    return model.PolicyKey(name, "", "GlobalNetworkPolicy", tier)


@attrs.define
class Rules:
    """What the active rules calculator says is active."""

    policies: dict[model.PolicyKey, model.Policy] = attrs.Factory(dict)
    profiles: dict[str, model.ProfileRules] = attrs.Factory(dict)


def active_rules_graph() -> tuple[Dispatcher, Dispatcher, Rules, PolicyResolver, Recorder]:
    rules, out = Rules(), Recorder()
    resolver = PolicyResolver(out)
    arc = ActiveRulesCalculator(
        on_policy_active=rules.policies.__setitem__,
        on_policy_inactive=rules.policies.__delitem__,
        on_profile_active=rules.profiles.__setitem__,
        on_profile_inactive=rules.profiles.__delitem__,
        on_match_started=resolver.on_match_started,
        on_match_stopped=resolver.on_match_stopped,
    )
    updates, local_updates = Dispatcher(), Dispatcher()
    resolver.register_with(updates, local_updates)
    arc.register_with(updates, local_updates)
    resolver.reads_matches_from(arc)
    return updates, local_updates, rules, resolver, out


TIERED = [
    Update(model.TierKey("security"), model.Tier(100.0, "Deny")),
    Update(gnp("security.gate", "security"), policy('app == "web"', 1, "security")),
    Update(gnp("b-late"), policy('app == "web"', 20)),
    Update(gnp("a-early"), policy('app == "web"', 10)),
    Update(gnp("unordered"), policy("all()")),
    Update(gnp("other-app"), policy('app == "db"', 1)),
    Update(gnp("zz.last", "zz"), policy("all()", 1, "zz")),
    Update(
        model.PolicyKey("staged:x", "", "StagedGlobalNetworkPolicy", "default"), policy("all()")
    ),
]


def test_active_rules_and_tiers_state() -> None:
    """Tiers by order (a tier without a resource last), policies by order then name (unset
    last); a policy no local endpoint matches is not active; staged ones never are; a profile
    that does not exist is a deny-all stand-in."""
    web = Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"}))
    for order in orders([*TIERED, web]):
        updates, local_updates, rules, resolver, out = active_rules_graph()
        for update in order:
            target = local_updates if isinstance(update.key, model.WorkloadEndpointKey) else updates
            target.on_update(update)
        updates.on_status(SyncStatus.IN_SYNC)
        resolver.flush()
        assert {k.name for k in rules.policies} == {
            "security.gate",
            "b-late",
            "a-early",
            "unordered",
            "zz.last",
        }
        assert rules.profiles == {"open": DENY_ALL}
        (endpoint,) = out.endpoints.values()
        tiers = [(t.name, [p.name for p in t.ingress_policies]) for t in endpoint.tiers]
        assert tiers == [
            ("security", ["security.gate"]),
            ("default", ["a-early", "b-late", "unordered"]),
            ("zz", ["zz.last"]),
        ]


def test_nothing_resolved_before_in_sync_and_a_relabel_moves_policies() -> None:
    updates, local_updates, rules, resolver, out = active_rules_graph()
    for update in TIERED:
        updates.on_update(update)
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"})))
    resolver.flush()
    assert out.endpoints == {}
    updates.on_status(SyncStatus.IN_SYNC)
    resolver.flush()
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "db"})))
    resolver.flush()
    assert policy_id(gnp("other-app")) in out.endpoints[local("web")].tiers[0].ingress_policies
    assert gnp("a-early") not in rules.policies


def test_a_policy_changed_or_deleted_after_in_sync_resolves_its_endpoints_again() -> None:
    """The resolver keeps no policy-to-endpoint index: a known policy's change finds its
    endpoints among the node's; a new one's come with its matches."""
    updates, local_updates, _, resolver, out = active_rules_graph()
    for update in TIERED:
        updates.on_update(update)
    local_updates.on_update(Update(local("web"), wep("caliweb", "10.65.0.2/32", {"app": "web"})))
    updates.on_status(SyncStatus.IN_SYNC)
    resolver.flush()

    def default_tier() -> list[str]:
        tiers = out.endpoints[local("web")].tiers
        return [p.name for t in tiers if t.name == "default" for p in t.ingress_policies]

    assert default_tier() == ["a-early", "b-late", "unordered"]
    updates.on_update(Update(gnp("b-late"), policy('app == "web"', 5)))
    resolver.flush()
    assert default_tier() == ["b-late", "a-early", "unordered"]
    updates.on_update(Update(gnp("a-early"), None))
    resolver.flush()
    assert default_tier() == ["b-late", "unordered"]
    updates.on_update(Update(gnp("new"), policy('app == "web"', 1)))
    resolver.flush()
    assert default_tier() == ["new", "b-late", "unordered"]
