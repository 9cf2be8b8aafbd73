"""ipset rendering: one set per IP version and id, as ``ipset restore`` input.

Names are Felix's (``cali40``/``cali60`` + id, cut to 31 characters). ``maxelem`` is sized to
the members: ipset's default of 65536 makes a bigger restore fail half way, leaving a truncated
set behind.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping

from pyfelix import model
from pyfelix.config.felix_config import FelixConfig, NATOutgoingExclusions
from pyfelix_dataplane.state import NodeState

MAX_NAME = 31
#: Felix's MaxIpsetSize default: every set's maxelem (hash sets do not allocate it up front).
DEFAULT_MAXELEM = FelixConfig().max_ipset_size


def ipset_name(set_id: str, version: int = 4) -> str:
    return f"cali{version}0{set_id}"[:MAX_NAME]


def member_version(member: str) -> int:
    address = member.split(",", 1)[0]
    return 6 if ":" in address else 4


def members_of_version(members: Collection[str], version: int) -> Collection[str]:
    """The members of one IP version. A set whose text holds no colon is all IPv4 (one
    join, in C, tells it), as nearly every set is: asked member by member, the dry-run's
    ipset script for 1.1M members was a tenth of its computing process."""
    if ":" not in "".join(members):
        return members if version == 4 else ()
    return [m for m in members if member_version(m) == version]


def restore_script(
    sets: Mapping[str, tuple[str, Collection[str]]],
    versions: Iterable[int] = (4, 6),
    maxelem: int = DEFAULT_MAXELEM,
) -> str:
    """``create`` and ``add`` lines for every set (members sorted), ready for ipset restore.

    Made a set at a time: 10,000 network sets of 1.4M members in all were a line object
    each, 120 MB beside the text they made."""
    return "".join(restore_pieces(sets, versions, maxelem))


def restore_pieces(
    sets: Mapping[str, tuple[str, Collection[str]]],
    versions: Iterable[int] = (4, 6),
    maxelem: int = DEFAULT_MAXELEM,
) -> Iterator[str]:
    """``restore_script``'s text a set at a time, for a writer that never holds it whole."""
    for version in versions:
        family = "inet" if version == 4 else "inet6"
        for set_id in sorted(sets):
            set_type, members = sets[set_id]
            wanted = sorted(members_of_version(members, version))
            name = ipset_name(set_id, version)
            create = f"create {name} {set_type} family {family} maxelem {maxelem}\n"
            if wanted:
                add = f"add {name} "
                yield create + add + f"\n{add}".join(wanted) + "\n"
            else:
                yield create


MASQ_POOLS = "masq-ipam-pools"
#: Every pool but those only for LoadBalancer addresses (current Felix's name; before 2026 it
#: was all-ipam-pools, holding every pool).
ALL_POOLS = "network-ip-pools"
VXLAN_HOSTS = "all-vxlan-net"
#: Every host's address, which NATOutgoingExclusions IPPoolsAndHostIPs keeps out of NAT.
ALL_HOSTS = "all-hosts-net"
#: This node's own addresses (Felix's host IP manager keeps it; the IPVS rules read it).
THIS_HOST = "this-host"


#: The fixed sets' ids (the calculation graph's sets never take these).
SPECIAL_IDS = frozenset({MASQ_POOLS, ALL_POOLS, VXLAN_HOSTS, ALL_HOSTS, THIS_HOST})


def _load_balancer_only(pool: model.IPPool) -> bool:
    """As Felix: such a pool holds no workload or tunnel address, so traffic to it is still
    masqueraded."""
    return pool.allowed_uses == ("LoadBalancer",)


def _ipip(dp: NodeState) -> bool:
    return dp.encapsulation is not None and dp.encapsulation.ipip_enabled


def special_ipsets(dp: NodeState) -> dict[str, tuple[str, set[str]]]:
    """The fixed sets Felix keeps: NAT-outgoing pools, all pools, VXLAN-capable hosts."""
    pools = list(dp.pools.values())
    hosts = list(dp.host_metadata.values())
    sets = {
        MASQ_POOLS: (
            "hash:net",
            {p.pool.cidr for p in pools if p.pool.masquerade},
        ),
        ALL_POOLS: ("hash:net", {p.pool.cidr for p in pools if not _load_balancer_only(p.pool)}),
    }
    # ExternalNodesCIDRList: non-Calico nodes that may send tunnel traffic, as Felix adds them
    # to both sets.
    external = set(dp.config.external_nodes_cidr_list)
    encapsulation = dp.encapsulation
    if encapsulation is not None and (
        encapsulation.vxlan_enabled or encapsulation.vxlan_enabled_v6
    ):
        vteps = set()
        if encapsulation.vxlan_enabled:
            vteps |= {f"{h.ipv4_addr}/32" for h in hosts if h.ipv4_addr}
        if encapsulation.vxlan_enabled_v6:
            vteps |= {f"{h.ipv6_addr}/128" for h in hosts if h.ipv6_addr}
        sets[VXLAN_HOSTS] = ("hash:net", vteps | external)
    if dp.config.nat_outgoing_exclusions is NATOutgoingExclusions.IPPOOLS_AND_HOST_IPS or _ipip(dp):
        # Felix keeps the hosts' set for IPIP (whose packets only hosts may send) too.
        addresses = {f"{h.ipv4_addr}/32" for h in hosts if h.ipv4_addr}
        sets[ALL_HOSTS] = ("hash:net", addresses | external)
    sets[THIS_HOST] = ("hash:ip", set(dp.host_ips))
    return sets
