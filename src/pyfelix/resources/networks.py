"""Address resources: network sets, IP pools and Calico IPAM's blocks and affinities."""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import ConditionsStatus, Resource, register
from pyfelix.resources.schema import (
    BOOL,
    INT,
    JSON,
    RAW,
    STR,
    STR_LIST,
    Spec,
    field,
)


@attrs.frozen
class NetworkSetSpec(Spec):
    nets: tuple[str, ...] = field("nets", STR_LIST, factory=tuple)


@register
@attrs.frozen
class GlobalNetworkSet(Resource):
    KIND = "GlobalNetworkSet"
    PLURAL = "globalnetworksets"
    SPEC = NetworkSetSpec
    spec: NetworkSetSpec = attrs.field(factory=NetworkSetSpec)


@register
@attrs.frozen
class NetworkSet(Resource):
    KIND = "NetworkSet"
    PLURAL = "networksets"
    NAMESPACED = True
    SPEC = NetworkSetSpec
    spec: NetworkSetSpec = attrs.field(factory=NetworkSetSpec)


@attrs.frozen
class IPPoolSpec(Spec):
    cidr: str = field("cidr", STR, default="", keep_empty=True)
    vxlan_mode: str = field("vxlanMode", STR, default="")
    ipip_mode: str = field("ipipMode", STR, default="")
    nat_outgoing: bool = field("natOutgoing", BOOL, default=False)
    disabled: bool = field("disabled", BOOL, default=False)
    disable_bgp_export: bool = field("disableBGPExport", BOOL, default=False)
    block_size: int = field("blockSize", INT, default=0)
    node_selector: str = field("nodeSelector", STR, default="")
    namespace_selector: str = field("namespaceSelector", STR, default="")
    allowed_uses: tuple[str, ...] = field("allowedUses", STR_LIST, factory=tuple)
    assignment_mode: str = field("assignmentMode", STR, default="")

    @property
    def effective_block_size(self) -> int:
        """Calico's default block size: 26 for IPv4 pools, 122 for IPv6."""
        if self.block_size:
            return self.block_size
        return 122 if ":" in self.cidr else 26


@register
@attrs.frozen
class IPPool(Resource):
    KIND = "IPPool"
    PLURAL = "ippools"
    SPEC = IPPoolSpec
    STATUS = ConditionsStatus
    spec: IPPoolSpec = attrs.field(factory=IPPoolSpec)
    status: ConditionsStatus | None = None


@attrs.frozen
class IPAMBlockSpec(Spec):
    """An IPAM block as the v3 IPAMBlock kind spells it (etcd's v2 form is converted on read)."""

    cidr: str = field("cidr", STR, default="", keep_empty=True)
    affinity: str = field("affinity", STR, default="")
    affinity_claim_time: str = field("affinityClaimTime", STR, default="")
    allocations: JSON = field("allocations", RAW, factory=tuple, keep_empty=True)
    unallocated: JSON = field("unallocated", RAW, factory=tuple, keep_empty=True)
    attributes: JSON = field("attributes", RAW, factory=tuple, keep_empty=True)
    sequence_number: int = field("sequenceNumber", INT, default=0, keep_empty=True)
    sequence_number_for_allocation: JSON = field("sequenceNumberForAllocation", RAW)
    deleted: bool = field("deleted", BOOL, default=False, keep_empty=True)
    strict_affinity: bool = field("strictAffinity", BOOL, default=False, keep_empty=True)

    @property
    def affinity_host(self) -> str:
        """The node the block is affine to ("" when unaffine or a virtual affinity)."""
        kind, _, host = self.affinity.partition(":")
        return host if kind == "host" else ""


@register
@attrs.frozen
class IPAMBlock(Resource):
    KIND = "IPAMBlock"
    PLURAL = "ipamblocks"
    SPEC = IPAMBlockSpec
    spec: IPAMBlockSpec = attrs.field(factory=IPAMBlockSpec)


@attrs.frozen
class BlockAffinitySpec(Spec):
    state: str = field("state", STR, default="", keep_empty=True)
    node: str = field("node", STR, default="", keep_empty=True)
    type: str = field("type", STR, default="")
    cidr: str = field("cidr", STR, default="", keep_empty=True)
    deleted: bool = field("deleted", BOOL, default=False, keep_empty=True)


@register
@attrs.frozen
class BlockAffinity(Resource):
    KIND = "BlockAffinity"
    PLURAL = "blockaffinities"
    SPEC = BlockAffinitySpec
    spec: BlockAffinitySpec = attrs.field(factory=BlockAffinitySpec)
