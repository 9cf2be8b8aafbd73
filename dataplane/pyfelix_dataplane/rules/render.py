"""The whole rendered dataplane: every table's chains for IPv4 and IPv6, and the ipset script.

Layout as Felix's (see ARCHITECTURE.md section 6), split as Felix's rules package splits it:
policy and profile chains (policy.py), workload chains and their dispatch trees
(endpoints.py), host endpoint chains and theirs (host_endpoints.py), each table's static
chains: hooks' targets, failsafes, RPF, NAT-outgoing (static.py). This module puts each
table together in a fixed order and writes the restore scripts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import attrs

from pyfelix.config import FelixConfig
from pyfelix_dataplane.rules import ipsets as ipset_rendering
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules import static
from pyfelix_dataplane.rules.endpoints import workload_chains
from pyfelix_dataplane.rules.groups import selectors_of
from pyfelix_dataplane.rules.host_endpoints import host_endpoint_chains
from pyfelix_dataplane.rules.ipsets import special_ipsets
from pyfelix_dataplane.rules.ipvs import ipvs_filter_chains
from pyfelix_dataplane.rules.model import Chain, Rule, restore_pieces, restore_script
from pyfelix_dataplane.rules.policy import RuleContext, policy_chains, profile_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState

TABLES = ("raw", "mangle", "nat", "filter")
HOOKS = {
    "raw": (("PREROUTING", "cali-PREROUTING"), ("OUTPUT", "cali-OUTPUT")),
    "mangle": (("PREROUTING", "cali-PREROUTING"), ("POSTROUTING", "cali-POSTROUTING")),
    "nat": (("PREROUTING", "cali-PREROUTING"), ("OUTPUT", "cali-OUTPUT")),
    "filter": (("INPUT", "cali-INPUT"), ("FORWARD", "cali-FORWARD"), ("OUTPUT", "cali-OUTPUT")),
}


@attrs.frozen
class Rendered:
    """iptables-restore text per IP version and table, and the ipset restore script."""

    iptables: Mapping[int, Mapping[str, str]]
    ipset_restore: str
    chains: Mapping[int, Mapping[str, tuple[Chain, ...]]]
    ipsets: Mapping[str, tuple[str, frozenset[str]]]


def _hooks(table: str, settings: Settings) -> list[str]:
    """The lines into the kernel's chains: the jumps inserted at their top, then the rules
    kept at their end."""
    lines = []
    for kernel_chain, ours in reversed(HOOKS[table]):
        hook = Chain(kernel_chain, (Rule(action=mt.Jump(ours)),))
        (line,) = hook.lines()
        lines.append(line.replace("-A ", "-I ", 1))
    for appended in static.kernel_appends(settings).get(table, ()):
        lines.extend(appended.lines())
    return lines


def ip_versions(config: FelixConfig) -> tuple[int, ...]:
    """IPv4 always; IPv6 too unless FelixConfiguration's ipv6Support is false."""
    return (4, 6) if config.ipv6_support else (4,)


def render(
    dp: NodeState, versions: Iterable[int] | None = None, *, with_text: bool = True
) -> Rendered:
    """Chains per version and table, and the kernel's ipsets; ``with_text`` also builds the
    restore scripts (the dry-run prints them). ``versions`` defaults to what the
    configuration enables."""
    settings = Settings.for_node(dp)
    if versions is None:
        versions = ip_versions(dp.config)
    iptables: dict[int, dict[str, str]] = {}
    chains: dict[int, dict[str, tuple[Chain, ...]]] = {}
    for version in versions:
        chains[version] = render_chains(dp, version, settings)
        if with_text:
            iptables[version] = {
                table: restore_script(table, chains[version][table], _hooks(table, settings))
                for table in TABLES
            }
    versions = tuple(chains)
    maxelem = dp.config.max_ipset_size
    script = ipset_rendering.restore_script(_all_sets(dp), versions, maxelem) if with_text else ""
    return Rendered(iptables, script, chains, kernel_ipsets(dp, versions))


#: A restore script made piece by piece each time it is called (see ``script_pieces``).
Pieces = Callable[[], Iterator[str]]


def script_pieces(
    dp: NodeState, sorted_members: Mapping[str, Sequence[str]] | None = None
) -> tuple[dict[int, dict[str, Pieces]], Pieces]:
    """``render``'s restore scripts (per version and table, and the IP sets'), each made
    when it is read, one IP version's chains held at a time: a writer that takes them one
    by one, versions in order, never holds more than a piece of the text. A cluster's filter
    tables are 18 MB a version, and with their lines and the IP sets' script the dry-run's
    peak. ``dp`` must not change until the last is read. ``sorted_members``: sets' members
    sorted already (the dry-run's view lists them), which the script then sorts in one pass
    (sorting a dump's 1.1M network set members again was 0.15 s)."""
    settings = Settings.for_node(dp)
    held: dict[int, dict[str, tuple[Chain, ...]]] = {}

    def table(version: int, name: str) -> Pieces:
        def pieces() -> Iterator[str]:
            if version not in held:
                held.clear()
                held[version] = render_chains(dp, version, settings)
            return restore_pieces(name, held[version][name], _hooks(name, settings))

        return pieces

    versions = ip_versions(dp.config)
    iptables = {version: {name: table(version, name) for name in TABLES} for version in versions}

    def ipsets() -> Iterator[str]:
        sets: Mapping[str, tuple[str, Collection[str]]] = _all_sets(dp)
        if sorted_members:
            sets = {i: (kind, sorted_members.get(i, m)) for i, (kind, m) in sets.items()}
        return ipset_rendering.restore_pieces(sets, versions, dp.config.max_ipset_size)

    return iptables, ipsets


