"""The dry-run dataplane: applies messages to an in-memory model of the node, touching nothing.

It is what ``pyfelix dry-run`` and ``pyfelix run --dry-run`` program, and what the Linux driver
will be checked against: after the same messages, both should hold the same state.
:func:`snapshot` renders that state as the JSON document described in ARCHITECTURE.md section 9,
sorted everywhere so two runs on the same input print the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix.config import FelixConfig

MAX_IPSET_NAME = 31


def ipset_name(set_id: str, version: int = 4) -> str:
    """Felix's ipset name: "cali40"/"cali60" + the id, cut to 31 characters."""
    return f"cali{version}0{set_id}"[:MAX_IPSET_NAME]


def _policy_name(policy: m.PolicyID) -> str:
    return f"{policy.namespace}/{policy.name}" if policy.namespace else policy.name


def _tiers(tiers: tuple[m.TierInfo, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "default_action": t.default_action,
            "ingress_policies": [_policy_name(p) for p in t.ingress_policies],
            "egress_policies": [_policy_name(p) for p in t.egress_policies],
        }
        for t in tiers
    ]


@attrs.define
class DryRunDataplane:
    """Holds what the dataplane was told; ``apply`` takes any message, in any order."""

    ipsets: dict[str, tuple[str, set[str]]] = attrs.Factory(dict)
    policies: dict[m.PolicyID, m.ActivePolicyUpdate] = attrs.Factory(dict)
    profiles: dict[str, m.ActiveProfileUpdate] = attrs.Factory(dict)
    workloads: dict[Any, m.WorkloadEndpointUpdate] = attrs.Factory(dict)
    hosts: dict[Any, m.HostEndpointUpdate] = attrs.Factory(dict)
    routes: dict[str, m.RouteUpdate] = attrs.Factory(dict)
    vteps: dict[str, m.VXLANTunnelEndpointUpdate] = attrs.Factory(dict)
    others: dict[tuple[str, Any], Any] = attrs.Factory(dict)
    #: The typed configuration (Felix's defaults until a ConfigUpdate), and its text as sent.
    config: FelixConfig = attrs.Factory(FelixConfig)
    config_text: dict[str, str] | None = None
    encapsulation: m.Encapsulation | None = None
    in_sync: bool = False
    datastore_not_ready: bool = False

    def apply(self, msg: m.ToDataplane) -> None:
        handler = _HANDLERS.get(type(msg))
        if handler is not None:
            handler(self, msg)
            return
        kind, key, is_update = keyed_identity(msg)
        if is_update:
            self.others[(kind, key)] = msg
        else:
            self.others.pop((kind, key), None)


def _ipset_update(dp: DryRunDataplane, msg: Any) -> None:
    dp.ipsets[msg.id] = (msg.type, set(msg.members))


def _ipset_delta(dp: DryRunDataplane, msg: Any) -> None:
    _, members = dp.ipsets.setdefault(msg.id, ("hash:net", set()))
    members -= msg.removed
    members |= msg.added


def _config(dp: DryRunDataplane, msg: Any) -> None:
    dp.config, dp.config_text = msg.typed, dict(msg.config)


def _set(attribute: str, key: Callable[[Any], Any]) -> Callable[[DryRunDataplane, Any], None]:
    def handler(dp: DryRunDataplane, msg: Any) -> None:
        getattr(dp, attribute)[key(msg)] = msg

    return handler


def _remove(attribute: str, key: Callable[[Any], Any]) -> Callable[[DryRunDataplane, Any], None]:
    def handler(dp: DryRunDataplane, msg: Any) -> None:
        getattr(dp, attribute).pop(key(msg), None)

    return handler


def _flag(name: str, value: Any = True) -> Callable[[DryRunDataplane, Any], None]:
    def handler(dp: DryRunDataplane, msg: Any) -> None:
        setattr(dp, name, msg if value is None else value)

    return handler


def _by_id(msg: Any) -> Any:
    return msg.id


_HANDLERS: dict[type, Callable[[DryRunDataplane, Any], None]] = {
    m.InSync: _flag("in_sync"),
    m.DatastoreNotReady: _flag("datastore_not_ready"),
    m.ConfigUpdate: _config,
    m.Encapsulation: _flag("encapsulation", None),
    m.IPSetUpdate: _ipset_update,
    m.IPSetDeltaUpdate: _ipset_delta,
    m.IPSetRemove: _remove("ipsets", _by_id),
    m.ActivePolicyUpdate: _set("policies", _by_id),
    m.ActivePolicyRemove: _remove("policies", _by_id),
    m.ActiveProfileUpdate: _set("profiles", _by_id),
    m.ActiveProfileRemove: _remove("profiles", _by_id),
    m.WorkloadEndpointUpdate: _set("workloads", _by_id),
    m.WorkloadEndpointRemove: _remove("workloads", _by_id),
    m.HostEndpointUpdate: _set("hosts", _by_id),
    m.HostEndpointRemove: _remove("hosts", _by_id),
    m.RouteUpdate: _set("routes", lambda msg: msg.dst),
    m.RouteRemove: _remove("routes", lambda msg: msg.dst),
    m.VXLANTunnelEndpointUpdate: _set("vteps", lambda msg: msg.node),
    m.VXLANTunnelEndpointRemove: _remove("vteps", lambda msg: msg.node),
}

_KEYED: dict[type, tuple[str, bool]] = {
    m.ServiceAccountUpdate: ("service_account", True),
    m.ServiceAccountRemove: ("service_account", False),
    m.NamespaceUpdate: ("namespace", True),
    m.NamespaceRemove: ("namespace", False),
    m.WireguardEndpointUpdate: ("wireguard", True),
    m.WireguardEndpointRemove: ("wireguard", False),
    m.HostMetadataUpdate: ("host", True),
    m.HostMetadataRemove: ("host", False),
    m.IPAMPoolUpdate: ("pool", True),
    m.IPAMPoolRemove: ("pool", False),
    m.ServiceUpdate: ("service", True),
    m.ServiceRemove: ("service", False),
}


def keyed_identity(msg: Any) -> tuple[str, Any, bool]:
    kind, is_update = _KEYED[type(msg)]
    if kind == "service":
        return kind, (msg.namespace, msg.name), is_update
    return kind, getattr(msg, "id", None) or getattr(msg, "hostname", None), is_update


def snapshot(
    dp: DryRunDataplane, hostname: str, describe: Callable[[str], Mapping[str, str]]
) -> dict[str, Any]:
    """The dataplane as JSON-able data (``describe`` gives each IP set's source)."""
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
                    "tiers": _tiers(msg.tiers),
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
                    "untracked_tiers": _tiers(msg.untracked_tiers),
                    "pre_dnat_tiers": _tiers(msg.pre_dnat_tiers),
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
            }
            for node, vtep in sorted(dp.vteps.items())
        ],
        "wireguard_peers": [
            {
                "hostname": peer.hostname,
                "public_key": peer.public_key,
                "interface_ipv4_addr": peer.interface_ipv4_addr,
            }
            for (kind, _), peer in sorted(dp.others.items(), key=lambda kv: str(kv[0]))
            if kind == "wireguard" and peer.hostname != hostname
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
