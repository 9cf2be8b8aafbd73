"""The dry-run's view of a node's desired state (pyfelix_dataplane.state.NodeState).

:func:`snapshot` renders the state as the JSON document described in ARCHITECTURE.md section 9,
sorted everywhere so two runs on the same input print the same bytes; :func:`describe_message`
is the one-line form ``pyfelix run --dry-run`` prints for each message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.state import NodeState


def _policy_name(policy: m.PolicyID) -> str:
    return f"{policy.namespace}/{policy.name}" if policy.namespace else policy.name


def _tiers(tiers: tuple[m.TierInfo, ...], ends_in_pass: bool = False) -> list[dict[str, Any]]:
    """``ends_in_pass``: untracked and pre-DNAT tiers, whose chains never drop at a tier's end
    (a packet no such policy decides goes on to the normal policy), whatever the tier says."""
    return [
        {
            "name": t.name,
            "default_action": "Pass" if ends_in_pass else t.default_action,
            "ingress_policies": [_policy_name(p) for p in t.ingress_policies],
            "egress_policies": [_policy_name(p) for p in t.egress_policies],
        }
        for t in tiers
    ]


def _shared_tiers() -> Callable[[tuple[m.TierInfo, ...]], list[dict[str, Any]]]:
    """``_tiers``, made once for each tiers tuple: endpoints on the same policies share one
    (the policy resolver's), and with 10,000 policies on 200 endpoints their lists of names
    were most of the view (130 MB). The view is read, never changed, so they share it too."""
    made: dict[int, tuple[tuple[m.TierInfo, ...], list[dict[str, Any]]]] = {}

    def tiers(of: tuple[m.TierInfo, ...]) -> list[dict[str, Any]]:
        # Keyed by identity, the tuple kept beside its list so that its id stays its own.
        found = made.get(id(of))
        if found is None:
            found = made[id(of)] = (of, _tiers(of))
        return found[1]

    return tiers


def snapshot(
    dp: NodeState, hostname: str, describe: Callable[[str], Mapping[str, str]]
) -> dict[str, Any]:
    """The dataplane as JSON-able data (``describe`` gives each IP set's source)."""
    shared_tiers = _shared_tiers()
    return {
        "hostname": hostname,
        "ipsets": [
            {
                "id": set_id,
                "name": ipset_name(set_id),
                "type": set_type,
                "source": dict(describe(set_id)),
                "members": sorted(members),
            }
            for set_id, (set_type, members) in sorted(dp.ipsets.items())
        ],
        "policies": sorted(
            (
                {"kind": p.kind, "namespace": p.namespace, "name": p.name, "tier": p.tier}
                for p in dp.policies
            ),
            key=lambda d: (d["tier"], d["kind"], d["namespace"], d["name"]),
        ),
        "profiles": sorted(dp.profiles),
        "workload_endpoints": sorted(
            (
                {
                    "id": str(key),
                    "interface": msg.endpoint.name,
                    "ipv4_nets": list(msg.endpoint.ipv4_nets),
                    "ipv6_nets": list(msg.endpoint.ipv6_nets),
                    "profiles": list(msg.endpoint.profile_ids),
                    "tiers": shared_tiers(msg.tiers),
                }
                for key, msg in dp.workloads.items()
            ),
            key=lambda d: d["id"],
        ),
        "host_endpoints": sorted(
            (
                {
                    "id": str(key),
                    "interface": msg.endpoint.name,
                    "ipv4_nets": [f"{ip}/32" for ip in msg.endpoint.expected_ipv4_addrs],
                    "ipv6_nets": [f"{ip}/128" for ip in msg.endpoint.expected_ipv6_addrs],
                    "profiles": list(msg.endpoint.profile_ids),
                    "tiers": _tiers(msg.tiers),
                    "untracked_tiers": _tiers(msg.untracked_tiers, ends_in_pass=True),
                    "pre_dnat_tiers": _tiers(msg.pre_dnat_tiers, ends_in_pass=True),
                    "forward_tiers": _tiers(msg.forward_tiers),
                }
                for key, msg in dp.hosts.items()
            ),
            key=lambda d: d["id"],
        ),
        "routes": [
            {
                "dst": dst,
                "types": sorted(route.types),
                "dst_node": route.dst_node,
                "dst_node_ip": route.dst_node_ip,
                "tunnel": route.tunnel,
                "nat_outgoing": route.nat_outgoing,
            }
            for dst, route in sorted(dp.routes.items())
        ],
        "vteps": [
            {
                "node": node,
                "mac": vtep.mac,
                "ipv4_addr": vtep.ipv4_addr,
                "parent_device_ip": vtep.parent_device_ip,
                **(
                    {
                        "mac_v6": vtep.mac_v6,
                        "ipv6_addr": vtep.ipv6_addr,
                        "parent_device_ipv6": vtep.parent_device_ipv6,
                    }
                    if vtep.ipv6_addr
                    else {}
                ),
            }
            for node, vtep in sorted(dp.vteps.items())
        ],
        "wireguard_peers": [
            {
                "hostname": peer.hostname,
                "public_key": peer.public_key,
                "interface_ipv4_addr": peer.interface_ipv4_addr,
                **(
                    {
                        "public_key_v6": peer.public_key_v6,
                        "interface_ipv6_addr": peer.interface_ipv6_addr,
                    }
                    if peer.public_key_v6
                    else {}
                ),
            }
            for _, peer in sorted(dp.wireguard.items())
            if peer.hostname != hostname
        ],
        "encapsulation": (
            {
                "ipip": dp.encapsulation.ipip_enabled,
                "vxlan": dp.encapsulation.vxlan_enabled,
                "vxlan_v6": dp.encapsulation.vxlan_enabled_v6,
            }
            if dp.encapsulation
            else None
        ),
        "config": dict(sorted((dp.config_text or {}).items())),
    }


def describe_message(msg: m.ToDataplane) -> str:
    """One line per message, for ``pyfelix run --dry-run``."""
    name = type(msg).__name__
    if isinstance(msg, m.IPSetUpdate):
        return f"{name} {msg.id} {msg.type} members={sorted(msg.members)}"
    if isinstance(msg, m.IPSetDeltaUpdate):
        return f"{name} {msg.id} +{sorted(msg.added)} -{sorted(msg.removed)}"
    if isinstance(msg, m.ActivePolicyUpdate | m.ActivePolicyRemove):
        return f"{name} {msg.id.tier}/{msg.id.kind}/{_policy_name(msg.id)}"
    if isinstance(msg, m.WorkloadEndpointUpdate | m.HostEndpointUpdate):
        tiers = ",".join(t.name for t in msg.tiers) or "-"
        return f"{name} {msg.id} iface={msg.endpoint.name} tiers={tiers}"
    if isinstance(msg, m.RouteUpdate):
        return f"{name} {msg.dst} {'+'.join(sorted(msg.types))} node={msg.dst_node or '-'}"
    if isinstance(msg, m.ConfigUpdate):
        return f"{name} {len(msg.config)} parameters"
    fields = attrs.asdict(msg, recurse=False) if attrs.has(type(msg)) else {}
    short = " ".join(f"{k}={v}" for k, v in fields.items() if not isinstance(v, dict | tuple))
    return f"{name} {short}".rstrip()
