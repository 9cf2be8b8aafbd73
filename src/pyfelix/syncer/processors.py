"""Update processors: v3 resources -> Felix model keys and values, shared by both datastores.

``convert(resource)`` gives the (key, value) pairs one resource stands for; a value of None means
"this key is absent" (a WorkloadEndpoint without addresses, a staged Delete). ``Converter``
remembers which keys each source produced, so a change that drops a key (a Node losing its
VXLAN address) emits that key's deletion, and deleting the source deletes them all.

Selector folding follows Calico's string forms exactly, since Felix's IP set ids hash the
canonical form of the folded selector.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from pyfelix import model
from pyfelix.config.params import BY_JSON
from pyfelix.ipnet import canonical_network, parse_network
from pyfelix.model import (
    NAME_LABEL,
    NAMESPACE_LABEL,
    NAMESPACE_LABEL_PREFIX,
    NAMESPACE_PROFILE_PREFIX,
    ORCHESTRATOR_LABEL,
    SERVICE_ACCOUNT_LABEL,
    SERVICE_ACCOUNT_LABEL_PREFIX,
    SERVICE_ACCOUNT_PROFILE_PREFIX,
)
from pyfelix.resources.rules import EntityRule
from pyfelix.resources.rules import Rule as V3Rule
from pyfelix.selector import SelectorError, parse_selector
from pyfelix.syncer.api import Update, UpdateType
from pyfelix.values import FrozenMap

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyfelix.resources import (
        ClusterInformation,
        FelixConfiguration,
        GlobalNetworkPolicy,
        GlobalNetworkSet,
        HostEndpoint,
        IPAMBlock,
        IPPool,
        KubernetesClusterNetworkPolicy,
        KubernetesNetworkPolicy,
        Namespace,
        NetworkSet,
        Node,
        Pod,
        Profile,
        Resource,
        ServiceAccount,
        Tier,
        WorkloadEndpoint,
    )
    from pyfelix.resources.k8s_node import KubernetesNode
    from pyfelix.resources.k8s_policy import AdminNetworkPolicy, BaselineAdminNetworkPolicy

KV = tuple[Hashable, object | None]


# ------------------------------------------------------------------------ selector folding


def prefixed_canonical(text: str, prefix: str) -> str | None:
    """``text`` with every label prefixed, in canonical form; None if it does not parse."""
    try:
        return str(parse_selector(text).with_label_prefix(prefix))
    except SelectorError:
        return None


def _append(current: str, addition: str | None) -> str:
    if addition is None:
        return current
    return f"({current}) && {addition}" if current else addition


def policy_selector(spec: Any, namespace: str) -> str:
    """The endpoint selector Felix uses for a policy (namespace and SA selectors folded in)."""
    if namespace:
        scope = f"{NAMESPACE_LABEL} == '{namespace}'"
        selector = f"({spec.selector}) && {scope}" if spec.selector else scope
    else:
        selector = spec.selector
        ns_selector = getattr(spec, "namespace_selector", "")
        if ns_selector:
            selector = _append(selector, prefixed_canonical(ns_selector, NAMESPACE_LABEL_PREFIX))
            selector = selector.replace("all()", f"has({NAMESPACE_LABEL})")
    if spec.service_account_selector:
        selector = _append(
            selector,
            prefixed_canonical(spec.service_account_selector, SERVICE_ACCOUNT_LABEL_PREFIX),
        )
        if not namespace:
            selector = selector.replace("all()", f"has({SERVICE_ACCOUNT_LABEL})")
    return selector


def entity_selector(entity: EntityRule, namespace: str) -> str:
    """A rule side's selector with its namespace selector, service accounts and scope."""
    ns_part = ""
    if entity.namespace_selector:
        ns_part = prefixed_canonical(entity.namespace_selector, NAMESPACE_LABEL_PREFIX) or ""
        ns_part = ns_part.replace("all()", f"has({NAMESPACE_LABEL})")
        ns_part = ns_part.replace("global()", f"!has({NAMESPACE_LABEL})")
    elif namespace:
        ns_part = f"{NAMESPACE_LABEL} == '{namespace}'"
    sa_part = ""
    accounts = entity.service_accounts
    if accounts is not None:
        sa_selector = (
            prefixed_canonical(accounts.selector, SERVICE_ACCOUNT_LABEL_PREFIX)
            if accounts.selector
            else None
        )
        names = ""
        if accounts.names:
            quoted = ", ".join(f'"{n}"' for n in sorted(set(accounts.names)))
            names = f"{SERVICE_ACCOUNT_LABEL} in {{{quoted}}}"
        both = f"({sa_selector}) && ({names})"
        sa_part = both if sa_selector and names else (sa_selector or names)
    if sa_part and entity.selector:
        body = f"({sa_part}) && ({entity.selector})"
    else:
        body = sa_part or entity.selector
    if ns_part and (body or entity.not_selector or entity.namespace_selector):
        return f"({ns_part}) && ({body})" if body else ns_part
    return body


