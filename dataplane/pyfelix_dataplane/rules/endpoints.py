"""Endpoint chains (cali-tw-/cali-fw- for workloads, cali-th-/cali-fh- and the forward
variants for host endpoints) and the dispatch chains that send packets to them by interface.

Endpoint chain, in order: admin-down drop (an inactive endpoint gets nothing else); accept
established and related connections, drop invalid ones; clear the accept and pass marks; (from
workloads) drop VXLAN and IPIP unless allowed; per tier: clear pass, jump to each policy,
return if one accepted, drop at the end of the tier unless its default action is Pass; then the
profiles, each followed by return-if-accepted; finally drop.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from pyfelix import messages as m
from pyfelix.config import FelixConfig
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.groups import TierGroups, group_chains, group_targets, tier_groups
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.matches import match_mark, set_mark
from pyfelix_dataplane.rules.model import Chain, Rule, length_limited
from pyfelix_dataplane.rules.policy import profile_chain_name
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState

#: VXLANPort's default, for the chains of callers that do not render a workload's egress.
DEFAULT_VXLAN_PORT = FelixConfig().vxlan_port
ANY_INTERFACE = "any-interface-at-all"


def endpoint_chain_name(prefix: str, interface: str) -> str:
    return length_limited(prefix, interface)


@functools.lru_cache(maxsize=65536)
def endpoint_chain(
    name: str,
    *,
    active: bool,
    tiers: Sequence[TierGroups],
    profiles: Sequence[str],
    inbound: bool,
    marks: MarkBits,
    from_workload: bool = False,
    failsafe: str = "",
    drop_encap: tuple[bool, bool] = (True, True),
    kind: str = "normal",
    vxlan_port: int = DEFAULT_VXLAN_PORT,
    drop_invalid: bool = True,
    allow: str = "ACCEPT",
    deny: str = "DROP",
) -> Chain:
    """One endpoint chain for one direction (``inbound``: towards the endpoint).

    ``kind`` is Felix's chain type: "normal" (filter, profiles and final drop), "forward"
    (filter, forwarded traffic, allowed by default when no policy applies), "untracked" (raw:
    no conntrack, accepted packets skip conntrack with NOTRACK) or "prednat" (mangle). Only
    normal and forward chains drop at the end of a tier.
    """
    if not active:
        return Chain(name, (Rule(action=mt.Jump(deny), comment=("Endpoint admin disabled",)),))
    rules = []
    if kind != "untracked":
        established: mt.Match = (mt.ConnState("RELATED,ESTABLISHED"),)
        if allow != "ACCEPT":
            # Returning instead of accepting: the packet is flagged as allowed first.
            rules.append(Rule(established, set_mark(marks.accept)))
        rules.append(Rule(established, mt.Jump(allow)))
        if drop_invalid:
            rules.append(Rule((mt.ConnState("INVALID"),), mt.Jump(deny)))
    if failsafe:
        rules.append(Rule(action=mt.Jump(failsafe)))
    rules.append(Rule(action=set_mark(0, marks.accept | marks.pass_)))
    if from_workload:
        drop_vxlan, drop_ipip = drop_encap
        if drop_vxlan:
            rules.append(
                Rule(
                    (mt.Protocol("17"), mt.Ports("dst", str(vxlan_port))),
                    mt.Jump(deny),
                    (f"{deny.capitalize()} VXLAN encapped packets originating in workloads",),
                )
            )
        if drop_ipip:
            rules.append(
                Rule(
                    (mt.Protocol("4"),),
                    mt.Jump(deny),
                    (f"{deny.capitalize()} IPinIP encapped packets originating in workloads",),
                )
            )
    for tier in tiers:
        groups = tier.groups(inbound)
        if not groups:
            continue
        rules.append(Rule(action=set_mark(0, marks.pass_), comment=(f"Start of tier {tier.name}",)))
        for target in (chain for group in groups for chain in group_targets(group)):
            rules.append(Rule((match_mark(0, marks.pass_),), mt.Jump(target)))
            if kind == "untracked":
                rules.append(Rule((match_mark(marks.accept),), mt.NOTRACK))
            rules.append(
                Rule((match_mark(marks.accept),), mt.RETURN, ("Return if policy accepted",))
            )
        if tier.default_action != "Pass" and kind in ("normal", "forward"):
            rules.append(
                Rule(
                    (match_mark(0, marks.pass_),),
                    mt.Jump(deny),
                    (f"End of tier {tier.name}. {deny.capitalize()} if no policies passed packet",),
                )
            )
    if kind in ("untracked", "prednat"):
        return Chain(name, tuple(rules))
    if kind == "forward":
        if not any(t.groups(inbound) for t in tiers):
            rules.append(
                Rule(action=set_mark(marks.accept), comment=("Allow forwarded traffic by default",))
            )
            rules.append(Rule(action=mt.RETURN, comment=("Return for accepted forward traffic",)))
        return Chain(name, tuple(rules))
    for profile in profiles:
        rules.append(Rule(action=mt.Jump(profile_chain_name(profile, inbound))))
        rules.append(Rule((match_mark(marks.accept),), mt.RETURN, ("Return if profile accepted",)))
    rules.append(
        Rule(action=mt.Jump(deny), comment=(f"{deny.capitalize()} if no profiles matched",))
    )
    return Chain(name, tuple(rules))


def _common_prefix(names: Sequence[str]) -> str:
    """The characters every interface name starts with (a string prefix, not a path one)."""
    first, last = min(names), max(names)
    length = 0
    while length < min(len(first), len(last)) and first[length] == last[length]:
        length += 1
    return first[:length]


def dispatch_chains(
    root: str, targets: dict[str, str], *, outbound: bool, end: Sequence[Rule]
) -> list[Chain]:
    """A one-level tree by interface-name prefix: the root sends ``<prefix+char>+`` groups to a
    child chain that sends each interface to its chain (always --goto)."""
    root_rules, children = dispatch_tree(root, targets, "out" if outbound else "in", end=end)
    return [Chain(root, (*root_rules, *end)), *children]


def dispatch_tree(
    root: str,
    targets: Mapping[str, str],
    direction: mt.Direction,
    *,
    end: Sequence[Rule] = (),
    infix: str = "",
) -> tuple[list[Rule], list[Chain]]:
    """The root's rules and the child chains of a dispatch tree (the root chain is the
    caller's: Felix's endpoint-mark dispatch puts two trees in one). Children are named
    ``<root><infix>-<char>`` and end with ``end``."""
    names = sorted(targets)
    if not names:
        return [], []
    common = _common_prefix(names)
    bins: dict[str, list[str]] = {}
    for name in names:
        key = name[: len(common) + 1]
        bins.setdefault(key, []).append(name)
    root_rules: list[Rule] = []
    children: list[Chain] = []
    for key in sorted(bins):
        members = bins[key]
        if len(members) == 1:
            root_rules.append(
                Rule((mt.Interface(direction, members[0]),), mt.Goto(targets[members[0]]))
            )
            continue
        child = f"{root}{infix}-{key[len(common) :]}"
        root_rules.append(Rule((mt.Interface(direction, f"{key}+"),), mt.Goto(child)))
        rules = [Rule((mt.Interface(direction, n),), mt.Goto(targets[n])) for n in members]
        children.append(Chain(child, (*rules, *end)))
    return root_rules, children


def workload_chains(
    dp: NodeState, settings: Settings, selectors: Mapping[m.PolicyID, str], seen: set[str]
) -> list[Chain]:
    """The policy group chains the workloads use (those not in ``seen`` yet), each local
    workload's to- and from-workload chains, then the two dispatch trees."""
    marks = settings.marks
    filter_chains: list[Chain] = []
    endpoint_chains: list[Chain] = []
    to_workload: dict[str, str] = {}
    from_workload: dict[str, str] = {}
    drop_encap = (not settings.allow_vxlan_from_workloads, not settings.allow_ipip_from_workloads)
    # Workloads on the same policies share their tiers (the calculation graph sends the same
    # objects): they are grouped once.
    grouped: dict[tuple[m.TierInfo, ...], tuple[TierGroups, ...]] = {}
    for update in dp.workloads.values():
        interface = update.endpoint.name
        active = update.endpoint.state == "active"
        profiles = update.endpoint.profile_ids
        tw = endpoint_chain_name("cali-tw-", interface)
        fw = endpoint_chain_name("cali-fw-", interface)
        tiers = grouped.get(update.tiers)
        if tiers is None:
            tiers = grouped[update.tiers] = tier_groups(update.tiers, selectors)
            filter_chains += group_chains(tiers, marks, seen)
        endpoint_chains.append(
            endpoint_chain(
                tw,
                active=active,
                tiers=tiers,
                profiles=profiles,
                inbound=True,
                marks=marks,
                drop_invalid=settings.drop_invalid,
                allow=settings.allow,
                deny=settings.deny,
            )
        )
        endpoint_chains.append(
            endpoint_chain(
                fw,
                active=active,
                tiers=tiers,
                profiles=profiles,
                inbound=False,
                marks=marks,
                from_workload=True,
                drop_encap=drop_encap,
                vxlan_port=settings.vxlan_port,
                drop_invalid=settings.drop_invalid,
                allow=settings.allow,
                deny=settings.deny,
            )
        )
        to_workload[interface] = tw
        from_workload[interface] = fw
    filter_chains += endpoint_chains
    unknown = [Rule(action=mt.Jump(settings.deny), comment=("Unknown interface",))]
    filter_chains += dispatch_chains(
        "cali-from-wl-dispatch", from_workload, outbound=False, end=unknown
    )
    filter_chains += dispatch_chains("cali-to-wl-dispatch", to_workload, outbound=True, end=unknown)

    return filter_chains
