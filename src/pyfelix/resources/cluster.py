"""Cluster- and node-level configuration: Node, FelixConfiguration, ClusterInformation,
BGPConfiguration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import attrs

from pyfelix.config.params import BY_JSON
from pyfelix.config.text import ParamError, parse_duration
from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    BOOL,
    INT,
    INT_OR_STR,
    JSON,
    RAW,
    STR,
    STR_LIST,
    Context,
    ListOf,
    Nested,
    Spec,
    TooDeep,
    field,
    freeze,
    thaw,
    type_name,
)
from pyfelix.values import FrozenMap


@attrs.frozen
class NodeBGPSpec(Spec):
    as_number: int | str | None = field("asNumber", INT_OR_STR)
    ipv4_address: str = field("ipv4Address", STR, default="")
    ipv6_address: str = field("ipv6Address", STR, default="")
    ipv4_ipip_tunnel_addr: str = field("ipv4IPIPTunnelAddr", STR, default="")
    route_reflector_cluster_id: str = field("routeReflectorClusterID", STR, default="")


@attrs.frozen
class OrchRef(Spec):
    node_name: str = field("nodeName", STR, default="")
    orchestrator: str = field("orchestrator", STR, default="", keep_empty=True)


@attrs.frozen
class NodeWireguardSpec(Spec):
    interface_ipv4_address: str = field("interfaceIPv4Address", STR, default="")
    interface_ipv6_address: str = field("interfaceIPv6Address", STR, default="")


@attrs.frozen
class NodeAddress(Spec):
    address: str = field("address", STR, default="", keep_empty=True)
    type: str = field("type", STR, default="")


@attrs.frozen
class NodeInterface(Spec):
    name: str = field("name", STR, default="")
    addresses: tuple[str, ...] = field("addresses", STR_LIST, factory=tuple)


@attrs.frozen
class NodeSpec(Spec):
    bgp: NodeBGPSpec | None = field("bgp", Nested(NodeBGPSpec))
    ipv4_vxlan_tunnel_addr: str = field("ipv4VXLANTunnelAddr", STR, default="")
    vxlan_tunnel_mac_addr: str = field("vxlanTunnelMACAddr", STR, default="")
    ipv6_vxlan_tunnel_addr: str = field("ipv6VXLANTunnelAddr", STR, default="")
    vxlan_tunnel_mac_addr_v6: str = field("vxlanTunnelMACAddrV6", STR, default="")
    orch_refs: tuple[OrchRef, ...] = field("orchRefs", ListOf(Nested(OrchRef)), factory=tuple)
    wireguard: NodeWireguardSpec | None = field("wireguard", Nested(NodeWireguardSpec))
    addresses: tuple[NodeAddress, ...] = field(
        "addresses", ListOf(Nested(NodeAddress)), factory=tuple
    )
    interfaces: tuple[NodeInterface, ...] = field(
        "interfaces", ListOf(Nested(NodeInterface)), factory=tuple
    )


@attrs.frozen
class NodeStatus(Spec):
    wireguard_public_key: str = field("wireguardPublicKey", STR, default="")
    wireguard_public_key_v6: str = field("wireguardPublicKeyV6", STR, default="")
    pod_cidrs: tuple[str, ...] = field("podCIDRs", STR_LIST, factory=tuple)


@register
@attrs.frozen
class Node(Resource):
    KIND = "Node"
    PLURAL = "nodes"
    SPEC = NodeSpec
    STATUS = NodeStatus
    spec: NodeSpec = attrs.field(factory=NodeSpec)
    status: NodeStatus | None = None


_SCALARS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "duration": (str, 'a duration string such as "90s"'),
    "int": (int, "an integer"),
    "bool": (bool, "a boolean"),
    "string": (str, "a string"),
    "enum": (str, "a string"),
    "other": ((int, str), "a number or a string"),
}


def _check_param_shape(kind: str, value: JSON, ctx: Context) -> bool:
    """Structural check of one FelixConfiguration value by its kind."""
    if kind in _SCALARS:
        types, wanted = _SCALARS[kind]
        bad_bool = isinstance(value, bool) and kind != "bool"
        if bad_bool or not isinstance(value, types):
            if kind == "other" and isinstance(value, list):
                return all(_check_param_shape("other", v, ctx.at(i)) for i, v in enumerate(value))
            ctx.error(f"expected {wanted}, got {type_name(value)} {value!r}")
            return False
        return True
    if kind in ("list-string", "cidr-list", "port-list"):
        if not isinstance(value, list):
            ctx.error(f"expected a list, got {type_name(value)} {value!r}")
            return False
        item_kind = dict if kind == "port-list" else str
        ok = True
        for index, item in enumerate(value):
            if not isinstance(item, item_kind):
                ctx.at(index).error(f"expected a {'mapping' if item_kind is dict else 'string'}")
                ok = False
        return ok
    if kind == "map" and not isinstance(value, Mapping):
        ctx.error(f"expected a mapping, got {type_name(value)} {value!r}")
        return False
    return True


def felix_config_text(json_name: str, value: Any) -> str:
    """A FelixConfiguration value as the text Felix's config keys carry."""
    param = BY_JSON[json_name]
    if param.kind == "duration":
        try:
            seconds = parse_duration(value)
        except ParamError:
            return str(value)
        if param.felix.endswith("Millis"):
            seconds *= 1000
        return f"{seconds:g}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if param.kind == "port-list":
        entries = []
        for item in value:
            net = item.get("net", "")
            middle = f"[{net}]:" if ":" in net else (f"{net}:" if net else "")
            entries.append(f"{str(item.get('protocol', '')).lower()}:{middle}{item.get('port')}")
        return ",".join(entries) or "none"
    if param.kind in ("list-string", "cidr-list") or (
        param.kind == "other" and isinstance(value, tuple)
    ):
        return ",".join(str(v) for v in value)
    if param.kind == "map":
        return "".join(f"{k}={v}," for k, v in value.items())
    if json_name in ("routeTableRange",):
        return f"{value.get('min')}-{value.get('max')}"
    if json_name == "routeTableRanges":
        return ",".join(f"{r.get('min')}-{r.get('max')}" for r in value)
    if json_name == "healthTimeoutOverrides":
        return ",".join(f"{r.get('name')}={r.get('timeout')}" for r in value)
    if json_name == "bpfConntrackTimeouts":
        return ",".join(f"{k[0].upper()}{k[1:]}={v}" for k, v in value.items())
    return str(value)