# ---------------------------------------------------------------------------------- rules


def normalise_action(action: str) -> str:
    return "next-tier" if action == "Pass" else action.lower()


def normalise_protocol(protocol: int | str | None) -> int | str | None:
    if isinstance(protocol, str):
        return int(protocol) if protocol.isdigit() else protocol.lower()
    return protocol


def _nets(values: tuple[str, ...]) -> tuple[str, ...]:
    """CIDRs or bare IPs, masked; unparsable entries are skipped (validation reports them)."""
    out = []
    for value in values:
        try:
            out.append(canonical_network(value))
        except ValueError:
            continue
    return tuple(out)


#: How many converted rules are kept by value (policies repeat their rules: the same one is
#: converted once, and its model value is shared).
RULE_CACHE = 16384


@functools.lru_cache(maxsize=RULE_CACHE)
def convert_rule(rule: V3Rule, namespace: str) -> model.Rule:
    src, dst = rule.source, rule.destination
    icmp, not_icmp = rule.icmp, rule.not_icmp
    return model.Rule(
        action=normalise_action(rule.action),
        ip_version=rule.ip_version,
        protocol=normalise_protocol(rule.protocol),
        not_protocol=normalise_protocol(rule.not_protocol),
        icmp_type=icmp.type if icmp else None,
        icmp_code=icmp.code if icmp else None,
        not_icmp_type=not_icmp.type if not_icmp else None,
        not_icmp_code=not_icmp.code if not_icmp else None,
        src_nets=_nets(src.nets),
        not_src_nets=_nets(src.not_nets),
        src_selector=entity_selector(src, namespace),
        not_src_selector=src.not_selector,
        src_ports=src.ports,
        not_src_ports=src.not_ports,
        src_service=src.services.name if src.services else "",
        src_service_namespace=(src.services.namespace or namespace) if src.services else "",
        dst_nets=_nets(dst.nets),
        not_dst_nets=_nets(dst.not_nets),
        dst_selector=entity_selector(dst, namespace),
        not_dst_selector=dst.not_selector,
        dst_ports=dst.ports,
        not_dst_ports=dst.not_ports,
        dst_service=dst.services.name if dst.services else "",
        dst_service_namespace=(dst.services.namespace or namespace) if dst.services else "",
        http=rule.http,
        annotations=rule.metadata.annotations if rule.metadata else FrozenMap(),
        original_src_selector=src.selector,
        original_src_namespace_selector=src.namespace_selector,
        original_dst_selector=dst.selector,
        original_dst_namespace_selector=dst.namespace_selector,
    )


def _rules(rules: tuple[V3Rule, ...], namespace: str) -> tuple[model.Rule, ...]:
    return tuple(convert_rule(r, namespace) for r in rules)


# ------------------------------------------------------------------------------ per kind


def _policy(resource: Any, origin: Resource | None = None, kind: str = "") -> list[KV]:
    """A Calico policy, or (``origin``) the one Calico converted a Kubernetes policy into:
    keyed by the Kubernetes kind then (or ``kind``), as Felix keys it."""
    spec = resource.spec
    namespace = resource.namespace if resource.NAMESPACED else ""
    kind = kind or (origin.KIND if origin is not None else resource.KIND)
    key = model.PolicyKey(resource.name, namespace, kind, spec.effective_tier)
    staged_action = getattr(spec, "staged_action", "")
    if staged_action == "Delete":
        return [(key, None)]
    value = model.Policy(
        namespace=namespace,
        tier=spec.effective_tier,
        order=spec.order,
        inbound_rules=_rules(spec.ingress, namespace),
        outbound_rules=_rules(spec.egress, namespace),
        selector=policy_selector(spec, namespace),
        types=tuple(t.lower() for t in spec.effective_types),
        do_not_track=getattr(spec, "do_not_track", False),
        pre_dnat=getattr(spec, "pre_dnat", False),
        apply_on_forward=getattr(spec, "apply_on_forward", False),
        performance_hints=spec.performance_hints,
        staged_action=staged_action,
        origin=origin or resource,
    )
    return [(key, value)]


