"""Messages between the calculation graph and the dataplane, named after Felix's.

With the model they carry (model.py), the typed configuration (config/), the shared values
(values.py) and the errors (errors.py), this module is all of ``pyfelix`` that
``pyfelix_dataplane`` may import (an import-linter contract in ``make lint``): the sequencer
emits these, the connector forwards them, the driver consumes them, and the status messages at
the end flow back. All are frozen attrs classes, hashable and comparable, so the sequencer can
key its buffers on them and tests can compare them.
"""

from __future__ import annotations

import enum

import attrs

from pyfelix import model
from pyfelix.config import FelixConfig, parse_config
from pyfelix.values import FrozenMap

# ------------------------------------------------------------------------------------ to driver


@attrs.frozen
class InSync:
    """The dataplane has been sent a complete, consistent snapshot."""


@attrs.frozen
class ConfigUpdate:
    """The merged Felix configuration (global, then per-node, then the environment): ``config``
    as Felix parameter strings (Felix's wire form), ``typed`` parsed once from them when the
    message is made, for every consumer."""

    config: FrozenMap[str]
    typed: FelixConfig = attrs.field(
        default=attrs.Factory(lambda self: parse_config(self.config), takes_self=True),
        eq=False,
        repr=False,
    )


@attrs.frozen
class DatastoreNotReady:
    """ClusterInformation says the datastore is not ready: the agent must stop."""


@attrs.frozen
class IPSetUpdate:
    """A whole IP set: ``type`` is "hash:ip", "hash:net" or "hash:ip,port"."""

    id: str
    type: str
    members: frozenset[str]


@attrs.frozen
class IPSetDeltaUpdate:
    id: str
    added: frozenset[str]
    removed: frozenset[str]


@attrs.frozen
class IPSetRemove:
    id: str


@attrs.frozen(cache_hash=True)
class PolicyID:
    tier: str
    name: str
    namespace: str = ""
    kind: str = "GlobalNetworkPolicy"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@attrs.frozen(cache_hash=True)
class RuleIPSets:
    """The IP set ids one rule matches on, resolved once by the rule scanner (Felix's ParsedRule
    carries the same), so the dataplane renders them and never derives them."""

    src: tuple[str, ...] = ()
    src_named_ports: tuple[str, ...] = ()
    not_src: tuple[str, ...] = ()
    dst: tuple[str, ...] = ()
    dst_named_ports: tuple[str, ...] = ()
    not_dst: tuple[str, ...] = ()
    not_dst_named_ports: tuple[str, ...] = ()
    src_service: str = ""
    dst_service: str = ""


@attrs.frozen(cache_hash=True)
class ParsedRule:
    rule: model.Rule
    ipsets: RuleIPSets = RuleIPSets()


@attrs.frozen(cache_hash=True)
class ActivePolicyUpdate:
    """An active policy; ``inbound`` and ``outbound`` are its rules with their IP set ids."""

    id: PolicyID
    policy: model.Policy
    inbound: tuple[ParsedRule, ...] = ()
    outbound: tuple[ParsedRule, ...] = ()
    #: The policy's selector in canonical form (Felix's OriginalSelector): policies next to
    #: each other in a tier with the same one form a policy group.
    original_selector: str = ""


@attrs.frozen
class ActivePolicyRemove:
    id: PolicyID


@attrs.frozen(cache_hash=True)
class ActiveProfileUpdate:
    id: str
    profile: model.ProfileRules
    inbound: tuple[ParsedRule, ...] = ()
    outbound: tuple[ParsedRule, ...] = ()


@attrs.frozen
class ActiveProfileRemove:
    id: str


@attrs.frozen(cache_hash=True)
class TierInfo:
    """A tier as it applies to one endpoint: its policies in order, per direction."""

    name: str
    default_action: str
    ingress_policies: tuple[PolicyID, ...] = ()
    egress_policies: tuple[PolicyID, ...] = ()


@attrs.frozen
class WorkloadEndpointUpdate:
    id: model.WorkloadEndpointKey
    endpoint: model.WorkloadEndpoint
    tiers: tuple[TierInfo, ...]


@attrs.frozen
class WorkloadEndpointRemove:
    id: model.WorkloadEndpointKey


@attrs.frozen
class HostEndpointUpdate:
    id: model.HostEndpointKey
    endpoint: model.HostEndpoint
    tiers: tuple[TierInfo, ...]
    untracked_tiers: tuple[TierInfo, ...] = ()
    pre_dnat_tiers: tuple[TierInfo, ...] = ()
    forward_tiers: tuple[TierInfo, ...] = ()


@attrs.frozen
class HostEndpointRemove:
    id: model.HostEndpointKey


@attrs.frozen
class HostMetadataUpdate:
    """A node's addresses (Felix sends HostMetadataV6Update for the IPv6 one; one message
    here, either address may be empty)."""

    hostname: str
    ipv4_addr: str
    ipv6_addr: str = ""


@attrs.frozen
class HostMetadataRemove:
    hostname: str


@attrs.frozen
class IPAMPoolUpdate:
    id: str
    pool: model.IPPool


@attrs.frozen
class IPAMPoolRemove:
    id: str


@attrs.frozen
class ServiceAccountID:
    namespace: str
    name: str


@attrs.frozen
class ServiceAccountUpdate:
    id: ServiceAccountID
    labels: FrozenMap[str]


@attrs.frozen
class ServiceAccountRemove:
    id: ServiceAccountID


@attrs.frozen
class NamespaceUpdate:
    id: str
    labels: FrozenMap[str]