@attrs.frozen
class FelixConfigurationSpec(Spec):
    """FelixConfiguration's ~190 fields, held as given and checked against Felix's table.

    Typed access (durations in seconds, enums canonicalised, defaults filled) is the config
    layer's job; this class only keeps what the manifest said, in calicoctl's JSON names.
    """

    values: FrozenMap[JSON] = attrs.field(factory=FrozenMap)

    @classmethod
    def decode_json(cls, value: Mapping[str, JSON], ctx: Context) -> Self:
        kept: dict[str, JSON] = {}
        for key, item in value.items():
            param = BY_JSON.get(key)
            if param is None:
                ctx.at(str(key)).error("unknown field")
            elif item is not None and _check_param_shape(param.kind, item, ctx.at(key)):
                try:
                    kept[key] = freeze(item)
                except TooDeep as exc:
                    ctx.at(key).error(str(exc))
        return cls(FrozenMap(kept))

    def encode_json(self) -> dict[str, JSON]:
        return {key: thaw(self.values[key]) for key in sorted(self.values)}

    def get(self, json_name: str) -> JSON:
        return self.values.get(json_name)

    def felix_values(self) -> dict[str, str]:
        """The Felix parameters set here, by Felix's names, as the text its config keys
        carry (unset and empty ones left out; nodeSelector is not a parameter)."""
        out = {}
        for json_name, value in self.values.items():
            felix = BY_JSON[json_name].felix
            if felix and value is not None and value != "":
                out[felix] = felix_config_text(json_name, value)
        return out


@register
@attrs.frozen
class FelixConfiguration(Resource):
    """Global ("default") or per-node ("node.<hostname>") Felix settings."""

    KIND = "FelixConfiguration"
    PLURAL = "felixconfigurations"
    SPEC = FelixConfigurationSpec
    spec: FelixConfigurationSpec = attrs.field(factory=FelixConfigurationSpec)


@attrs.frozen
class ClusterInformationSpec(Spec):
    cluster_guid: str = field("clusterGUID", STR, default="")
    cluster_type: str = field("clusterType", STR, default="")
    calico_version: str = field("calicoVersion", STR, default="")
    datastore_ready: bool | None = field("datastoreReady", BOOL, keep_empty=True)
    variant: str = field("variant", STR, default="")


@register
@attrs.frozen
class ClusterInformation(Resource):
    KIND = "ClusterInformation"
    PLURAL = "clusterinformations"
    SPEC = ClusterInformationSpec
    spec: ClusterInformationSpec = attrs.field(factory=ClusterInformationSpec)


@attrs.frozen
class CIDRBlock(Spec):
    cidr: str = field("cidr", STR, default="")


_CIDRS = ListOf(Nested(CIDRBlock))


@attrs.frozen
class BGPConfigurationSpec(Spec):
    """BGP settings; pyfelix uses the service CIDRs, the rest is carried for calicoctl parity."""

    log_severity_screen: str = field("logSeverityScreen", STR, default="")
    node_to_node_mesh_enabled: bool | None = field("nodeToNodeMeshEnabled", BOOL, keep_empty=True)
    as_number: int | str | None = field("asNumber", INT_OR_STR)
    service_load_balancer_ips: tuple[CIDRBlock, ...] = field(
        "serviceLoadBalancerIPs", _CIDRS, factory=tuple
    )
    service_external_ips: tuple[CIDRBlock, ...] = field("serviceExternalIPs", _CIDRS, factory=tuple)
    service_cluster_ips: tuple[CIDRBlock, ...] = field("serviceClusterIPs", _CIDRS, factory=tuple)
    service_load_balancer_aggregation: str = field(
        "serviceLoadBalancerAggregation", STR, default=""
    )
    communities: JSON = field("communities", RAW)
    prefix_advertisements: JSON = field("prefixAdvertisements", RAW)
    listen_port: int = field("listenPort", INT, default=0)
    node_mesh_password: JSON = field("nodeMeshPassword", RAW)
    node_mesh_max_restart_time: str = field("nodeMeshMaxRestartTime", STR, default="")
    bind_mode: str = field("bindMode", STR, default="")
    ignored_interfaces: tuple[str, ...] = field("ignoredInterfaces", STR_LIST, factory=tuple)
    local_workload_peering_ipv4: str = field("localWorkloadPeeringIPV4", STR, default="")
    local_workload_peering_ipv6: str = field("localWorkloadPeeringIPV6", STR, default="")
    program_cluster_routes: str = field("programClusterRoutes", STR, default="")
    ipv4_normal_route_priority: int | None = field("ipv4NormalRoutePriority", INT)
    ipv6_normal_route_priority: int | None = field("ipv6NormalRoutePriority", INT)


@register
@attrs.frozen
class BGPConfiguration(Resource):
    KIND = "BGPConfiguration"
    PLURAL = "bgpconfigurations"
    SPEC = BGPConfigurationSpec
    spec: BGPConfigurationSpec = attrs.field(factory=BGPConfigurationSpec)