def render_chains(
    dp: NodeState, version: int, settings: Settings | None = None
) -> dict[str, tuple[Chain, ...]]:
    """One IP version's chains per table (the Linux driver renders these for a state in which
    host endpoints have been placed on the kernel's interfaces)."""
    settings = settings or Settings.for_node(dp)
    # REJECT is a filter-table target: untracked and pre-DNAT policies drop.
    ctx_other = RuleContext(
        version,
        settings.marks,
        settings.log_prefix,
        log_rate=settings.log_rate,
        log_burst=settings.log_burst,
    )
    ctx = attrs.evolve(ctx_other, deny=settings.deny)
    policies = sorted(dp.policies.values(), key=lambda p: str(p.id))
    profiles = sorted(dp.profiles.values(), key=lambda p: p.id)
    selectors = selectors_of(dp.policies)
    seen: set[str] = set()  # the policy group chains in filter so far
    workloads = workload_chains(dp, settings, selectors, seen)
    hosts = host_endpoint_chains(dp, settings, selectors, seen)
    filter_chains = [
        *(c for p in policies for c in policy_chains(p, ctx)),
        *(c for p in profiles for c in profile_chains(p, ctx)),
        *workloads,
        *hosts["filter"],
        *static.filter_chains(dp, settings, version),
        *ipvs_filter_chains(dp, settings, version),
    ]
    raw_chains = [
        *hosts["raw"],
        *(c for p in policies if p.policy.do_not_track for c in policy_chains(p, ctx_other)),
        *static.raw_chains(dp, settings, version),
    ]
    # The egress policies and profiles of placed host endpoints, again in mangle (their
    # chains there come from the same rules, with DROP: REJECT is a filter-table target).
    placed = [u for u in dp.hosts.values() if u.endpoint.name]
    egress = {pid for u in placed for tier in u.tiers for pid in tier.egress_policies}
    egress_profiles = {name for u in placed for name in u.endpoint.profile_ids}
    mangle_chains = [
        *hosts["mangle"],
        *(c for p in policies if p.policy.pre_dnat for c in policy_chains(p, ctx_other)),
        *(
            policy_chains(p, ctx_other)[1]
            for p in policies
            if p.id in egress and not p.policy.pre_dnat and not p.policy.do_not_track
        ),
        *(profile_chains(p, ctx_other)[1] for p in profiles if p.id in egress_profiles),
        *static.mangle_chains(settings, version),
    ]
    nat_chains = static.nat_chains(dp, settings, version, special_ipsets(dp))
    tables = {
        "raw": raw_chains,
        "mangle": mangle_chains,
        "nat": nat_chains,
        "filter": filter_chains,
    }
    return {table: tuple(chains) for table, chains in tables.items()}


def _all_sets(dp: NodeState) -> dict[str, tuple[str, set[str]]]:
    return {k: (t, members) for k, (t, members) in dp.ipsets.items()} | special_ipsets(dp)


def kernel_ipsets(dp: NodeState, versions: Iterable[int]) -> dict[str, tuple[str, frozenset[str]]]:
    """The kernel's IP sets (per version, named as Felix names them) with their members."""
    return {
        ipset_rendering.ipset_name(set_id, version): (
            set_type,
            frozenset(ipset_rendering.members_of_version(members, version)),
        )
        for version in versions
        for set_id, (set_type, members) in _all_sets(dp).items()
    }


def kernel_ipsets_of(
    dp: NodeState, versions: Iterable[int], set_ids: Iterable[str]
) -> dict[str, tuple[str, frozenset[str]] | None]:
    """The kernel's sets for just ``set_ids``, as ``kernel_ipsets`` has them; None for a set
    that is no longer wanted. What an apply after a few changes needs, without walking every
    member of every set."""
    special: dict[str, tuple[str, set[str]]] | None = None
    result: dict[str, tuple[str, frozenset[str]] | None] = {}
    for set_id in set_ids:
        entry = dp.ipsets.get(set_id)
        if entry is None and set_id in ipset_rendering.SPECIAL_IDS:
            special = special if special is not None else special_ipsets(dp)
            entry = special.get(set_id)
        for version in versions:
            name = ipset_rendering.ipset_name(set_id, version)
            if entry is None:
                result[name] = None
                continue
            set_type, members = entry
            result[name] = (
                set_type,
                frozenset(ipset_rendering.members_of_version(members, version)),
            )
    return result