# The Kubernetes kinds' conversions import those kinds' classes: when the first of them is
# converted, not by every agent (see pyfelix.resources.meta.MANIFEST_KIND_MODULES).


def _kubernetes_network_policy(policy: KubernetesNetworkPolicy) -> list[KV]:
    """A Kubernetes NetworkPolicy as Calico converts it; its staged twin converted the same
    and keyed as staged (Felix then programs nothing of it), or, with stagedAction Delete,
    nothing at all."""
    from pyfelix.resources.k8s_conversion import network_policy  # noqa: PLC0415

    staged_action = getattr(policy.spec, "staged_action", "")
    if staged_action == "Delete":
        return []
    kvs = _policy(network_policy(policy), origin=policy)
    if staged_action:
        kvs = [
            (key, attrs.evolve(value, staged_action=staged_action))
            if isinstance(value, model.Policy)
            else (key, value)
            for key, value in kvs
        ]
    return kvs


def _kubernetes_cluster_network_policy(policy: KubernetesClusterNetworkPolicy) -> list[KV]:
    from pyfelix.resources.k8s_conversion import cluster_network_policy  # noqa: PLC0415

    converted = cluster_network_policy(policy)
    return _policy(converted, origin=policy) if converted is not None else []


def _admin_network_policy(policy: AdminNetworkPolicy) -> list[KV]:
    """Calico 3.29-3.31 keyed these as the GlobalNetworkPolicies they became."""
    from pyfelix.resources.k8s_conversion import admin_network_policy  # noqa: PLC0415

    return _converted_admin_policy(admin_network_policy(policy), policy)


def _baseline_admin_network_policy(policy: BaselineAdminNetworkPolicy) -> list[KV]:
    from pyfelix.resources.k8s_conversion import baseline_admin_network_policy  # noqa: PLC0415

    return _converted_admin_policy(baseline_admin_network_policy(policy), policy)


def _converted_admin_policy(converted: GlobalNetworkPolicy | None, origin: Resource) -> list[KV]:
    return [] if converted is None else _policy(converted, origin=origin, kind=converted.KIND)


def _tier(tier: Tier) -> list[KV]:
    action = "Pass" if tier.spec.default_action == "Pass" else "Deny"
    return [(model.TierKey(tier.name), model.Tier(tier.spec.order, action, origin=tier))]


def _profile_kvs(
    name: str,
    labels: Mapping[str, str],
    ingress: tuple[model.Rule, ...],
    egress: tuple[model.Rule, ...],
    origin: Resource | None,
) -> list[KV]:
    label_value = model.ProfileLabels(FrozenMap(labels), origin=origin) if labels else None
    return [
        (model.ProfileLabelsKey(name), label_value),
        (model.ProfileRulesKey(name), model.ProfileRules(ingress, egress, origin=origin)),
    ]


def _profile(profile: Profile) -> list[KV]:
    spec = profile.spec
    kvs = _profile_kvs(
        profile.name,
        spec.labels_to_apply,
        _rules(spec.ingress, ""),
        _rules(spec.egress, ""),
        profile,
    )
    return [*kvs, (model.ResourceKey("Profile", "", profile.name), model.Passthrough(profile))]


_ALLOW_ALL = (model.Rule(action="allow"),)


def _namespace(ns: Namespace) -> list[KV]:
    return namespace_kvs(ns.name, ns.labels, ns)


