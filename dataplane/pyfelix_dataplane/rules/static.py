"""The static chains of each table, as Felix's rules package builds them: the top-level chains
the kernel's hooks jump to, the failsafe chains, RPF and NAT-outgoing. Policy, profile and
endpoint chains and the dispatch trees are rendered elsewhere (policy.py, endpoints.py,
host_endpoints.py); render.py puts the tables together."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyfelix.config import ProtoPort
from pyfelix_dataplane.rules import ipsets as ipset_rendering
from pyfelix_dataplane.rules import ipvs
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.ipsets import ALL_HOSTS, ALL_POOLS, MASQ_POOLS, VXLAN_HOSTS
from pyfelix_dataplane.rules.marks import wireguard_mark
from pyfelix_dataplane.rules.matches import match_mark, set_mark
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState


def failsafe(
    name: str,
    ports: Iterable[ProtoPort],
    inbound: bool,
    version: int,
    replies: Iterable[ProtoPort] = (),
) -> Chain:
    """A failsafe chain: ``ports`` by destination port (and net: the source's inbound, the
    destination's outbound), then, in raw, ``replies``: the other direction's failsafe ports
    as source ports, since raw runs before conntrack and a reply must not fall through to an
    untracked policy (Felix's failsafeInChain/failsafeOutChain)."""
    rules = []
    ends: tuple[tuple[Iterable[ProtoPort], mt.End], ...] = ((ports, "dst"), (replies, "src"))
    for entries, end in ends:
        for entry in entries:
            if entry.net and (":" in entry.net) != (version == 6):
                continue
            match: mt.Match = (mt.Protocol(entry.protocol), mt.Ports(end, str(entry.port)))
            if entry.net:
                match += (mt.Net("src" if inbound else "dst", entry.net),)
            rules.append(Rule(match, mt.ACCEPT))
    return Chain(name, tuple(rules))


def _ipip(dp: NodeState, version: int) -> bool:
    return dp.encapsulation is not None and dp.encapsulation.ipip_enabled and version == 4


def _vxlan(dp: NodeState, version: int) -> bool:
    encapsulation = dp.encapsulation
    if encapsulation is None:
        return False
    return encapsulation.vxlan_enabled_v6 if version == 6 else encapsulation.vxlan_enabled


def _wireguard(dp: NodeState, version: int) -> bool:
    config = dp.config
    return config.wireguard_enabled_v6 if version == 6 else config.wireguard_enabled


def _wireguard_port(dp: NodeState, version: int) -> int:
    config = dp.config
    return config.wireguard_listening_port_v6 if version == 6 else config.wireguard_listening_port


def _wireguard_device(dp: NodeState, version: int) -> str:
    config = dp.config
    return config.wireguard_interface_name_v6 if version == 6 else config.wireguard_interface_name


def kernel_appends(settings: Settings) -> dict[str, tuple[Chain, ...]]:
    """The rules Felix keeps at the end of the kernel's own chains, whatever ChainInsertMode
    says: FORWARD accepts what policy accepted only after every other tool's FORWARD rules
    (cali-FORWARD returns), and marks the rest as forwarded for mangle's host endpoint egress
    policy; nat POSTROUTING jumps to cali-POSTROUTING last, so kube-proxy's masquerade (which
    clears its mark) runs first."""
    accept = settings.marks.accept
    forward = (
        Rule(
            (match_mark(accept),), mt.Jump(settings.allow), ("Policy explicitly accepted packet.",)
        ),
        Rule(action=set_mark(accept, accept)),
    )
    return {
        "filter": (Chain("FORWARD", forward),),
        "nat": (Chain("POSTROUTING", (Rule(action=mt.Jump("cali-POSTROUTING")),)),),
    }


def filter_chains(dp: NodeState, settings: Settings, version: int) -> list[Chain]:
    """filter: failsafes, cali-FORWARD, cali-INPUT, cali-wl-to-host, cali-OUTPUT."""
    marks = settings.marks
    wildcards = [f"{prefix}+" for prefix in settings.interface_prefixes]
    all_calico = marks.accept | marks.pass_ | marks.scratch0 | marks.scratch1
    failsafe_in = failsafe("cali-failsafe-in", settings.failsafe_in, True, version)
    failsafe_out = failsafe("cali-failsafe-out", settings.failsafe_out, False, version)
    filter_chains = [failsafe_in, failsafe_out]

    vxlan = _vxlan(dp, version)
    input_rules = []
    if _ipip(dp, version):
        hosts = ipset_rendering.ipset_name(ALL_HOSTS, version)
        input_rules += [
            Rule(
                (mt.Protocol("4"), mt.InSet(hosts, "src"), mt.AddrType("dst", "LOCAL")),
                mt.Jump(settings.allow),
                ("Allow IPIP packets from Calico hosts",),
            ),
            Rule(
                (mt.Protocol("4"),),
                mt.Jump(settings.deny),
                (f"{settings.deny} IPIP packets from non-Calico hosts",),
            ),
        ]
    if vxlan:
        hosts = ipset_rendering.ipset_name(VXLAN_HOSTS, version)
        input_rules += [
            Rule(
                (
                    mt.Protocol("17"),
                    mt.Ports("dst", str(settings.vxlan_port)),
                    mt.InSet(hosts, "src"),
                    mt.AddrType("dst", "LOCAL"),
                ),
                mt.Jump(settings.allow),
                (f"Allow IPv{version} VXLAN packets from allowed hosts",),
            ),
            Rule(
                (
                    mt.Protocol("17"),
                    mt.Ports("dst", str(settings.vxlan_port)),
                    mt.AddrType("dst", "LOCAL"),
                ),
                # As Felix: IPv4's is always a drop, IPv6's the configured deny action.
                mt.DROP if version == 4 else mt.Jump(settings.deny),
                (
                    "Drop IPv4 VXLAN packets from non-allowed hosts"
                    if version == 4
                    else f"{settings.deny} IPv6 VXLAN packets from non-allowed hosts",
                ),
            ),
        ]
    if _wireguard(dp, version):
        # As Felix: a host endpoint policy must not be able to cut the nodes' tunnels.
        port = _wireguard_port(dp, version)
        input_rules.append(
            Rule(
                (mt.Protocol("17"), mt.Ports("dst", str(port)), mt.AddrType("dst", "LOCAL")),
                mt.Jump(settings.allow),
                (f"Allow incoming IPv{version} Wireguard packets",),
            )
        )
    if settings.endpoint_mark:
        input_rules += ipvs.input_rules(settings.endpoint_mark)
    input_rules += [
        *(
            Rule((mt.Interface("in", wildcard),), mt.Goto("cali-wl-to-host"))
            for wildcard in wildcards
        ),
        Rule((match_mark(marks.accept),), mt.Jump(settings.allow)),
        Rule(action=set_mark(0, all_calico)),
        Rule(action=mt.Jump("cali-from-host-endpoint")),
        Rule(
            (match_mark(marks.accept),),
            mt.Jump(settings.allow),
            ("Host endpoint policy accepted packet.",),
        ),
    ]
    filter_chains += [
        Chain(
            "cali-FORWARD",
            (
                Rule(action=set_mark(0, all_calico & ~marks.accept)),
                Rule((match_mark(0, marks.accept),), mt.Jump("cali-from-hep-forward")),
                *(
                    rule
                    for wildcard in wildcards
                    for rule in (
                        Rule((mt.Interface("in", wildcard),), mt.Jump("cali-from-wl-dispatch")),
                        Rule((mt.Interface("out", wildcard),), mt.Jump("cali-to-wl-dispatch")),
                    )
                ),
                Rule(action=mt.Jump("cali-to-hep-forward")),
                Rule(action=mt.Jump("cali-cidr-block")),
            ),
        ),
        cidr_block_chain(dp, settings, version),
        Chain("cali-INPUT", tuple(input_rules)),
        Chain(
            "cali-wl-to-host",
            (
                # As Felix: a workload must be able to use its host as an IPv6 router
                # (multicast listener reports, router and neighbour solicitations and
                # advertisements), whatever its policy.
                *(
                    Rule(
                        (mt.Protocol("ipv6-icmp"), mt.Icmp(6, icmp_type)),
                        mt.Jump(settings.allow),
                    )
                    for icmp_type in ((130, 131, 132, 133, 135, 136) if version == 6 else ())
                ),
                *openstack_to_host(settings, version),
                Rule(action=mt.Jump("cali-from-wl-dispatch")),
                Rule(
                    action=mt.Jump(settings.endpoint_to_host_action),
                    comment=("Configured DefaultEndpointToHostAction",),
                ),
            ),
        ),
        Chain(
            "cali-OUTPUT",
            (
                Rule((match_mark(marks.accept),), mt.Jump(settings.allow)),
                *([ipvs.output_rule(settings.endpoint_mark)] if settings.endpoint_mark else []),
                *(Rule((mt.Interface("out", wildcard),), mt.RETURN) for wildcard in wildcards),
                *output_tunnel_allows(dp, settings, version),
                Rule(action=set_mark(0, all_calico)),
                Rule((mt.ConnState("DNAT", negate=True),), mt.Jump("cali-to-host-endpoint")),
                Rule(
                    (match_mark(marks.accept),),
                    mt.Jump(settings.allow),
                    ("Host endpoint policy accepted packet.",),
                ),
            ),
        ),
    ]

    return filter_chains


def output_tunnel_allows(dp: NodeState, settings: Settings, version: int) -> list[Rule]:
    """cali-OUTPUT's allows for the overlays, as Felix's: the node's own VXLAN packets to the
    other VXLAN hosts and its WireGuard packets, before host endpoint policy could cut them."""
    rules = []
    if _ipip(dp, version):
        hosts = ipset_rendering.ipset_name(ALL_HOSTS, version)
        rules.append(
            Rule(
                (mt.Protocol("4"), mt.InSet(hosts, "dst"), mt.AddrType("src", "LOCAL")),
                mt.Jump(settings.allow),
                ("Allow IPIP packets to other Calico hosts",),
            )
        )
    if _vxlan(dp, version):
        hosts = ipset_rendering.ipset_name(VXLAN_HOSTS, version)
        rules.append(
            Rule(
                (
                    mt.Protocol("17"),
                    mt.Ports("dst", str(settings.vxlan_port)),
                    mt.AddrType("src", "LOCAL"),
                    mt.InSet(hosts, "dst"),
                ),
                mt.Jump(settings.allow),
                (f"Allow IPv{version} VXLAN packets to other allowed hosts",),
            )
        )
    if _wireguard(dp, version):
        port = _wireguard_port(dp, version)
        rules.append(
            Rule(
                (mt.Protocol("17"), mt.Ports("dst", str(port)), mt.AddrType("src", "LOCAL")),
                mt.Jump(settings.allow),
                (f"Allow outgoing IPv{version} Wireguard packets",),
            )
        )
    return rules


def cidr_block_chain(dp: NodeState, settings: Settings, version: int) -> Chain:
    """cali-cidr-block (ServiceLoopPrevention): forwarded traffic to the service CIDRs of the
    default BGPConfiguration is dropped or rejected, as Felix's: what kube-proxy did not
    DNAT to a real service would otherwise loop between the node and its upstream router."""
    bgp = dp.bgp_config
    cidrs = sorted(
        (*bgp.service_cluster_cidrs, *bgp.service_external_cidrs, *bgp.service_loadbalancer_cidrs)
    )
    action = settings.service_loop_action
    rules = tuple(
        Rule((mt.Net("dst", cidr),), mt.Jump(action))
        for cidr in cidrs
        if action and (":" in cidr) == (version == 6)
    )
    return Chain("cali-cidr-block", rules)


def raw_chains(dp: NodeState, settings: Settings, version: int) -> list[Chain]:
    """raw: cali-PREROUTING with the RPF check, cali-rpf-skip, cali-OUTPUT, failsafes."""
    marks = settings.marks
    wildcards = [f"{prefix}+" for prefix in settings.interface_prefixes]
    all_calico = marks.accept | marks.pass_ | marks.scratch0 | marks.scratch1
    rpf_skip = []
    for update in dp.workloads.values():
        for prefix_net in update.endpoint.allow_spoofed_source_prefixes:
            if (":" in prefix_net) == (version == 6):
                rpf_skip.append(
                    Rule(
                        (mt.Interface("in", update.endpoint.name), mt.Net("src", prefix_net)),
                        mt.ACCEPT,
                    )
                )
    # VXLAN uses different source ports each way: tracking would leave unreplied flows.
    untracked_vxlan = (
        [Rule((mt.Protocol("udp"), mt.Port("dst", settings.vxlan_port)), mt.NOTRACK)]
        if _vxlan(dp, version)
        else []
    )
    config = dp.config
    # As Felix with host encryption: what arrives from outside the tunnels is marked, so the
    # reverse-path check (src_valid_mark) does not look the sender up in WireGuard's table.
    encrypt_hosts = config.wireguard_host_encryption_enabled and (
        (config.wireguard_enabled and config.wireguard_interface_name)
        or (config.wireguard_enabled_v6 and config.wireguard_interface_name_v6)
    )
    incoming_mark = [Rule(action=mt.Jump("cali-wireguard-incoming-mark"))] if encrypt_hosts else []
    return [
        Chain(
            "cali-PREROUTING",
            (
                Rule(action=set_mark(0, all_calico)),
                *incoming_mark,
                *untracked_vxlan,
                *(
                    Rule((mt.Interface("in", wildcard),), set_mark(marks.scratch0))
                    for wildcard in wildcards
                ),
                Rule((match_mark(marks.scratch0),), mt.Jump("cali-rpf-skip")),
                Rule((match_mark(marks.scratch0), mt.ReversePath()), mt.DROP),
                Rule((match_mark(0, marks.scratch0),), mt.Jump("cali-from-host-endpoint")),
                Rule((match_mark(marks.accept),), mt.ACCEPT),
            ),
        ),
        Chain("cali-rpf-skip", tuple(rpf_skip)),
        wireguard_incoming_mark_chain(dp, settings),
        Chain(
            "cali-OUTPUT",
            (
                Rule(action=set_mark(0, all_calico)),
                Rule(action=mt.Jump("cali-to-host-endpoint")),
                *untracked_vxlan,
                Rule((match_mark(marks.accept),), mt.ACCEPT),
            ),
        ),
        failsafe("cali-failsafe-in", settings.failsafe_in, True, version, settings.failsafe_out),
        failsafe("cali-failsafe-out", settings.failsafe_out, False, version, settings.failsafe_in),
    ]


def wireguard_incoming_mark_chain(dp: NodeState, settings: Settings) -> Chain:
    """cali-wireguard-incoming-mark, which Felix renders whether or not it is used: packets
    from anywhere but loopback, the WireGuard devices and the workloads get WireGuard's mark."""
    config = dp.config
    skipped = ["lo", config.wireguard_interface_name, config.wireguard_interface_name_v6]
    skipped += [f"{prefix}+" for prefix in settings.interface_prefixes]
    mark = wireguard_mark(config.iptables_mark_mask)
    return Chain(
        "cali-wireguard-incoming-mark",
        (
            *(Rule((mt.Interface("in", name),), mt.RETURN) for name in skipped),
            Rule(action=set_mark(mark)),
        ),
    )


def mangle_chains(settings: Settings, version: int) -> list[Chain]:
    """mangle: cali-PREROUTING (pre-DNAT policy), cali-POSTROUTING (host endpoint egress
    policy for host traffic that was DNAT'd: only here has the kernel re-routed it), the
    failsafes."""
    marks = settings.marks
    allow = settings.mangle_allow
    all_calico = marks.accept | marks.pass_ | marks.scratch0 | marks.scratch1
    postrouting = (
        # Forwarded traffic (filter FORWARD marked it) gets no normal host endpoint policy.
        Rule((match_mark(marks.accept),), mt.RETURN),
        # Nor does what IPVS forwarded (kube-proxy's IPVS mode: INPUT marked it).
        *([ipvs.mangle_postrouting_rule(settings.endpoint_mark)] if settings.endpoint_mark else []),
        Rule(action=set_mark(0, all_calico)),
        Rule((mt.ConnState("DNAT"),), mt.Jump("cali-to-host-endpoint")),
        Rule(
            (match_mark(marks.accept),),
            mt.RETURN,
            ("Host endpoint policy accepted packet.",),
        ),
    )
    return [
        Chain(
            "cali-PREROUTING",
            (
                Rule((mt.ConnState("RELATED,ESTABLISHED"),), mt.Jump(allow)),
                Rule((match_mark(marks.accept),), mt.Jump(allow)),
                Rule(action=mt.Jump("cali-from-host-endpoint")),
                Rule(
                    (match_mark(marks.accept),),
                    mt.Jump(allow),
                    ("Host endpoint policy accepted packet.",),
                ),
            ),
        ),
        Chain("cali-POSTROUTING", postrouting),
        failsafe("cali-failsafe-in", settings.failsafe_in, True, version),
        failsafe("cali-failsafe-out", settings.failsafe_out, False, version),
    ]


def masq_port_range_excluding(port: int) -> str:
    """Felix's: the larger of 1024..port-1 and port+1..65535, so a masqueraded source port
    never equals the VXLAN port."""
    if port <= 0 or port > 65535:
        return ""
    low, high = 1024, 65535
    if port - low >= high - port:
        return f"{low}-{port - 1}"
    return f"{port + 1}-{high}"


def _masquerade(settings: Settings, to_ports: str = "") -> mt.Masquerade:
    return mt.Masquerade(to_ports, settings.masq_random_fully)


def _snat(settings: Settings, to: str) -> mt.Snat:
    return mt.Snat(to, settings.snat_random_fully)


def nat_outgoing_rules(settings: Settings, version: int, active: bool) -> list[Rule]:
    """cali-nat-outgoing as Felix's: traffic from a NAT-outgoing pool to anything outside the
    pools (and, under NATOutgoingExclusions IPPoolsAndHostIPs, outside the hosts) is
    masqueraded, or SNATed to NATOutgoingAddress, TCP and UDP into NATPortRange."""
    if not active:
        return []
    pools = ipset_rendering.ipset_name(MASQ_POOLS, version)
    every = ipset_rendering.ipset_name(ALL_POOLS, version)
    base: mt.Match = (mt.InSet(pools, "src"), mt.InSet(every, "dst", negate=True))
    if settings.nat_exclude_hosts:
        base += (mt.InSet(ipset_rendering.ipset_name(ALL_HOSTS, version), "dst", negate=True),)

    def match(protocol: str) -> mt.Match:
        criteria = (*base, mt.Protocol(protocol)) if protocol else base
        if settings.nat_interface_filter:
            criteria += (mt.Interface("out", settings.nat_interface_filter),)
        return criteria

    address = settings.nat_outgoing_address
    default = _snat(settings, address) if address else _masquerade(settings)
    if not settings.nat_port_range:
        return [Rule(match(""), default)]
    low, high = settings.nat_port_range
    to_ports = f"{low}-{high}"
    ranged = (
        _snat(settings, f"{address}:{to_ports}") if address else _masquerade(settings, to_ports)
    )
    return [
        Rule(match("tcp"), ranged),
        Rule(match("tcp"), mt.RETURN),
        Rule(match("udp"), ranged),
        Rule(match("udp"), mt.RETURN),
        Rule(match(""), default),
    ]


def nat_chains(
    dp: NodeState,
    settings: Settings,
    version: int,
    special_sets: Mapping[str, tuple[str, set[str]]],
) -> list[Chain]:
    """nat: the hooks' chains, cali-nat-outgoing and the tunnels' masquerade (traffic the
    host sends into the VXLAN or WireGuard device from an address not on it)."""
    masq = special_sets.get(MASQ_POOLS, ("", set()))[1]
    active = any((":" in cidr) == (version == 6) for cidr in masq)
    tunnels = []
    if _ipip(dp, version) and dp.ipip_tunnel_addr:
        tunnels.append("tunl0")
    if _vxlan(dp, version) and dp.vxlan_tunnel_addr(version):
        tunnels.append("vxlan-v6.calico" if version == 6 else "vxlan.calico")
    if _wireguard(dp, version) and _wireguard_device(dp, version):
        tunnels.append(_wireguard_device(dp, version))
    to_ports = masq_port_range_excluding(settings.vxlan_port) if _vxlan(dp, version) else ""
    postrouting = [Rule(action=mt.Jump("cali-fip-snat")), Rule(action=mt.Jump("cali-nat-outgoing"))]
    for tunnel in tunnels:
        local: mt.Match = (
            mt.Interface("out", tunnel),
            mt.AddrType("src", "LOCAL", negate=True, limit_iface_out=True),
            mt.AddrType("src", "LOCAL"),
        )
        if to_ports:
            postrouting.append(Rule((mt.Protocol("17"), *local), _masquerade(settings, to_ports)))
        postrouting.append(Rule(local, _masquerade(settings)))
    dnat = (Rule(action=mt.Jump("cali-fip-dnat")),)
    return [
        Chain("cali-PREROUTING", dnat + openstack_metadata_dnat(settings, version)),
        Chain("cali-OUTPUT", dnat),
        Chain("cali-POSTROUTING", tuple(postrouting)),
        Chain("cali-nat-outgoing", tuple(nat_outgoing_rules(settings, version, active))),
        *floating_ip_chains(dp, settings, version),
    ]


def openstack_to_host(settings: Settings, version: int) -> tuple[Rule, ...]:
    """Felix's OpenStack special cases in cali-wl-to-host, before the workload's egress
    policy: the metadata service (IPv4), DHCP and DNS."""
    if not settings.openstack:
        return ()
    allow = mt.Jump(settings.allow)
    rules = []
    if version == 4 and settings.metadata:
        address, port = settings.metadata
        rules.append(
            Rule((mt.Protocol("tcp"), mt.Ports("dst", str(port)), mt.Net("dst", address)), allow)
        )
    client, server = (68, 67) if version == 4 else (546, 547)
    ports = (mt.Ports("src", str(client)), mt.Ports("dst", str(server)))
    rules.append(Rule((mt.Protocol("udp"), *ports), allow))
    rules.append(Rule((mt.Protocol("udp"), mt.Ports("dst", "53")), allow))
    return tuple(rules)


def openstack_metadata_dnat(settings: Settings, version: int) -> tuple[Rule, ...]:
    """OpenStack: the well-known metadata address DNATed to MetadataAddr:MetadataPort."""
    if not (settings.openstack and settings.metadata and version == 4):
        return ()
    address, port = settings.metadata
    match = (mt.Protocol("tcp"), mt.Ports("dst", "80"), mt.Net("dst", "169.254.169.254/32"))
    return (Rule(match, mt.Dnat(f"{address}:{port}")),)


def floating_ip_chains(dp: NodeState, settings: Settings, version: int) -> list[Chain]:
    """cali-fip-dnat and cali-fip-snat, as Felix's floating IP manager: with FloatingIPs
    Enabled (always for OpenStack endpoints), each local workload's external address is
    DNATed to its internal one (the lowest internal address wins an external one), and a
    workload's traffic to itself through it SNATed back (the lowest external address)."""
    dnats: dict[str, str] = {}
    for key, update in dp.workloads.items():
        if not settings.floating_ips and getattr(key, "orchestrator", "") != "openstack":
            continue
        endpoint = update.endpoint
        for nat in endpoint.ipv4_nat if version == 4 else endpoint.ipv6_nat:
            known = dnats.get(nat.ext_ip)
            if known is None or nat.int_ip < known:
                dnats[nat.ext_ip] = nat.int_ip
    snats: dict[str, str] = {}
    for external, internal in dnats.items():
        known = snats.get(internal)
        if known is None or external < known:
            snats[internal] = external
    return [
        Chain(
            "cali-fip-dnat",
            tuple(Rule((mt.Net("dst", ext),), mt.Dnat(dnats[ext])) for ext in sorted(dnats)),
        ),
        Chain(
            "cali-fip-snat",
            tuple(
                Rule((mt.Net("dst", inner), mt.Net("src", inner)), _snat(settings, snats[inner]))
                for inner in sorted(snats)
            ),
        ),
    ]
