"""The whole rendered dataplane: every table's chains for IPv4 and IPv6, and the ipset script.

Layout as Felix's (see ARCHITECTURE.md section 6): top-level chains hooked into the kernel's,
failsafe chains, dispatch trees to the endpoint chains, policy and profile chains, the raw
table's RPF check and untracked policy, mangle's pre-DNAT policy, nat's cali-nat-outgoing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from pyfelix.config import FelixConfig, ProtoPort
from pyfelix_dataplane.rules import ipsets as ipset_rendering
from pyfelix_dataplane.rules.endpoints import (
    ANY_INTERFACE,
    dispatch_chains,
    endpoint_chain,
    endpoint_chain_name,
)
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.model import Chain, Rule, restore_script
from pyfelix_dataplane.rules.policy import (
    RuleContext,
    match_mark,
    policy_chains,
    profile_chains,
    set_mark,
)
from pyfelix_dataplane.state import NodeState

TABLES = ("raw", "mangle", "nat", "filter")
MASQ_POOLS = "masq-ipam-pools"
ALL_POOLS = "all-ipam-pools"
VXLAN_HOSTS = "all-vxlan-net"
_DEFAULTS = FelixConfig()
HOOKS = {
    "raw": (("PREROUTING", "cali-PREROUTING"), ("OUTPUT", "cali-OUTPUT")),
    "mangle": (("PREROUTING", "cali-PREROUTING"), ("POSTROUTING", "cali-POSTROUTING")),
    "nat": (("PREROUTING", "cali-PREROUTING"), ("OUTPUT", "cali-OUTPUT")),
    "filter": (("INPUT", "cali-INPUT"), ("FORWARD", "cali-FORWARD"), ("OUTPUT", "cali-OUTPUT")),
}


@attrs.frozen
class Settings:
    """The FelixConfiguration values rendering depends on, with Felix's defaults."""

    marks: MarkBits = attrs.Factory(MarkBits.from_mask)
    endpoint_to_host_action: str = "DROP"
    failsafe_in: tuple[ProtoPort, ...] = _DEFAULTS.failsafe_inbound_host_ports
    failsafe_out: tuple[ProtoPort, ...] = _DEFAULTS.failsafe_outbound_host_ports
    log_prefix: str = _DEFAULTS.log_prefix
    allow_vxlan_from_workloads: bool = False
    allow_ipip_from_workloads: bool = False
    interface_prefix: str = "cali"

    @classmethod
    def from_config(cls, config: FelixConfig) -> Settings:
        return cls(
            marks=MarkBits.from_mask(config.iptables_mark_mask),
            endpoint_to_host_action=config.default_endpoint_to_host_action.upper(),
            failsafe_in=config.failsafe_inbound_host_ports,
            failsafe_out=config.failsafe_outbound_host_ports,
            log_prefix=config.log_prefix,
            allow_vxlan_from_workloads=config.allow_vxlan_packets_from_workloads,
            allow_ipip_from_workloads=config.allow_ipip_packets_from_workloads,
            interface_prefix=config.interface_prefix.split(",")[0],
        )


@attrs.frozen
class Rendered:
    """iptables-restore text per IP version and table, and the ipset restore script."""

    iptables: Mapping[int, Mapping[str, str]]
    ipset_restore: str
    chains: Mapping[int, Mapping[str, tuple[Chain, ...]]]
    ipsets: Mapping[str, tuple[str, frozenset[str]]]


def _failsafe(name: str, ports: Iterable[ProtoPort], inbound: bool, version: int) -> Chain:
    rules = []
    for entry in ports:
        if entry.net and (":" in entry.net) != (version == 6):
            continue
        match = f"-p {entry.protocol} -m multiport --destination-ports {entry.port}"
        if entry.net:
            match += f" {'--source' if inbound else '--destination'} {entry.net}"
        rules.append(Rule(match, "--jump ACCEPT"))
    return Chain(name, tuple(rules))