def namespace_kvs(name: str, labels: Mapping[str, str], origin: Resource | None) -> list[KV]:
    """Kubernetes' conversion of a namespace: profile kns.<name> applying pcns.* labels,
    allowing all (``origin``: the Namespace, or None where none was built)."""
    applied = {f"{NAMESPACE_LABEL_PREFIX}{k}": v for k, v in labels.items()}
    applied[f"{NAMESPACE_LABEL_PREFIX}{NAME_LABEL}"] = name
    profile = f"{NAMESPACE_PROFILE_PREFIX}{name}"
    return _profile_kvs(profile, applied, _ALLOW_ALL, _ALLOW_ALL, origin)


def _service_account(sa: ServiceAccount) -> list[KV]:
    labels = {f"{SERVICE_ACCOUNT_LABEL_PREFIX}{k}": v for k, v in sa.labels.items()}
    labels[f"{SERVICE_ACCOUNT_LABEL_PREFIX}{NAME_LABEL}"] = sa.name
    name = f"{SERVICE_ACCOUNT_PROFILE_PREFIX}{sa.namespace}.{sa.name}"
    return _profile_kvs(name, labels, (), (), sa)


def _unescape_name_parts(name: str) -> list[str]:
    """Split a WorkloadEndpoint name on single dashes ("--" is an escaped dash)."""
    parts, current, i = [], [], 0
    while i < len(name):
        if name.startswith("--", i):
            current.append("-")
            i += 2
        elif name[i] == "-":
            parts.append("".join(current))
            current = []
            i += 1
        else:
            current.append(name[i])
            i += 1
    parts.append("".join(current))
    return parts


def workload_key(wep: WorkloadEndpoint) -> model.WorkloadEndpointKey:
    spec = wep.spec
    return workload_key_of(
        wep.name,
        wep.namespace,
        node=spec.node,
        orchestrator=spec.orchestrator,
        workload=spec.pod or spec.workload,
        endpoint=spec.endpoint,
    )


def workload_key_of(
    name: str, namespace: str, *, node: str, orchestrator: str, workload: str, endpoint: str
) -> model.WorkloadEndpointKey:
    """From the spec when it names node and endpoint, else parsed from Calico's name format."""
    if node and endpoint and workload:
        return model.WorkloadEndpointKey(
            node, orchestrator or "k8s", f"{namespace}/{workload}", endpoint
        )
    parts = _unescape_name_parts(name)
    if len(parts) == 4:
        node_part, orchestrator_part, workload_part, endpoint_part = parts
    else:
        node_part, orchestrator_part, endpoint_part = node, orchestrator, endpoint or "eth0"
        workload_part = workload or name
    return model.WorkloadEndpointKey(
        node or node_part,
        orchestrator or orchestrator_part,
        f"{namespace}/{workload_part}",
        endpoint or endpoint_part,
    )


def workload_labels(
    labels: Mapping[str, str], namespace: str, orchestrator: str, service_account: str
) -> FrozenMap[str]:
    """An endpoint's labels as Felix matches them: Calico's namespace and service account
    labels are its own (labels with their prefixes are dropped), plus the orchestrator."""
    return FrozenMap.adopt(workload_label_dict(labels, namespace, orchestrator, service_account))


def workload_label_dict(
    labels: Mapping[str, str], namespace: str, orchestrator: str, service_account: str
) -> dict[str, str]:
    """``workload_labels`` as a new dict."""
    out = {
        k: v
        for k, v in labels.items()
        if not k.startswith((NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL_PREFIX))
    }
    out[NAMESPACE_LABEL] = namespace
    out[ORCHESTRATOR_LABEL] = orchestrator
    if service_account:
        out[SERVICE_ACCOUNT_LABEL] = service_account
    return out


