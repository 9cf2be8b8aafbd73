"""The desired state of a node: every message from the calculation graph applied to an
in-memory model, touching nothing.

``pyfelix dry-run`` prints it (dryrun.snapshot), the printing driver renders it, and the Linux
driver's managers write it into the kernel: after the same messages, all three agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix.config import FelixConfig


@attrs.define
class NodeState:
    """What the node should look like, as the messages said: the desired state the dry-run prints
    and the Linux driver's managers write. ``apply`` takes any message, in any order."""

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
    #: The service CIDRs ServiceLoopPrevention guards (the default BGPConfiguration's).
    bgp_config: m.GlobalBGPConfigUpdate = attrs.Factory(m.GlobalBGPConfigUpdate)
    in_sync: bool = False
    datastore_not_ready: bool = False
    #: Bumped by every message a rule may depend on (all but IP set members and a local
    #: endpoint's labels), so a driver renders its chains again only when it changed.
    rules_generation: int = 0

    @property
    def ipip_tunnel_addr(self) -> str:
        """This node's IPIP address: IpInIpTunnelAddr, which comes with its host configuration
        (as in Felix), "" if it has none."""
        return self.config.ipip_tunnel_addr

    def vxlan_tunnel_addr(self, version: int) -> str:
        """This node's VXLAN address of IP ``version`` (IPv4VXLANTunnelAddr,
        IPv6VXLANTunnelAddr), "" if it has none."""
        config = self.config
        return config.ipv6_vxlan_tunnel_addr if version == 6 else config.ipv4_vxlan_tunnel_addr

    def apply(self, msg: m.ToDataplane) -> None:
        msg_type = type(msg)
        # No rule depends on IP set members (the managers note which sets changed).
        if not isinstance(msg, m.IPSetUpdate | m.IPSetDeltaUpdate | m.IPSetRemove) and (
            not isinstance(msg, m.WorkloadEndpointUpdate) or _rules_differ(self, msg)
        ):
            self.rules_generation += 1
        handler = _HANDLERS.get(msg_type)
        if handler is not None:
            handler(self, msg)
            return
        kind, key, is_update = keyed_identity(msg)
        if is_update:
            self.others[(kind, key)] = msg
        else:
            self.others.pop((kind, key), None)

    def snapshot(self) -> NodeState:
        """A copy that later messages leave as it is, for an apply that renders one IP
        version's chains after awaiting another's write, from the state its IP sets came from.
        The mappings are copied; their values are immutable messages, but for IP set members,
        which are shared (no chain depends on them)."""
        return attrs.evolve(
            self,
            ipsets=dict(self.ipsets),
            policies=dict(self.policies),
            profiles=dict(self.profiles),
            workloads=dict(self.workloads),
            hosts=dict(self.hosts),
            routes=dict(self.routes),
            vteps=dict(self.vteps),
            others=dict(self.others),
        )


def _rules_differ(dp: NodeState, msg: m.WorkloadEndpointUpdate) -> bool:
    """Whether the update changes more than the endpoint's labels (which only IP set members
    depend on: the calculation graph sends those as IP set messages)."""
    old = dp.workloads.get(msg.id)
    if old is None or old.tiers != msg.tiers:
        return True
    return attrs.evolve(msg.endpoint, labels=old.endpoint.labels) != old.endpoint


def _ipset_update(dp: NodeState, msg: Any) -> None:
    dp.ipsets[msg.id] = (msg.type, set(msg.members))


def _ipset_delta(dp: NodeState, msg: Any) -> None:
    _, members = dp.ipsets.setdefault(msg.id, ("hash:net", set()))
    members -= msg.removed
    members |= msg.added


def _config(dp: NodeState, msg: Any) -> None:
    dp.config, dp.config_text = msg.typed, dict(msg.config)


def _set(attribute: str, key: Callable[[Any], Any]) -> Callable[[NodeState, Any], None]:
    def handler(dp: NodeState, msg: Any) -> None:
        getattr(dp, attribute)[key(msg)] = msg

    return handler


def _remove(attribute: str, key: Callable[[Any], Any]) -> Callable[[NodeState, Any], None]:
    def handler(dp: NodeState, msg: Any) -> None:
        getattr(dp, attribute).pop(key(msg), None)

    return handler


def _flag(name: str, value: Any = True) -> Callable[[NodeState, Any], None]:
    def handler(dp: NodeState, msg: Any) -> None:
        setattr(dp, name, msg if value is None else value)

    return handler


def _by_id(msg: Any) -> Any:
    return msg.id


_HANDLERS: dict[type, Callable[[NodeState, Any], None]] = {
    m.InSync: _flag("in_sync"),
    m.DatastoreNotReady: _flag("datastore_not_ready"),
    m.ConfigUpdate: _config,
    m.Encapsulation: _flag("encapsulation", None),
    m.GlobalBGPConfigUpdate: _flag("bgp_config", None),
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
