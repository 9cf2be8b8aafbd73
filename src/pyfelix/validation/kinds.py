"""Per-kind validation, one function per kind, dispatched by its KIND."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs

from pyfelix.config.text import ParamError, parse_duration
from pyfelix.errors import FieldProblem
from pyfelix.ipnet import IPV4_HOST, parse_network
from pyfelix.resources.policy import BUILTIN_TIERS, GlobalNetworkPolicySpec, NetworkPolicySpec
from pyfelix.validation.common import (
    INTERFACE_NAME,
    MAC,
    Checker,
    check_annotations,
    check_cidr,
    check_enum,
    check_interface_name,
    check_ip,
    check_labels,
    check_mac,
    check_name,
    check_net,
    check_nets,
    check_port_number,
    check_protocol,
    check_selector,
    check_single_address,
    check_wireguard_key,
    good_annotations,
    good_labels,
    good_name,
    name_accepted,
    port_name_problem,
    supports_ports,
)
from pyfelix.validation.felixconfig import check_felix_configuration
from pyfelix.validation.rules import check_rule

if TYPE_CHECKING:
    from pyfelix.resources import (
        BGPConfiguration,
        BlockAffinity,
        ClusterInformation,
        EndpointSlice,
        FelixConfiguration,
        HostEndpoint,
        IPAMBlock,
        IPPool,
        KubernetesClusterNetworkPolicy,
        KubernetesNetworkPolicy,
        Node,
        Pod,
        Profile,
        Resource,
        Service,
        Tier,
        WorkloadEndpoint,
    )
    from pyfelix.resources.endpoints import EndpointPort, WorkloadEndpointSpec

_LABEL_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACED_POLICY_NAME = re.compile(
    rf"^({_LABEL_RE}(\.{_LABEL_RE})?|(knp|ossg)\.default\.{_LABEL_RE}(\.{_LABEL_RE})*)$"
)
_GLOBAL_POLICY_NAME = re.compile(rf"^({_LABEL_RE}\.)?{_LABEL_RE}$")
RESERVED_TIERS = BUILTIN_TIERS
#: Calico's CRDs: maxItems 1024 on spec.ingress and spec.egress of policies and profiles.
MAX_RULES = 1024
NAMESPACE_LABEL = "projectcalico.org/namespace"


@attrs.frozen
class ValidationContext:
    """Cluster settings some checks depend on (Felix's validation filter has them too)."""

    workload_source_spoofing: str = "Disabled"


Check = Callable[[Checker, Any, ValidationContext], None]
#: Each kind's check, by its KIND: a kind's classes are imported only when one of its
#: resources is read (``pyfelix.resources.meta.MANIFEST_KIND_MODULES``), not by this module.
_CHECKS: dict[str, Check] = {}
F = TypeVar("F", bound=Check)


def _for(*kinds: str) -> Callable[[F], F]:
    def register(fn: F) -> F:
        for kind in kinds:
            _CHECKS[kind] = fn
        return fn

    return register


def check_metadata(c: Checker, resource: Resource) -> None:
    meta = c.at("metadata")
    if resource.KIND != "FelixConfiguration":
        check_name(meta.at("name"), resource.name, label=resource.KIND in ("Tier", "Namespace"))
    if resource.NAMESPACED:
        check_name(meta.at("namespace"), resource.namespace, label=True)
    check_labels(meta.at("labels"), resource.metadata.labels)
    check_annotations(meta.at("annotations"), resource.metadata.annotations)


def plain_metadata_valid(
    name: str, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> bool:
    """What ``check_metadata`` accepts of a namespaced kind's metadata (a pod's, a service
    account's), on the bare values: for the direct paths that skip the resource."""
    return (
        name_accepted(name)
        and good_name(namespace, label=True)
        and good_labels(labels)
        and (not annotations or good_annotations(annotations))
    )


def _plain_workload(wep: WorkloadEndpoint) -> bool:
    """Whether a workload endpoint has only the fields nearly every one has (names, interface,
    addresses, profiles, MAC, labels), each valid: ``_workload`` and ``check_metadata`` would
    then find nothing. Checked without building a Checker per field, which was most of the
    cost of validating a 100k-endpoint snapshot; anything else takes the full check."""
    s = wep.spec
    if s.ip_nats or s.ports or s.allow_spoofed_source_prefixes or s.ipv4_gateway:
        return False
    if s.ipv6_gateway:
        return False
    names = (s.orchestrator, s.workload, s.node, s.pod, s.endpoint, s.service_account_name)
    meta = wep.metadata
    return plain_workload_valid(
        name=wep.name,
        namespace=wep.namespace,
        interface_name=s.interface_name,
        mac=s.mac,
        ip_networks=s.ip_networks,
        names=names,
        profiles=s.profiles,
        labels=meta.labels,
        annotations=meta.annotations,
    )


def plain_workload_valid(
    *,
    name: str,
    namespace: str,
    interface_name: str,
    mac: str,
    ip_networks: Sequence[str],
    names: Sequence[str],
    profiles: Sequence[str],
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> bool:
    """The check of a plain workload endpoint's fields (see ``_plain_workload``), on the bare
    values: the decoder that skips the v3 object (``syncer.plain_workloads``) asks it too."""
    if mac and not MAC.match(mac):
        return False
    # Loops, not all() over generators: this runs for every endpoint of a snapshot, and a
    # generator costs more than the check it drives for the one or two items there are.
    if not name_accepted(name):
        return False  # each endpoint's own: not worth the names' cache
    if not (good_name(namespace, label=True) and interface_name):
        return False
    if not INTERFACE_NAME.match(interface_name):
        return False
    for net in ip_networks:
        if not IPV4_HOST.fullmatch(net):
            return False
    for each in names:
        if each and not good_name(each):
            return False
    for profile in profiles:
        if not good_name(profile):
            return False
    return good_labels(labels) and (not annotations or good_annotations(annotations))


def check_resource(resource: Resource, context: ValidationContext) -> Checker:
    if resource.KIND == "WorkloadEndpoint" and _plain_workload(cast("WorkloadEndpoint", resource)):
        return Checker()
    c = Checker()
    check_metadata(c, resource)
    check = _CHECKS.get(resource.KIND)
    if check is not None:
        check(c, resource, context)
    return c


@_for("Tier")
def _tier(c: Checker, tier: Tier, _: ValidationContext) -> None:
    spec = c.at("spec")
    if tier.spec.default_action:
        check_enum(spec.at("defaultAction"), tier.spec.default_action, ("Deny", "Pass"))
    reserved = RESERVED_TIERS.get(tier.name)
    if reserved is not None:
        order, action = reserved
        if tier.spec.order is not None and tier.spec.order != order:
            spec.at("order").error(f"the {tier.name!r} tier's order must be {order:g}")
        if tier.spec.default_action and tier.spec.default_action != action:
            spec.at("defaultAction").error(
                f"the {tier.name!r} tier must have default action {action!r}"
            )


def _policy_spec(c: Checker, spec: NetworkPolicySpec, *, is_global: bool) -> None:
    if spec.tier:
        check_name(c.at("tier"), spec.tier)
    check_selector(c.at("selector"), spec.selector)
    check_selector(c.at("serviceAccountSelector"), spec.service_account_selector)
    seen: set[str] = set()
    for index, policy_type in enumerate(spec.types):
        tc = c.at("types").at(index)
        check_enum(tc, policy_type, ("Ingress", "Egress"))
        tc.check(policy_type not in seen, f"{policy_type!r} type specified more than once")
        seen.add(policy_type)
    for index, hint in enumerate(spec.performance_hints):
        check_enum(c.at("performanceHints").at(index), hint, ("AssumeNeededOnEveryNode",))
    for direction in ("ingress", "egress"):
        rules = getattr(spec, direction)
        c.at(direction).check(len(rules) <= MAX_RULES, f"at most {MAX_RULES} rules")
        for index, rule in enumerate(rules):
            check_rule(
                c.at(direction).at(index), rule, direction=direction, global_policy=is_global
            )
    if isinstance(spec, GlobalNetworkPolicySpec):
        check_selector(c.at("namespaceSelector"), spec.namespace_selector)
        if spec.pre_dnat and spec.do_not_track:
            c.error("preDNAT and doNotTrack cannot both be true")
        if spec.pre_dnat and spec.egress:
            c.at("egress").error("preDNAT policy cannot have any egress rules")
        if spec.pre_dnat and "Egress" in spec.types:
            c.at("types").error("preDNAT policy cannot have 'Egress' type")
        if (spec.pre_dnat or spec.do_not_track) and not spec.apply_on_forward:
            c.at("applyOnForward").error(
                "applyOnForward must be true if either preDNAT or doNotTrack is true"
            )


@_for("NetworkPolicy", "GlobalNetworkPolicy", "StagedNetworkPolicy", "StagedGlobalNetworkPolicy")
def _policy(c: Checker, policy: Any, _: ValidationContext) -> None:
    is_global = not policy.NAMESPACED
    pattern = _GLOBAL_POLICY_NAME if is_global else _NAMESPACED_POLICY_NAME
    if policy.name and len(policy.name) <= 253 and not pattern.match(policy.name):
        c.at("metadata.name").error(
            f"invalid policy name {policy.name!r}: expected a DNS label, optionally prefixed "
            "by '<tier>.'"
        )
    spec = policy.spec
    staged_action = getattr(spec, "staged_action", None)
    if staged_action:
        check_enum(c.at("spec.stagedAction"), staged_action, ("Set", "Delete", "Learn", "Ignore"))
        if staged_action == "Delete":
            blank = attrs.evolve(type(spec)(), tier=spec.tier, staged_action=staged_action)
            c.at("spec").check(
                spec == blank, "spec fields, except tier, must be empty if stagedAction is Delete"
            )
            return
    _policy_spec(c.at("spec"), spec, is_global=is_global)


@_for("Profile")
def _profile(c: Checker, profile: Profile, _: ValidationContext) -> None:
    spec = c.at("spec")
    for direction in ("ingress", "egress"):
        rules = getattr(profile.spec, direction)
        spec.at(direction).check(len(rules) <= MAX_RULES, f"at most {MAX_RULES} rules")
        for index, rule in enumerate(rules):
            check_rule(spec.at(direction).at(index), rule, direction=direction)
    check_labels(spec.at("labelsToApply"), profile.spec.labels_to_apply)


def _endpoint_port(c: Checker, port: EndpointPort, *, workload: bool) -> None:
    if port.name:
        problem = port_name_problem(port.name)
        if problem:
            c.at("name").error(f"invalid port name {port.name!r}: {problem}")
    elif not workload or not getattr(port, "host_port", 0):
        c.at("name").error("a port name is required")
    check_protocol(c.at("protocol"), port.protocol)
    c.at("protocol").check(
        supports_ports(port.protocol), f"protocol {port.protocol!r} does not support ports"
    )
    check_port_number(c.at("port"), port.port)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_WORKLOAD_NAMES = tuple(
    (name, _camel(name))
    for name in ("orchestrator", "workload", "node", "pod", "endpoint", "service_account_name")
)


@_for("WorkloadEndpoint")
def _workload(c: Checker, wep: WorkloadEndpoint, context: ValidationContext) -> None:
    spec = c.at("spec")
    s = wep.spec
    for name, json_name in _WORKLOAD_NAMES:
        value = getattr(s, name)
        if value:
            check_name(spec.at(json_name), value)
    if spec.at("interfaceName").check(bool(s.interface_name), "an interface name is required"):
        check_interface_name(spec.at("interfaceName"), s.interface_name, allow_star=False)
    for index, net in enumerate(s.ip_networks):
        check_single_address(spec.at("ipNetworks").at(index), net)
    if s.ipv4_gateway:
        check_ip(spec.at("ipv4Gateway"), s.ipv4_gateway, version=4)
    if s.ipv6_gateway:
        check_ip(spec.at("ipv6Gateway"), s.ipv6_gateway, version=6)
    networks = []
    for net in s.ip_networks if s.ip_nats else ():
        try:
            networks.append(parse_network(net))
        except ValueError:
            continue
    for index, nat in enumerate(s.ip_nats):
        nc = spec.at("ipNATs").at(index)
        check_ip(nc.at("internalIP"), nat.internal_ip)
        check_ip(nc.at("externalIP"), nat.external_ip)
        try:
            internal = ipaddress.ip_address(nat.internal_ip)
            external = ipaddress.ip_address(nat.external_ip)
        except ValueError:
            continue
        nc.check(internal.version == external.version, "mismatched IP versions")
        nc.at("internalIP").check(
            any(internal in n for n in networks), "NAT is not in the endpoint networks"
        )
    for index, profile in enumerate(s.profiles):
        check_name(spec.at("profiles").at(index), profile)
    if s.mac:
        check_mac(spec.at("mac"), s.mac)
    for index, port in enumerate(s.ports):
        _endpoint_port(spec.at("ports").at(index), port, workload=True)
        if port.host_ip:
            check_ip(spec.at("ports").at(index).at("hostIP"), port.host_ip)
    check_nets(spec.at("allowSpoofedSourcePrefixes"), s.allow_spoofed_source_prefixes)
    _spoofing(spec, s, context)


def _spoofing(spec: Checker, s: WorkloadEndpointSpec, context: ValidationContext) -> None:
    if s.allow_spoofed_source_prefixes and context.workload_source_spoofing != "Any":
        spec.at("allowSpoofedSourcePrefixes").error(
            "allowSpoofedSourcePrefixes needs FelixConfiguration workloadSourceSpoofing: Any"
        )


#: The context under which no check fails for the cluster's settings: checking under it, then
#: adding ``context_problems`` under the real context, finds what checking under the real
#: context finds (so resources can be checked before the cluster's settings are known).
PERMISSIVE = ValidationContext(workload_source_spoofing="Any")


def context_problems(resource: Resource, context: ValidationContext) -> list[FieldProblem]:
    """The problems ``resource`` has only because of the cluster's settings."""
    c = Checker()
    if resource.KIND == "WorkloadEndpoint":
        _spoofing(c.at("spec"), cast("WorkloadEndpoint", resource).spec, context)
    return c.problems


@_for("HostEndpoint")
def _host_endpoint(c: Checker, hep: HostEndpoint, _: ValidationContext) -> None:
    spec = c.at("spec")
    s = hep.spec
    if spec.at("node").check(bool(s.node), "node must be specified"):
        check_name(spec.at("node"), s.node)
    spec.check(
        bool(s.interface_name or s.expected_ips),
        "at least one of interfaceName or expectedIPs must be specified",
    )
    if s.interface_name:
        check_interface_name(spec.at("interfaceName"), s.interface_name, allow_star=True)
    for index, ip in enumerate(s.expected_ips):
        check_ip(spec.at("expectedIPs").at(index), ip)
    for index, profile in enumerate(s.profiles):
        check_name(spec.at("profiles").at(index), profile)
    for index, port in enumerate(s.ports):
        _endpoint_port(spec.at("ports").at(index), port, workload=False)


@_for("GlobalNetworkSet", "NetworkSet")
def _network_set(c: Checker, netset: Any, _: ValidationContext) -> None:
    check_nets(c.at("spec.nets"), netset.spec.nets)
    if NAMESPACE_LABEL in netset.labels:
        c.at("metadata.labels").at(NAMESPACE_LABEL).error(
            f"{NAMESPACE_LABEL} is not a valid label name"
        )


_LINK_LOCAL = {4: ipaddress.ip_network("169.254.0.0/16"), 6: ipaddress.ip_network("fe80::/10")}


@_for("IPPool")
def _ip_pool(c: Checker, pool: IPPool, _: ValidationContext) -> None:
    spec = c.at("spec")
    s = pool.spec
    network = None
    if spec.at("cidr").check(bool(s.cidr), "IPPool CIDR must be specified"):
        network = check_cidr(spec.at("cidr"), s.cidr, strict=True)
    for name, mode in (("vxlanMode", s.vxlan_mode), ("ipipMode", s.ipip_mode)):
        if mode:
            check_enum(spec.at(name), mode, ("Never", "Always", "CrossSubnet"))
    if s.vxlan_mode not in ("", "Never") and s.ipip_mode not in ("", "Never"):
        spec.error("ipipMode and vxlanMode cannot both be enabled")
    check_selector(spec.at("nodeSelector"), s.node_selector)
    check_selector(spec.at("namespaceSelector"), s.namespace_selector)
    if s.assignment_mode:
        check_enum(spec.at("assignmentMode"), s.assignment_mode, ("Automatic", "Manual"))
    for index, use in enumerate(s.allowed_uses):
        check_enum(spec.at("allowedUses").at(index), use, ("Workload", "Tunnel", "LoadBalancer"))
    if "LoadBalancer" in s.allowed_uses and {"Workload", "Tunnel"} & set(s.allowed_uses):
        spec.at("allowedUses").error("LoadBalancer cannot be combined with Workload or Tunnel")
    if network is None:
        return
    if network.overlaps(_LINK_LOCAL[network.version]):
        spec.at("cidr").error(
            f"IPPool CIDR overlaps with the IPv{network.version} link-local range"
        )
    if network.version == 6 and s.ipip_mode not in ("", "Never"):
        spec.at("ipipMode").error("IPIP is not supported on IPv6 pools")
    low, high = (20, 32) if network.version == 4 else (116, 128)
    block = s.effective_block_size
    if (
        spec.at("blockSize").check(
            low <= block <= high,
            f"blockSize must be between {low} and {high} for IPv{network.version} pools",
        )
        and not s.disabled
    ):
        spec.at("cidr").check(
            network.prefixlen <= block,
            "IP pool size is too small: it must be at least as large as the block size",
        )


@_for("Node")
def _node(c: Checker, node: Node, _: ValidationContext) -> None:
    spec = c.at("spec")
    s = node.spec
    if s.bgp is not None:
        bgp = spec.at("bgp")
        if s.bgp.ipv4_address:
            check_cidr(bgp.at("ipv4Address"), s.bgp.ipv4_address, version=4)
        if s.bgp.ipv6_address:
            check_cidr(bgp.at("ipv6Address"), s.bgp.ipv6_address, version=6)
        if s.bgp.ipv4_ipip_tunnel_addr:
            check_ip(bgp.at("ipv4IPIPTunnelAddr"), s.bgp.ipv4_ipip_tunnel_addr, version=4)
        if s.bgp.route_reflector_cluster_id:
            check_ip(bgp.at("routeReflectorClusterID"), s.bgp.route_reflector_cluster_id, version=4)
    if s.ipv4_vxlan_tunnel_addr:
        check_ip(spec.at("ipv4VXLANTunnelAddr"), s.ipv4_vxlan_tunnel_addr, version=4)
    if s.ipv6_vxlan_tunnel_addr:
        check_ip(spec.at("ipv6VXLANTunnelAddr"), s.ipv6_vxlan_tunnel_addr, version=6)
    if s.vxlan_tunnel_mac_addr:
        check_mac(spec.at("vxlanTunnelMACAddr"), s.vxlan_tunnel_mac_addr)
    if s.vxlan_tunnel_mac_addr_v6:
        check_mac(spec.at("vxlanTunnelMACAddrV6"), s.vxlan_tunnel_mac_addr_v6)
    if s.wireguard is not None:
        if s.wireguard.interface_ipv4_address:
            check_ip(
                spec.at("wireguard.interfaceIPv4Address"),
                s.wireguard.interface_ipv4_address,
                version=4,
            )
        if s.wireguard.interface_ipv6_address:
            check_ip(
                spec.at("wireguard.interfaceIPv6Address"),
                s.wireguard.interface_ipv6_address,
                version=6,
            )
    for index, address in enumerate(s.addresses):
        ac = spec.at("addresses").at(index)
        check_net(ac.at("address"), address.address)
        if address.type:
            check_enum(ac.at("type"), address.type, ("CalicoNodeIP", "InternalIP", "ExternalIP"))
    if node.status is not None:
        for name, key in (
            ("wireguardPublicKey", node.status.wireguard_public_key),
            ("wireguardPublicKeyV6", node.status.wireguard_public_key_v6),
        ):
            if key:
                check_wireguard_key(c.at("status").at(name), key)


@_for("FelixConfiguration")
def _felix_configuration(c: Checker, config: FelixConfiguration, _: ValidationContext) -> None:
    check_felix_configuration(c, config)


@_for("ClusterInformation")
def _cluster_information(c: Checker, info: ClusterInformation, _: ValidationContext) -> None:
    c.at("metadata.name").check(
        info.name == "default", "ClusterInformation must be named 'default'"
    )


@_for("BGPConfiguration")
def _bgp_configuration(c: Checker, bgp: BGPConfiguration, _: ValidationContext) -> None:
    spec = c.at("spec")
    s = bgp.spec
    for name in ("serviceClusterIPs", "serviceExternalIPs", "serviceLoadBalancerIPs"):
        attribute = {
            "serviceClusterIPs": s.service_cluster_ips,
            "serviceExternalIPs": s.service_external_ips,
            "serviceLoadBalancerIPs": s.service_load_balancer_ips,
        }[name]
        for index, block in enumerate(attribute):
            check_cidr(spec.at(name).at(index).at("cidr"), block.cidr, strict=True)
    if s.listen_port:
        check_port_number(spec.at("listenPort"), s.listen_port)
    if s.bind_mode:
        check_enum(spec.at("bindMode"), s.bind_mode, ("None", "NodeIP"))
    if s.node_mesh_max_restart_time:
        try:
            parse_duration(s.node_mesh_max_restart_time)
        except ParamError as exc:
            spec.at("nodeMeshMaxRestartTime").error(str(exc))


@_for("IPAMBlock")
def _ipam_block(c: Checker, block: IPAMBlock, _: ValidationContext) -> None:
    check_cidr(c.at("spec.cidr"), block.spec.cidr, strict=True)
    affinity = block.spec.affinity
    if affinity:
        c.at("spec.affinity").check(
            bool(re.match(r"^(host|virtual):[^\s]+$", affinity)),
            f"invalid affinity {affinity!r}: expected host:<node> or virtual:<node>",
        )


@_for("BlockAffinity")
def _block_affinity(c: Checker, affinity: BlockAffinity, _: ValidationContext) -> None:
    spec = c.at("spec")
    check_enum(spec.at("state"), affinity.spec.state, ("confirmed", "pending", "pendingDeletion"))
    check_name(spec.at("node"), affinity.spec.node)
    check_cidr(spec.at("cidr"), affinity.spec.cidr, strict=True)
    if affinity.spec.type:
        check_enum(spec.at("type"), affinity.spec.type, ("host", "virtual"))


@_for("Service")
def _service(c: Checker, service: Service, _: ValidationContext) -> None:
    spec = c.at("spec")
    for ip_field, values in (
        ("clusterIPs", service.spec.cluster_ips),
        ("externalIPs", service.spec.external_ips),
    ):
        for index, ip in enumerate(values):
            if ip != "None":
                check_ip(spec.at(ip_field).at(index), ip)
    if service.spec.cluster_ip and service.spec.cluster_ip != "None":
        check_ip(spec.at("clusterIP"), service.spec.cluster_ip)
    for index, port in enumerate(service.spec.ports):
        pc = spec.at("ports").at(index)
        if port.protocol:
            check_enum(pc.at("protocol"), port.protocol, ("TCP", "UDP", "SCTP"))
        check_port_number(pc.at("port"), port.port)


@_for("EndpointSlice")
def _endpoint_slice(c: Checker, eps: EndpointSlice, _: ValidationContext) -> None:
    address_type = eps.spec.address_type
    check_enum(c.at("addressType"), address_type, ("IPv4", "IPv6", "FQDN"))
    version = {"IPv4": 4, "IPv6": 6}.get(address_type)
    for index, endpoint in enumerate(eps.spec.endpoints):
        for a_index, address in enumerate(endpoint.addresses):
            if version is not None:
                check_ip(
                    c.at("endpoints").at(index).at("addresses").at(a_index),
                    address,
                    version=version,
                )
    for index, port in enumerate(eps.spec.ports):
        pc = c.at("ports").at(index)
        if port.protocol is not None:
            check_enum(pc.at("protocol"), port.protocol, ("TCP", "UDP", "SCTP"))
        if port.port is not None:
            check_port_number(pc.at("port"), port.port)


@_for("AdminNetworkPolicy", "BaselineAdminNetworkPolicy")
def _admin_network_policy(c: Checker, policy: Any, _: ValidationContext) -> None:
    from pyfelix.validation.k8s_policy import check_admin_network_policy  # noqa: PLC0415

    check_admin_network_policy(c, policy)


@_for("KubernetesClusterNetworkPolicy")
def _kubernetes_cluster_policy(
    c: Checker, policy: KubernetesClusterNetworkPolicy, _: ValidationContext
) -> None:
    from pyfelix.validation.k8s_policy import check_cluster_network_policy  # noqa: PLC0415

    check_cluster_network_policy(c, policy)


@_for("KubernetesNetworkPolicy", "StagedKubernetesNetworkPolicy")
def _kubernetes_network_policy(c: Checker, policy: KubernetesNetworkPolicy, _: Any) -> None:
    from pyfelix.validation.k8s_policy import check_kubernetes_network_policy  # noqa: PLC0415

    check_kubernetes_network_policy(c, policy)
    staged_action = getattr(policy.spec, "staged_action", "")
    if staged_action:
        check_enum(c.at("spec.stagedAction"), staged_action, ("Set", "Delete", "Learn", "Ignore"))


@_for("Pod")
def _pod(c: Checker, pod: Pod, _: ValidationContext) -> None:
    """What Calico reads of a pod: the addresses it takes (each a CIDR or an IP, as
    libcalico-go parses them; the sources it does not take are not read), its container
    ports, its annotations."""
    from pyfelix.resources.k8s_conversion import (  # noqa: PLC0415
        ConversionError,
        check_pod_conversion,
        pod_ip_source,
    )

    before = len(c.problems)
    where, addresses = pod_ip_source(pod)
    if where:
        at = c
        for part in where:
            at = at.at(part)
        for index, address in enumerate(addresses):
            entry = at.at(index).at("ip") if where[-1] == "podIPs" else at
            check_net(entry, address)
    for containers in ("containers", "initContainers"):
        listed = pod.spec.containers if containers == "containers" else pod.spec.init_containers
        for index, container in enumerate(listed):
            for p_index, port in enumerate(container.ports):
                pc = c.at("spec").at(containers).at(index).at("ports").at(p_index)
                check_port_number(pc.at("containerPort"), port.container_port)
                if port.protocol:
                    check_enum(pc.at("protocol"), port.protocol, ("TCP", "UDP", "SCTP"))
                problem = port_name_problem(port.name) if port.name else None
                if problem:
                    pc.at("name").error(f"invalid port name {port.name!r}: {problem}")
    if len(c.problems) > before:
        return
    try:
        check_pod_conversion(pod)
    except ConversionError as exc:
        c.at("metadata").at("annotations").error(str(exc))


@_for("Namespace", "ServiceAccount", "KubernetesNode")
def _nothing_more(c: Checker, resource: Any, _: ValidationContext) -> None:
    """Metadata (names, labels) is all Calico reads from these kinds."""