def _split_nets(values: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    nets = _nets(values)
    v6 = tuple(n for n in nets if ":" in n)
    return (tuple(n for n in nets if ":" not in n) if v6 else nets), v6


def _pod(pod: Pod) -> list[KV]:
    """The WorkloadEndpoint Calico makes of a pod (none for a host-network pod)."""
    from pyfelix.resources.k8s_conversion import ConversionError, workload_endpoint  # noqa: PLC0415

    try:
        wep = workload_endpoint(pod)
    except ConversionError:
        return []  # validation named the field
    return _workload_endpoint(wep, origin=pod) if wep is not None else []


#: The qosControls fields already named in a warning (once per process each: a cluster may
#: shape thousands of pods).
_QOS_WARNED: set[str] = set()


def _warn_qos(wep: WorkloadEndpoint) -> None:
    """Felix shapes bandwidth and packet rates with tc, limits connections and sets DSCP;
    pyfelix programs none of them, so each control a workload asks for is named once."""
    controls = wep.spec.qos_controls
    if not isinstance(controls, Mapping):
        return
    for name in sorted(str(k) for k, v in controls.items() if v not in (None, "", 0)):
        if name not in _QOS_WARNED:
            _QOS_WARNED.add(name)
            log.warning(
                "%s asks for qosControls.%s, which pyfelix does not program (Felix does):"
                " it and any other workload's are programmed without it",
                wep.ident,
                name,
            )


def _workload_endpoint(wep: WorkloadEndpoint, origin: Resource | None = None) -> list[KV]:
    spec = wep.spec
    if spec.qos_controls:
        _warn_qos(wep)
    key = workload_key(wep)
    v4, v6 = _split_nets(spec.ip_networks)
    if not (v4 or v6):
        return [(key, None)]
    labels = workload_labels(
        wep.labels, wep.namespace, spec.orchestrator or key.orchestrator, spec.service_account_name
    )
    # Most endpoints have no NATs, ports or spoofing prefixes: nothing is built for them.
    nats = [model.IPNAT(n.internal_ip, n.external_ip) for n in spec.ip_nats]
    value = model.WorkloadEndpoint(
        state="active",
        name=spec.interface_name,
        mac=spec.mac,
        profile_ids=spec.profiles,
        ipv4_nets=v4,
        ipv6_nets=v6,
        labels=labels,
        ipv4_nat=tuple(n for n in nats if ":" not in n.int_ip) if nats else (),
        ipv6_nat=tuple(n for n in nats if ":" in n.int_ip) if nats else (),
        ipv4_gateway=spec.ipv4_gateway,
        ipv6_gateway=spec.ipv6_gateway,
        ports=tuple(
            model.EndpointPort(p.name, normalise_protocol(p.protocol) or "tcp", p.port)
            for p in spec.ports
            if p.name
        )
        if spec.ports
        else (),
        allow_spoofed_source_prefixes=_nets(spec.allow_spoofed_source_prefixes)
        if spec.allow_spoofed_source_prefixes
        else (),
        origin=origin or wep,
    )
    return [(key, value)]


def _host_endpoint(hep: HostEndpoint) -> list[KV]:
    spec = hep.spec
    addresses = []
    for ip in spec.expected_ips:
        try:
            addresses.append(ipaddress.ip_address(ip))
        except ValueError:
            continue
    value = model.HostEndpoint(
        name=spec.interface_name,
        expected_ipv4_addrs=tuple(str(a) for a in addresses if a.version == 4),
        expected_ipv6_addrs=tuple(str(a) for a in addresses if a.version == 6),
        labels=hep.labels,
        profile_ids=spec.profiles,
        ports=tuple(
            model.EndpointPort(p.name, normalise_protocol(p.protocol) or "tcp", p.port)
            for p in spec.ports
        ),
        origin=hep,
    )
    return [(model.HostEndpointKey(spec.node, hep.name), value)]


def _network_set(netset: GlobalNetworkSet | NetworkSet) -> list[KV]:
    if netset.KIND == "NetworkSet":
        labels = {**netset.labels, NAMESPACE_LABEL: netset.namespace}
        value = model.NetworkSet(
            _nets(netset.spec.nets),
            FrozenMap(labels),
            (f"{NAMESPACE_PROFILE_PREFIX}{netset.namespace}",),
            origin=netset,
        )
        return [(model.NetworkSetKey(f"{netset.namespace}/{netset.name}"), value)]
    value = model.NetworkSet(_nets(netset.spec.nets), netset.labels, origin=netset)
    return [(model.NetworkSetKey(netset.name), value)]


_ENCAP_MODES = {"Always": "always", "CrossSubnet": "cross-subnet"}


def _ip_pool(pool: IPPool) -> list[KV]:
    spec = pool.spec
    try:
        cidr = str(parse_network(spec.cidr))
    except ValueError:
        return []
    value = model.IPPool(
        cidr=cidr,
        ipip_mode=_ENCAP_MODES.get(spec.ipip_mode, ""),
        vxlan_mode=_ENCAP_MODES.get(spec.vxlan_mode, ""),
        masquerade=spec.nat_outgoing,
        disabled=spec.disabled,
        disable_bgp_export=spec.disable_bgp_export,
        allowed_uses=spec.allowed_uses or ("Workload", "Tunnel"),
        assignment_mode=spec.assignment_mode or "Automatic",
        origin=pool,
    )
    return [(model.IPPoolKey(cidr), value)]


@functools.cache
def use_pod_cidr() -> bool:
    """libcalico-go's usePodCIDR (host-local IPAM on the Kubernetes datastore), read from the
    environment as its client configuration is: CALICO_USE_POD_CIDR, else USE_POD_CIDR, true
    as Go's ParseBool reads it. Read once: Felix loads it at start."""
    value = os.environ.get("CALICO_USE_POD_CIDR", os.environ.get("USE_POD_CIDR", ""))
    from pyfelix.resources.crd import GO_TRUE  # noqa: PLC0415

    return value in GO_TRUE


def _ipam_block(block: IPAMBlock) -> list[KV]:
    """An IPAM block, unless usePodCIDR: then Felix's syncer lists none, and the nodes' pod
    CIDRs stand for them (a dump's blocks are not read)."""
    if use_pod_cidr():
        return []
    spec = block.spec
    allocations = tuple(a if isinstance(a, int) else None for a in (spec.allocations or ()))
    attributes = tuple(a for a in (spec.attributes or ()) if isinstance(a, Mapping))
    value = model.AllocationBlock(
        spec.cidr, spec.affinity, allocations, attributes, spec.deleted, origin=block
    )
    return [(model.BlockKey(spec.cidr), value)]


def _host_network(address: str) -> str:
    """The subnet of "10.0.0.1/24" ("10.0.0.0/24"; "" without a prefix length or if invalid)."""
    if "/" not in address:
        return ""
    try:
        return str(ipaddress.ip_interface(address).network)
    except ValueError:
        return ""


def _host_ip(address: str) -> str:
    """The address part of "10.0.0.1/24" or "10.0.0.1" ("" if neither)."""
    try:
        return str(ipaddress.ip_interface(address).ip)
    except ValueError:
        return ""


NODE_CONFIG_FIELDS = (
    "IpInIpTunnelAddr",
    "IPv4VXLANTunnelAddr",
    "VXLANTunnelMACAddr",
    "IPv6VXLANTunnelAddr",
    "VXLANTunnelMACAddrV6",
)


def _node(node: Node) -> list[KV]:
    spec = node.spec
    name = node.name
    bgp = spec.bgp
    values = {
        "IpInIpTunnelAddr": _host_ip(bgp.ipv4_ipip_tunnel_addr) if bgp else "",
        "IPv4VXLANTunnelAddr": _host_ip(spec.ipv4_vxlan_tunnel_addr),
        "VXLANTunnelMACAddr": spec.vxlan_tunnel_mac_addr,
        "IPv6VXLANTunnelAddr": _host_ip(spec.ipv6_vxlan_tunnel_addr),
        "VXLANTunnelMACAddrV6": spec.vxlan_tunnel_mac_addr_v6,
    }
    kvs: list[KV] = [
        (model.HostConfigKey(name, field), model.ConfigValue(v, origin=node) if v else None)
        for field, v in values.items()
    ]
    v4, v6 = (bgp.ipv4_address, bgp.ipv6_address) if bgp else ("", "")
    addresses: tuple[tuple[model.ModelKey, str], ...] = (
        (model.HostIPKey(name), _host_ip(v4)),
        (model.HostIPv6Key(name), _host_ip(v6)),
        (model.HostNetworkKey(name), _host_network(v4)),
        (model.HostNetworkV6Key(name), _host_network(v6)),
    )
    kvs.extend((key, model.ConfigValue(v, origin=node) if v else None) for key, v in addresses)
    status = node.status
    wireguard = model.Wireguard(
        public_key=status.wireguard_public_key if status else "",
        interface_ipv4_addr=spec.wireguard.interface_ipv4_address if spec.wireguard else "",
        public_key_v6=status.wireguard_public_key_v6 if status else "",
        interface_ipv6_addr=spec.wireguard.interface_ipv6_address if spec.wireguard else "",
        origin=node,
    )
    has_wireguard = any(
        (
            wireguard.public_key,
            wireguard.interface_ipv4_addr,
            wireguard.public_key_v6,
            wireguard.interface_ipv6_addr,
        )
    )
    kvs.append((model.WireguardKey(name), wireguard if has_wireguard else None))
    kvs.append((model.ResourceKey("Node", "", name), model.Passthrough(node)))
    if use_pod_cidr():
        # Host-local IPAM: each pod CIDR is an IPAM block affine to the node, holding no
        # allocations, as Felix's node processor makes them; the routes to its pods follow.
        for cidr in status.pod_cidrs if status else ():
            block = model.AllocationBlock(cidr, f"host:{name}", origin=node)
            kvs.append((model.BlockKey(cidr), block))
    return kvs


def _kubernetes_node(node: KubernetesNode) -> list[KV]:
    """A v1 Node is the Calico Node calico-node's annotations describe (with usePodCIDR, its
    tunnel addresses from its pod CIDR)."""
    from pyfelix.resources.k8s_conversion import calico_node  # noqa: PLC0415

    return _node(calico_node(node, use_pod_cidr()))


def _felix_configuration(config: FelixConfiguration) -> list[KV]:
    name = config.name
    make_key: Callable[[str], Hashable]
    if name == "default":
        make_key = model.GlobalConfigKey
    elif name.startswith("node."):
        hostname = name.removeprefix("node.")

        def make_key(param: str) -> Hashable:
            return model.HostConfigKey(hostname, param)

    else:
        return [(model.ResourceKey(config.KIND, "", name), model.Passthrough(config))]
    values = config.spec.felix_values()
    kvs: list[KV] = []
    for param in BY_JSON.values():
        if param.felix:
            text = values.get(param.felix)
            value = model.ConfigValue(text, origin=config) if text else None
            kvs.append((make_key(param.felix), value))
    return kvs


def _cluster_information(info: ClusterInformation) -> list[KV]:
    spec = info.spec
    ready = spec.datastore_ready
    kvs: list[KV] = [
        (model.ReadyFlagKey(), None if ready is None else model.ReadyFlag(ready, origin=info))
    ]
    for felix_name, value in (
        ("ClusterGUID", spec.cluster_guid),
        ("ClusterType", spec.cluster_type),
        ("CalicoVersion", spec.calico_version),
        ("Variant", spec.variant),
    ):
        kvs.append(
            (
                model.GlobalConfigKey(felix_name),
                model.ConfigValue(value, origin=info) if value else None,
            )
        )
    return kvs


def _passthrough(resource: Resource) -> list[KV]:
    key = model.ResourceKey(resource.KIND, resource.namespace, resource.name)
    return [(key, model.Passthrough(resource))]


#: Each kind's conversion, by its KIND (the classes are imported only with their kinds).
_CONVERTERS: dict[str, Callable[[Any], list[KV]]] = {
    "GlobalNetworkPolicy": _policy,
    "NetworkPolicy": _policy,
    "KubernetesNetworkPolicy": _kubernetes_network_policy,
    "StagedKubernetesNetworkPolicy": _kubernetes_network_policy,
    "KubernetesClusterNetworkPolicy": _kubernetes_cluster_network_policy,
    "AdminNetworkPolicy": _admin_network_policy,
    "BaselineAdminNetworkPolicy": _baseline_admin_network_policy,
    "Pod": _pod,
    "StagedGlobalNetworkPolicy": _policy,
    "StagedNetworkPolicy": _policy,
    "Tier": _tier,
    "Profile": _profile,
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
    "WorkloadEndpoint": _workload_endpoint,
    "HostEndpoint": _host_endpoint,
    "GlobalNetworkSet": _network_set,
    "NetworkSet": _network_set,
    "IPPool": _ip_pool,
    "IPAMBlock": _ipam_block,
    "Node": _node,
    "KubernetesNode": _kubernetes_node,
    "FelixConfiguration": _felix_configuration,
    "ClusterInformation": _cluster_information,
    "BGPConfiguration": _passthrough,
    "Service": _passthrough,
    "EndpointSlice": _passthrough,
    "BlockAffinity": _passthrough,
}


#: The profile every Calico datastore backend holds without its being written.
DEFAULT_ALLOW_PROFILE = "projectcalico-default-allow"


def default_allow_profile() -> Resource:
    """libcalico-go's DefaultAllowProfile: allow everything in and out."""
    from pyfelix.resources import Profile  # noqa: PLC0415

    return Profile.from_manifest(
        {
            "apiVersion": "projectcalico.org/v3",
            "kind": "Profile",
            "metadata": {"name": DEFAULT_ALLOW_PROFILE},
            "spec": {"ingress": [{"action": "Allow"}], "egress": [{"action": "Allow"}]},
        }
    )


def convert(resource: Resource) -> list[KV]:
    """The model keys and values ``resource`` stands for (None values mean "absent")."""
    return _CONVERTERS[resource.KIND](resource)


@attrs.define
class Converter:
    """Tracks the keys each source (a datastore key or file identity) produced.

    Two sources producing the same model key (two pools with one CIDR) resolve as Calico's
    conflict-resolving cache does: the source that sorts lowest wins, and the other takes over
    when the winner goes away.
    """

    #: What each source produced, and each key's sources: tuples and lists, as nearly every
    #: source produces one key and nearly every key has one source (a dict and a set each
    #: would be a fifth of a large snapshot's memory).
    _produced: dict[Hashable, tuple[KV, ...]] = attrs.Factory(dict)
    _owners: dict[Hashable, list[Hashable]] = attrs.Factory(dict)

    def update(
        self, source: Hashable, resource: Resource | None, revision: str = ""
    ) -> list[Update]:
        """The Updates that bring downstream from the old to the new form of ``source``."""
        new = tuple(convert(resource)) if resource is not None else ()
        return self.produce(source, new, revision)

    def produce(self, source: Hashable, new: tuple[KV, ...], revision: str = "") -> list[Update]:
        """As ``update``, for a source already converted (``new``: what it stands for now)."""
        old = self._produced.get(source)
        owners = self._owners
        if old is None:
            for key, _ in new:
                if key in owners:
                    break
            else:
                # A new source with keys of its own: what it produced is what goes downstream.
                if new:
                    self._produced[source] = new
                for key, _ in new:
                    owners[key] = [source]
                return [Update(k, v, revision, UpdateType.NEW) for k, v in new if v is not None]
        old_keys = [key for key, _ in old or ()]
        keys = old_keys + [key for key, _ in new if key not in old_keys]
        new_keys = {key for key, _ in new}
        before = {key: self._winning_value(key) for key in keys}
        if new:
            self._produced[source] = new
        else:
            self._produced.pop(source, None)
        for key in keys:
            sources = owners.setdefault(key, [])
            if key in new_keys:
                if source not in sources:
                    sources.append(source)
            elif source in sources:
                sources.remove(source)
            if not sources:
                del owners[key]
        updates = []
        for key in keys:
            after = self._winning_value(key)
            if _same(before[key], after):
                continue
            updates.append(Update(key, after, revision, self._update_type(before[key], after)))
        return updates

    def produce_new(self, source: Hashable, kv: KV, revision: str = "") -> Update | None:
        """``produce`` for a source seen for the first time, standing for one key that no
        other source has and a value: its Update; None (and nothing done) for any other
        case, which ``produce`` then takes."""
        key, value = kv
        if value is None or source in self._produced:
            return None
        sources = [source]
        if self._owners.setdefault(key, sources) is not sources:
            return None  # another source's key (setdefault left it as it was)
        self._produced[source] = (kv,)
        return Update(key, value, revision, UpdateType.NEW)

    def _winning_value(self, key: Hashable) -> object | None:
        sources = self._owners.get(key)
        if not sources:
            return None
        winner = sources[0] if len(sources) == 1 else min(sources, key=repr)
        for produced_key, value in self._produced.get(winner, ()):
            if produced_key == key:
                return value
        return None

    @staticmethod
    def _update_type(before: object | None, after: object | None) -> UpdateType:
        if after is None:
            return UpdateType.DELETED
        return UpdateType.NEW if before is None else UpdateType.UPDATED

    def keys(self) -> Iterator[Hashable]:
        return iter(self._owners)


def _same(a: object | None, b: object | None) -> bool:
    """Equal values from equal resources: anything else is worth an update downstream."""
    return a == b and getattr(a, "origin", None) == getattr(b, "origin", None)