def _hooks(table: str) -> list[str]:
    lines = []
    for kernel_chain, ours in reversed(HOOKS[table]):
        hook = Chain(kernel_chain, (Rule(action=f"--jump {ours}"),))
        (line,) = hook.lines()
        lines.append(line.replace("-A ", "-I ", 1))
    if table == "nat":
        hook = Chain("POSTROUTING", (Rule(action="--jump cali-POSTROUTING"),))
        lines.extend(hook.lines())
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
    settings = Settings.from_config(dp.config)
    if versions is None:
        versions = ip_versions(dp.config)
    iptables: dict[int, dict[str, str]] = {}
    chains: dict[int, dict[str, tuple[Chain, ...]]] = {}
    for version in versions:
        chains[version] = render_chains(dp, version, settings)
        if with_text:
            iptables[version] = {
                table: restore_script(table, chains[version][table], _hooks(table))
                for table in TABLES
            }
    versions = tuple(chains)
    script = ipset_rendering.restore_script(_all_sets(dp), versions) if with_text else ""
    return Rendered(iptables, script, chains, kernel_ipsets(dp, versions))


def render_chains(
    dp: NodeState, version: int, settings: Settings | None = None
) -> dict[str, tuple[Chain, ...]]:
    """One IP version's chains per table (the Linux driver renders these for a state in which
    host endpoints have been placed on the kernel's interfaces)."""
    settings = settings or Settings.from_config(dp.config)
    tables = _render_version(dp, settings, version, _special_ipsets(dp))
    return {table: tuple(chains) for table, chains in tables.items()}


def _all_sets(dp: NodeState) -> dict[str, tuple[str, set[str]]]:
    return {k: (t, members) for k, (t, members) in dp.ipsets.items()} | _special_ipsets(dp)


def kernel_ipsets(dp: NodeState, versions: Iterable[int]) -> dict[str, tuple[str, frozenset[str]]]:
    """The kernel's IP sets (per version, named as Felix names them) with their members."""
    return {
        ipset_rendering.ipset_name(set_id, version): (
            set_type,
            frozenset(m for m in members if ipset_rendering.member_version(m) == version),
        )
        for version in versions
        for set_id, (set_type, members) in _all_sets(dp).items()
    }


def _special_ipsets(dp: NodeState) -> dict[str, tuple[str, set[str]]]:
    """The fixed sets Felix keeps: NAT-outgoing pools, all pools, VXLAN-capable hosts."""
    pools = [v for (kind, _), v in dp.others.items() if kind == "pool"]
    hosts = [v for (kind, _), v in dp.others.items() if kind == "host"]
    sets = {
        MASQ_POOLS: (
            "hash:net",
            {p.pool.cidr for p in pools if p.pool.masquerade and not p.pool.disabled},
        ),
        ALL_POOLS: ("hash:net", {p.pool.cidr for p in pools}),
    }
    if dp.encapsulation is not None and dp.encapsulation.vxlan_enabled:
        sets[VXLAN_HOSTS] = ("hash:net", {f"{h.ipv4_addr}/32" for h in hosts if h.ipv4_addr})
    return sets


