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
    pools: dict[str, m.IPAMPoolUpdate] = attrs.Factory(dict)
    #: Every node's addresses, by hostname.
    host_metadata: dict[str, m.HostMetadataUpdate] = attrs.Factory(dict)
    #: Every node's WireGuard key and interface addresses, by hostname.
    wireguard: dict[str, m.WireguardEndpointUpdate] = attrs.Factory(dict)
    #: The namespaces and service accounts sent, without their labels: no manager reads
    #: them, and kept, the messages of a cluster of tenants' 100,000 namespaces were 25 MB.
    namespaces: dict[str, None] = attrs.Factory(dict)
    service_accounts: dict[m.ServiceAccountID, None] = attrs.Factory(dict)
    #: By (namespace, name).
    services: dict[tuple[str, str], m.ServiceUpdate] = attrs.Factory(dict)
    #: The typed configuration (Felix's defaults until a ConfigUpdate), and its text as sent.
    config: FelixConfig = attrs.Factory(FelixConfig)
    config_text: dict[str, str] | None = None
    encapsulation: m.Encapsulation | None = None
    #: The service CIDRs ServiceLoopPrevention guards (the default BGPConfiguration's).
    bgp_config: m.GlobalBGPConfigUpdate = attrs.Factory(m.GlobalBGPConfigUpdate)
    in_sync: bool = False
    datastore_not_ready: bool = False
    #: What the node itself holds, not the messages: kube-proxy runs in IPVS mode (its
    #: kube-ipvs0 device was there at start, as Felix detects it), and this node's own
    #: addresses (its interfaces but the workloads' and the excluded ones: Felix's
    #: this-host IP set). The Linux driver observes them; the dry-run is told.
    kube_ipvs: bool = False
    host_ips: frozenset[str] = frozenset()
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

    def holds(self, removal: m.ToDataplane) -> bool:
        """Whether what a removal message removes is held (a strict dataplane refuses the
        removal of what was never sent)."""
        attribute, key = _REMOVALS[type(removal)]
        return key(removal) in getattr(self, attribute)

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
            pools=dict(self.pools),
            host_metadata=dict(self.host_metadata),
            wireguard=dict(self.wireguard),
            namespaces=dict(self.namespaces),
            service_accounts=dict(self.service_accounts),
            services=dict(self.services),
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


def _noted(attribute: str, key: Callable[[Any], Any]) -> Callable[[NodeState, Any], None]:
    def handler(dp: NodeState, msg: Any) -> None:
        getattr(dp, attribute)[key(msg)] = None

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


def _by_hostname(msg: Any) -> Any:
    return msg.hostname


def _by_service(msg: Any) -> Any:
    return (msg.namespace, msg.name)


#: The keyed kinds: (update, removal, attribute, key).
_KEYED: tuple[tuple[type, type, str, Callable[[Any], Any]], ...] = (
    (m.IPAMPoolUpdate, m.IPAMPoolRemove, "pools", _by_id),
    (m.HostMetadataUpdate, m.HostMetadataRemove, "host_metadata", _by_hostname),
    (m.WireguardEndpointUpdate, m.WireguardEndpointRemove, "wireguard", _by_hostname),
    (m.NamespaceUpdate, m.NamespaceRemove, "namespaces", _by_id),
    (m.ServiceAccountUpdate, m.ServiceAccountRemove, "service_accounts", _by_id),
    (m.ServiceUpdate, m.ServiceRemove, "services", _by_service),
)
#: The keyed kinds noted by their key alone.
_NOTED = frozenset({"namespaces", "service_accounts"})
for _update, _removal, _attribute, _key in _KEYED:
    _HANDLERS[_update] = (_noted if _attribute in _NOTED else _set)(_attribute, _key)
    _HANDLERS[_removal] = _remove(_attribute, _key)

#: Every removal message: the attribute it removes from, and its key there.
_REMOVALS: dict[type, tuple[str, Callable[[Any], Any]]] = {
    m.IPSetRemove: ("ipsets", _by_id),
    m.ActivePolicyRemove: ("policies", _by_id),
    m.ActiveProfileRemove: ("profiles", _by_id),
    m.WorkloadEndpointRemove: ("workloads", _by_id),
    m.HostEndpointRemove: ("hosts", _by_id),
    m.RouteRemove: ("routes", lambda msg: msg.dst),
    m.VXLANTunnelEndpointRemove: ("vteps", lambda msg: msg.node),
    **{removal: (attribute, key) for _, removal, attribute, key in _KEYED},
}
