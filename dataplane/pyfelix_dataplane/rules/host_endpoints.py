"""Host endpoint chains and their dispatch trees: normal and forward (applyOnForward) chains in
filter, untracked (doNotTrack) chains in raw, pre-DNAT chains in mangle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyfelix import messages as m
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import (
    ANY_INTERFACE,
    dispatch_chains,
    endpoint_chain,
    endpoint_chain_name,
)
from pyfelix_dataplane.rules.groups import TierGroups, group_chains, tier_groups
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState


def host_endpoint_chains(
    dp: NodeState, settings: Settings, selectors: Mapping[m.PolicyID, str], seen: set[str]
) -> dict[str, list[Chain]]:
    """Per table ("filter", "raw", "mangle"): the host endpoints' chains with the policy group
    chains they use (filter's not in ``seen`` yet), then the dispatch trees to them."""
    filter_chains: list[Chain] = []
    mangle_chains: list[Chain] = []
    raw_chains: list[Chain] = []
    host_targets = _endpoint_chains(
        dp,
        settings,
        selectors,
        {"filter": seen, "raw": set(), "mangle": set()},
        {"filter": filter_chains, "raw": raw_chains, "mangle": mangle_chains},
    )
    for chains, root, kind, outbound in (
        (filter_chains, "cali-from-host-endpoint", "fh", False),
        (filter_chains, "cali-to-host-endpoint", "th", True),
        (filter_chains, "cali-from-hep-forward", "fhfw", False),
        (filter_chains, "cali-to-hep-forward", "thfw", True),
        (raw_chains, "cali-from-host-endpoint", "raw-fh", False),
        (raw_chains, "cali-to-host-endpoint", "raw-th", True),
        (mangle_chains, "cali-from-host-endpoint", "mangle-fh", False),
        (mangle_chains, "cali-to-host-endpoint", "mangle-th", True),
    ):
        # An all-interfaces ("*") host endpoint is the default: interfaces without their own
        # host endpoint end up in its chain.
        targets = dict(host_targets[kind])
        default = targets.pop(ANY_INTERFACE, None)
        end: tuple[Rule, ...] = ()
        if default and outbound and "fw" not in kind:
            # As Felix: an all-interfaces endpoint's normal policy never applies to traffic
            # from the host to a local workload.
            end = tuple(
                Rule(
                    (mt.Interface("out", f"{prefix}+"),),
                    mt.RETURN,
                    ("Skip egress WHEP policy for traffic to local workload",),
                )
                for prefix in settings.interface_prefixes
            )
        if default:
            end += (Rule(action=mt.Goto(default)),)
        chains.extend(dispatch_chains(root, targets, outbound=outbound, end=end))
    return {"filter": filter_chains, "raw": raw_chains, "mangle": mangle_chains}


def _endpoint_chains(
    dp: NodeState,
    settings: Settings,
    selectors: Mapping[m.PolicyID, str],
    seen: dict[str, set[str]],
    tables: dict[str, list[Chain]],
) -> dict[str, dict[str, str]]:
    """Host endpoint chains: normal and forward ones in filter, untracked (doNotTrack) ones in
    raw, pre-DNAT ones and the normal egress ones again in mangle; returns the dispatch targets
    for each table. As in Felix, an
    all-interfaces ("*") endpoint gets no untracked chains."""
    marks = settings.marks

    def grouped(
        tiers: Sequence[m.TierInfo], table: str, *, ingress: bool = True
    ) -> tuple[TierGroups, ...]:
        groups = tier_groups(tiers, selectors)
        tables[table].extend(group_chains(groups, marks, seen[table], ingress=ingress))
        return groups

    filter_chains, raw_chains, mangle_chains = tables["filter"], tables["raw"], tables["mangle"]
    targets: dict[str, dict[str, str]] = {
        k: {} for k in ("fh", "th", "fhfw", "thfw", "raw-fh", "raw-th", "mangle-fh", "mangle-th")
    }
    for update in sorted(dp.hosts.values(), key=lambda u: str(u.id)):
        interface = update.endpoint.name
        if interface == "*":
            interface = ANY_INTERFACE
        elif not interface:
            continue  # resolving host endpoints by expectedIPs needs the kernel's addresses
        if interface in targets["fh"]:
            continue  # two host endpoints for one interface: the first by id governs it
        profiles = update.endpoint.profile_ids
        normal, forward = grouped(update.tiers, "filter"), grouped(update.forward_tiers, "filter")
        for prefix, inbound, failsafe in (
            ("cali-th-", False, "cali-failsafe-out"),
            ("cali-fh-", True, "cali-failsafe-in"),
        ):
            name = endpoint_chain_name(prefix, interface)
            filter_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=normal,
                    profiles=profiles,
                    inbound=inbound,
                    marks=marks,
                    failsafe=failsafe,
                    drop_invalid=settings.drop_invalid,
                    allow=settings.allow,
                    deny=settings.deny,
                )
            )
            targets["fh" if inbound else "th"][interface] = name
        for prefix, inbound in (("cali-thfw-", False), ("cali-fhfw-", True)):
            name = endpoint_chain_name(prefix, interface)
            filter_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=forward,
                    profiles=(),
                    inbound=inbound,
                    marks=marks,
                    kind="forward",
                    drop_invalid=settings.drop_invalid,
                    allow=settings.allow,
                    deny=settings.deny,
                )
            )
            targets["fhfw" if inbound else "thfw"][interface] = name
        # The normal egress policy again in mangle, for host traffic that was DNAT'd: filter's
        # OUTPUT runs before the kernel re-routes it, mangle's POSTROUTING after (Felix's
        # HostEndpointToMangleEgressChains; RETURN rather than ACCEPT, and DROP: it is mangle).
        mangle_normal = grouped(update.tiers, "mangle", ingress=False)
        name = endpoint_chain_name("cali-th-", interface)
        mangle_chains.append(
            endpoint_chain(
                name,
                active=True,
                tiers=mangle_normal,
                profiles=profiles,
                inbound=False,
                marks=marks,
                failsafe="cali-failsafe-out",
                drop_invalid=settings.drop_invalid,
                allow="RETURN",
            )
        )
        targets["mangle-th"][interface] = name
        if update.untracked_tiers and interface != ANY_INTERFACE:
            untracked = grouped(update.untracked_tiers, "raw")
            for prefix, inbound in (("cali-th-", False), ("cali-fh-", True)):
                name = endpoint_chain_name(prefix, interface)
                raw_chains.append(
                    endpoint_chain(
                        name,
                        active=True,
                        tiers=untracked,
                        profiles=(),
                        inbound=inbound,
                        marks=marks,
                        kind="untracked",
                    )
                )
                targets["raw-fh" if inbound else "raw-th"][interface] = name
        if update.pre_dnat_tiers:
            prednat = grouped(update.pre_dnat_tiers, "mangle")
            name = endpoint_chain_name("cali-fh-", interface)
            mangle_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=prednat,
                    profiles=(),
                    inbound=True,
                    marks=marks,
                    kind="prednat",
                    drop_invalid=settings.drop_invalid,
                    # REJECT is a filter-table target: mangle's drops stay DROP.
                    allow=settings.mangle_allow,
                )
            )
            targets["mangle-fh"][interface] = name
    return targets