def _render_version(
    dp: NodeState,
    settings: Settings,
    version: int,
    special_sets: Mapping[str, tuple[str, set[str]]],
) -> dict[str, list[Chain]]:
    marks = settings.marks
    ctx = RuleContext(version, marks, settings.log_prefix)
    prefix = settings.interface_prefix
    wildcard = f"{prefix}+"
    all_calico = marks.accept | marks.pass_ | marks.scratch0 | marks.scratch1
    filter_chains: list[Chain] = []
    for policy in sorted(dp.policies.values(), key=lambda p: str(p.id)):
        filter_chains.extend(policy_chains(policy, ctx))
    for profile in sorted(dp.profiles.values(), key=lambda p: p.id):
        filter_chains.extend(profile_chains(profile, ctx))

    to_workload: dict[str, str] = {}
    from_workload: dict[str, str] = {}
    drop_encap = (not settings.allow_vxlan_from_workloads, not settings.allow_ipip_from_workloads)
    for update in dp.workloads.values():
        interface = update.endpoint.name
        active = update.endpoint.state == "active"
        profiles = update.endpoint.profile_ids
        tw = endpoint_chain_name("cali-tw-", interface)
        fw = endpoint_chain_name("cali-fw-", interface)
        filter_chains.append(
            endpoint_chain(
                tw, active=active, tiers=update.tiers, profiles=profiles, inbound=True, marks=marks
            )
        )
        filter_chains.append(
            endpoint_chain(
                fw,
                active=active,
                tiers=update.tiers,
                profiles=profiles,
                inbound=False,
                marks=marks,
                from_workload=True,
                drop_encap=drop_encap,
            )
        )
        to_workload[interface] = tw
        from_workload[interface] = fw
    unknown = [Rule(action="--jump DROP", comment=("Unknown interface",))]
    filter_chains += dispatch_chains(
        "cali-from-wl-dispatch", from_workload, outbound=False, end=unknown
    )
    filter_chains += dispatch_chains("cali-to-wl-dispatch", to_workload, outbound=True, end=unknown)

    mangle_chains: list[Chain] = []
    raw_chains: list[Chain] = []
    host_targets = _host_endpoint_chains(dp, settings, filter_chains, raw_chains, mangle_chains)
    for chains, root, kind, outbound in (
        (filter_chains, "cali-from-host-endpoint", "fh", False),
        (filter_chains, "cali-to-host-endpoint", "th", True),
        (filter_chains, "cali-from-hep-forward", "fhfw", False),
        (filter_chains, "cali-to-hep-forward", "thfw", True),
        (raw_chains, "cali-from-host-endpoint", "raw-fh", False),
        (raw_chains, "cali-to-host-endpoint", "raw-th", True),
        (mangle_chains, "cali-from-host-endpoint", "mangle-fh", False),
    ):
        # An all-interfaces ("*") host endpoint is the default: interfaces without their own
        # host endpoint end up in its chain.
        targets = dict(host_targets[kind])
        default = targets.pop(ANY_INTERFACE, None)
        end = (Rule(action=f"--goto {default}"),) if default else ()
        chains.extend(dispatch_chains(root, targets, outbound=outbound, end=end))
    policies = sorted(dp.policies.values(), key=lambda p: str(p.id))
    raw_chains += [c for p in policies if p.policy.do_not_track for c in policy_chains(p, ctx)]
    mangle_chains += [c for p in policies if p.policy.pre_dnat for c in policy_chains(p, ctx)]

    failsafe_in = _failsafe("cali-failsafe-in", settings.failsafe_in, True, version)
    failsafe_out = _failsafe("cali-failsafe-out", settings.failsafe_out, False, version)
    filter_chains += [failsafe_in, failsafe_out]

    vxlan = dp.encapsulation is not None and dp.encapsulation.vxlan_enabled and version == 4
    input_rules = []
    if vxlan:
        hosts = ipset_rendering.ipset_name(VXLAN_HOSTS, version)
        input_rules += [
            Rule(
                f"-p 17 -m multiport --destination-ports 4789 -m set --match-set {hosts} src"
                " -m addrtype --dst-type LOCAL",
                "--jump ACCEPT",
                ("Allow IPv4 VXLAN packets from allowed hosts",),
            ),
            Rule(
                "-p 17 -m multiport --destination-ports 4789 -m addrtype --dst-type LOCAL",
                "--jump DROP",
                ("Drop IPv4 VXLAN packets from non-allowed hosts",),
            ),
        ]
    if version == 4 and dp.config.wireguard_enabled:
        # As Felix: a host endpoint policy must not be able to cut the nodes' tunnels.
        port = dp.config.wireguard_listening_port
        input_rules.append(
            Rule(
                f"-p 17 -m multiport --destination-ports {port} -m addrtype --dst-type LOCAL",
                "--jump ACCEPT",
                ("Allow incoming IPv4 Wireguard packets",),
            )
        )
    input_rules += [
        Rule(f"--in-interface {wildcard}", "--goto cali-wl-to-host"),
        Rule(match_mark(marks.accept), "--jump ACCEPT"),
        Rule(action=set_mark(0, all_calico)),
        Rule(action="--jump cali-from-host-endpoint"),
        Rule(match_mark(marks.accept), "--jump ACCEPT", ("Host endpoint policy accepted packet.",)),
    ]
    filter_chains += [
        Chain(
            "cali-FORWARD",
            (
                Rule(action=set_mark(0, all_calico & ~marks.accept)),
                Rule(match_mark(0, marks.accept), "--jump cali-from-hep-forward"),
                Rule(f"--in-interface {wildcard}", "--jump cali-from-wl-dispatch"),
                Rule(f"--out-interface {wildcard}", "--jump cali-to-wl-dispatch"),
                Rule(action="--jump cali-to-hep-forward"),
                Rule(
                    match_mark(marks.accept),
                    "--jump ACCEPT",
                    ("Policy explicitly accepted packet.",),
                ),
            ),
        ),
        Chain("cali-INPUT", tuple(input_rules)),
        Chain(
            "cali-wl-to-host",
            (
                # As Felix: a workload must be able to use its host as an IPv6 router
                # (multicast listener reports, router and neighbour solicitations and
                # advertisements), whatever its policy.
                *(
                    Rule(f"-p ipv6-icmp -m icmp6 --icmpv6-type {icmp_type}", "--jump ACCEPT")
                    for icmp_type in ((130, 131, 132, 133, 135, 136) if version == 6 else ())
                ),
                Rule(action="--jump cali-from-wl-dispatch"),
                Rule(
                    action=f"--jump {settings.endpoint_to_host_action}",
                    comment=("Configured DefaultEndpointToHostAction",),
                ),
            ),
        ),
        Chain(
            "cali-OUTPUT",
            (
                Rule(match_mark(marks.accept), "--jump ACCEPT"),
                Rule(f"--out-interface {wildcard}", "--jump RETURN"),
                Rule(action=set_mark(0, all_calico)),
                Rule("-m conntrack ! --ctstate DNAT", "--jump cali-to-host-endpoint"),
                Rule(
                    match_mark(marks.accept),
                    "--jump ACCEPT",
                    ("Host endpoint policy accepted packet.",),
                ),
            ),
        ),
    ]

    rpf_skip = []
    for update in dp.workloads.values():
        for prefix_net in update.endpoint.allow_spoofed_source_prefixes:
            if (":" in prefix_net) == (version == 6):
                rpf_skip.append(
                    Rule(
                        f"--in-interface {update.endpoint.name} --source {prefix_net}",
                        "--jump ACCEPT",
                    )
                )
    raw_chains += [
        Chain(
            "cali-PREROUTING",
            (
                Rule(action=set_mark(0, all_calico)),
                Rule(f"--in-interface {wildcard}", set_mark(marks.scratch0)),
                Rule(match_mark(marks.scratch0), "--jump cali-rpf-skip"),
                Rule(
                    f"{match_mark(marks.scratch0)} -m rpfilter --invert --validmark", "--jump DROP"
                ),
                Rule(match_mark(0, marks.scratch0), "--jump cali-from-host-endpoint"),
                Rule(match_mark(marks.accept), "--jump ACCEPT"),
            ),
        ),
        Chain("cali-rpf-skip", tuple(rpf_skip)),
        Chain(
            "cali-OUTPUT",
            (
                Rule(action=set_mark(0, all_calico)),
                Rule(action="--jump cali-to-host-endpoint"),
                Rule(match_mark(marks.accept), "--jump ACCEPT"),
            ),
        ),
        _failsafe("cali-failsafe-in", settings.failsafe_in, True, version),
        _failsafe("cali-failsafe-out", settings.failsafe_out, False, version),
    ]
    mangle_chains += [
        Chain(
            "cali-PREROUTING",
            (
                Rule("-m conntrack --ctstate RELATED,ESTABLISHED", "--jump ACCEPT"),
                Rule(match_mark(marks.accept), "--jump ACCEPT"),
                Rule(action="--jump cali-from-host-endpoint"),
                Rule(
                    match_mark(marks.accept),
                    "--jump ACCEPT",
                    ("Host endpoint policy accepted packet.",),
                ),
            ),
        ),
        Chain("cali-POSTROUTING", ()),
        _failsafe("cali-failsafe-in", settings.failsafe_in, True, version),
    ]
    nat_rules = []
    masq = special_sets.get(MASQ_POOLS, ("", set()))[1]
    if any((":" in cidr) == (version == 6) for cidr in masq):
        pools = ipset_rendering.ipset_name(MASQ_POOLS, version)
        every = ipset_rendering.ipset_name(ALL_POOLS, version)
        nat_rules.append(
            Rule(
                f"-m set --match-set {pools} src -m set ! --match-set {every} dst",
                "--jump MASQUERADE",
            )
        )
    postrouting = [Rule(action="--jump cali-nat-outgoing")]
    if vxlan:
        postrouting.append(
            Rule(
                "--out-interface vxlan.calico -m addrtype ! --src-type LOCAL --limit-iface-out"
                " -m addrtype --src-type LOCAL",
                "--jump MASQUERADE",
            )
        )
    nat_chains = [
        Chain("cali-PREROUTING", ()),
        Chain("cali-OUTPUT", ()),
        Chain("cali-POSTROUTING", tuple(postrouting)),
        Chain("cali-nat-outgoing", tuple(nat_rules)),
    ]
    return {"raw": raw_chains, "mangle": mangle_chains, "nat": nat_chains, "filter": filter_chains}