@attrs.frozen
class NamespaceRemove:
    id: str


@attrs.frozen
class RouteUpdate:
    """A route Felix knows about. ``types`` are Felix's route types (REMOTE_WORKLOAD,
    LOCAL_WORKLOAD, REMOTE_HOST, LOCAL_HOST, REMOTE_TUNNEL, LOCAL_TUNNEL, CIDR_INFO)."""

    dst: str
    types: frozenset[str]
    dst_node: str = ""
    dst_node_ip: str = ""
    tunnel: str = "none"
    nat_outgoing: bool = False
    local_workload_interface: str = ""
    #: An address of a block affine to another node, allocated to ``dst_node`` (Felix's flag).
    borrowed: bool = False
    #: In a CrossSubnet pool, ``dst_node`` shares this node's subnet: routed straight to its
    #: IP, not through the tunnel (Felix's SameSubnet).
    same_subnet: bool = False


@attrs.frozen
class RouteRemove:
    dst: str


@attrs.frozen
class VXLANTunnelEndpointUpdate:
    """A node's VTEP: its IPv4 half (tunnel address, MAC, underlay address), its IPv6 half, or
    both; a half without its tunnel address is empty, as Felix sends it."""

    node: str
    mac: str
    ipv4_addr: str
    parent_device_ip: str
    mac_v6: str = ""
    ipv6_addr: str = ""
    parent_device_ipv6: str = ""


@attrs.frozen
class VXLANTunnelEndpointRemove:
    node: str


@attrs.frozen
class WireguardEndpointUpdate:
    """A node's WireGuard keys and interface addresses (Felix sends WireguardEndpointV6Update
    for IPv6's; one message here, either half may be empty)."""

    hostname: str
    public_key: str
    interface_ipv4_addr: str = ""
    public_key_v6: str = ""
    interface_ipv6_addr: str = ""


@attrs.frozen
class WireguardEndpointRemove:
    hostname: str


@attrs.frozen
class Encapsulation:
    ipip_enabled: bool
    vxlan_enabled: bool
    vxlan_enabled_v6: bool = False


@attrs.frozen
class ServiceUpdate:
    name: str
    namespace: str
    type: str
    cluster_ips: tuple[str, ...]
    ports: tuple[tuple[str, str, int], ...]


@attrs.frozen
class GlobalBGPConfigUpdate:
    """The default BGPConfiguration's service CIDRs, which ServiceLoopPrevention keeps traffic
    from looping to (Felix's GlobalBGPConfigUpdate; all empty when there is none)."""

    service_cluster_cidrs: tuple[str, ...] = ()
    service_external_cidrs: tuple[str, ...] = ()
    service_loadbalancer_cidrs: tuple[str, ...] = ()


@attrs.frozen
class ServiceRemove:
    name: str
    namespace: str


# --------------------------------------------------------------------------------- from driver


@attrs.frozen
class ProcessStatusUpdate:
    iso_timestamp: str
    uptime: float


class EndpointStatus(enum.StrEnum):
    """What the dataplane reports of a local endpoint (Felix's oper status)."""

    UP = "up"
    DOWN = "down"
    #: A host endpoint that governs no interface.
    ERROR = "error"


@attrs.frozen
class WorkloadEndpointStatusUpdate:
    id: model.WorkloadEndpointKey
    status: EndpointStatus
    #: The endpoint as programmed (its interface, MAC, addresses: the status file's data).
    endpoint: model.WorkloadEndpoint | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class WorkloadEndpointStatusRemove:
    id: model.WorkloadEndpointKey


@attrs.frozen
class HostEndpointStatusUpdate:
    id: model.HostEndpointKey
    status: EndpointStatus


@attrs.frozen
class HostEndpointStatusRemove:
    id: model.HostEndpointKey


@attrs.frozen
class WireguardStatusUpdate:
    """This node's public key of one IP version's device ("" when it has none)."""

    public_key: str
    ip_version: int = 4


@attrs.frozen
class DataplaneInSync:
    """The driver has applied the first complete snapshot."""


ToDataplane = (
    InSync
    | ConfigUpdate
    | DatastoreNotReady
    | IPSetUpdate
    | IPSetDeltaUpdate
    | IPSetRemove
    | ActivePolicyUpdate
    | ActivePolicyRemove
    | ActiveProfileUpdate
    | ActiveProfileRemove
    | WorkloadEndpointUpdate
    | WorkloadEndpointRemove
    | HostEndpointUpdate
    | HostEndpointRemove
    | HostMetadataUpdate
    | HostMetadataRemove
    | IPAMPoolUpdate
    | IPAMPoolRemove
    | ServiceAccountUpdate
    | ServiceAccountRemove
    | NamespaceUpdate
    | NamespaceRemove
    | RouteUpdate
    | RouteRemove
    | VXLANTunnelEndpointUpdate
    | VXLANTunnelEndpointRemove
    | WireguardEndpointUpdate
    | WireguardEndpointRemove
    | Encapsulation
    | ServiceUpdate
    | ServiceRemove
    | GlobalBGPConfigUpdate
)
#: One flush of the calculation graph, in order: what the calc loop hands the connector.
Flush = tuple[ToDataplane, ...]
FromDataplane = (
    ProcessStatusUpdate
    | WorkloadEndpointStatusUpdate
    | WorkloadEndpointStatusRemove
    | HostEndpointStatusUpdate
    | HostEndpointStatusRemove
    | WireguardStatusUpdate
    | DataplaneInSync
)