def _host_endpoint_chains(
    dp: NodeState,
    settings: Settings,
    filter_chains: list[Chain],
    raw_chains: list[Chain],
    mangle_chains: list[Chain],
) -> dict[str, dict[str, str]]:
    """Host endpoint chains: normal and forward ones in filter, untracked (doNotTrack) ones in
    raw, pre-DNAT ones in mangle; returns the dispatch targets for each table. As in Felix, an
    all-interfaces ("*") endpoint gets no untracked chains."""
    marks = settings.marks
    targets: dict[str, dict[str, str]] = {
        k: {} for k in ("fh", "th", "fhfw", "thfw", "raw-fh", "raw-th", "mangle-fh")
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
        for prefix, inbound, failsafe in (
            ("cali-th-", False, "cali-failsafe-out"),
            ("cali-fh-", True, "cali-failsafe-in"),
        ):
            name = endpoint_chain_name(prefix, interface)
            filter_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=update.tiers,
                    profiles=profiles,
                    inbound=inbound,
                    marks=marks,
                    failsafe=failsafe,
                )
            )
            targets["fh" if inbound else "th"][interface] = name
        for prefix, inbound in (("cali-thfw-", False), ("cali-fhfw-", True)):
            name = endpoint_chain_name(prefix, interface)
            filter_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=update.forward_tiers,
                    profiles=(),
                    inbound=inbound,
                    marks=marks,
                    kind="forward",
                )
            )
            targets["fhfw" if inbound else "thfw"][interface] = name
        if update.untracked_tiers and interface != ANY_INTERFACE:
            for prefix, inbound in (("cali-th-", False), ("cali-fh-", True)):
                name = endpoint_chain_name(prefix, interface)
                raw_chains.append(
                    endpoint_chain(
                        name,
                        active=True,
                        tiers=update.untracked_tiers,
                        profiles=(),
                        inbound=inbound,
                        marks=marks,
                        kind="untracked",
                    )
                )
                targets["raw-fh" if inbound else "raw-th"][interface] = name
        if update.pre_dnat_tiers:
            name = endpoint_chain_name("cali-fh-", interface)
            mangle_chains.append(
                endpoint_chain(
                    name,
                    active=True,
                    tiers=update.pre_dnat_tiers,
                    profiles=(),
                    inbound=True,
                    marks=marks,
                    kind="prednat",
                )
            )
            targets["mangle-fh"][interface] = name
    return targets
