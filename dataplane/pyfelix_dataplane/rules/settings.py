"""The FelixConfiguration values rendering depends on, taken once from the typed configuration."""

from __future__ import annotations

import ipaddress

import attrs

from pyfelix.config import FelixConfig, ProtoPort
from pyfelix.config.felix_config import FloatingIPs, NATOutgoingExclusions, ServiceLoopPrevention
from pyfelix_dataplane.rules.marks import MarkBits, MarkMaskTooSmall, endpoint_mark_mask
from pyfelix_dataplane.state import NodeState

_DEFAULTS = FelixConfig()


def _feature(config: FelixConfig, name: str) -> bool:
    """A kernel feature Felix detects, which every supported node has, unless
    FeatureDetectOverride sets it false ("MASQFullyRandom=false,SNATFullyRandom=false")."""
    for key, value in config.feature_detect_override:
        if key == name:
            return value.lower() != "false"
    return True


def openstack_active(config: FelixConfig) -> bool:
    """Felix's OpenstackActive: ClusterType says openstack, or (older OpenStack plugins)
    MetadataAddr or MetadataPort is off its default, or an interface prefix is "tap"."""
    return (
        "openstack" in config.cluster_type.lower()
        or config.metadata_addr not in ("", _DEFAULTS.metadata_addr)
        or config.metadata_port not in (0, _DEFAULTS.metadata_port)
        or "tap" in interface_prefixes(config)
    )


def metadata_service(config: FelixConfig) -> tuple[str, int] | None:
    """MetadataAddr:MetadataPort when MetadataAddr is an IPv4 address (Felix parses it as an
    IP; a host name gives no metadata rules)."""
    try:
        address = ipaddress.IPv4Address(config.metadata_addr)
    except ValueError:
        return None
    return str(address), config.metadata_port


def interface_prefixes(config: FelixConfig) -> tuple[str, ...]:
    """InterfacePrefix's prefixes, in order (cali when none)."""
    return config.interface_prefix or ("cali",)


@attrs.frozen
class Settings:
    """The FelixConfiguration values rendering depends on, with Felix's defaults."""

    marks: MarkBits = attrs.Factory(MarkBits.from_mask)
    endpoint_to_host_action: str = "DROP"
    failsafe_in: tuple[ProtoPort, ...] = _DEFAULTS.failsafe_inbound_host_ports
    failsafe_out: tuple[ProtoPort, ...] = _DEFAULTS.failsafe_outbound_host_ports
    log_prefix: str = _DEFAULTS.log_prefix
    allow_vxlan_from_workloads: bool = False
    allow_ipip_from_workloads: bool = False
    #: InterfacePrefix: every prefix gets the workload rules, in the order given.
    interface_prefixes: tuple[str, ...] = ("cali",)
    vxlan_port: int = _DEFAULTS.vxlan_port
    #: DisableConntrackInvalidCheck: endpoint chains then let ctstate INVALID packets on.
    drop_invalid: bool = True
    #: IptablesFilterAllowAction, IptablesFilterDenyAction, IptablesMangleAllowAction: the
    #: targets of the filter table's accepts and drops, and of mangle's accepts.
    allow: str = "ACCEPT"
    deny: str = "DROP"
    mangle_allow: str = "ACCEPT"
    log_rate: str = ""
    log_burst: int = 5
    #: NATOutgoingAddress (SNAT to it instead of MASQUERADE), NATPortRange,
    #: IptablesNATOutgoingInterfaceFilter, NATOutgoingExclusions IPPoolsAndHostIPs.
    nat_outgoing_address: str = ""
    nat_port_range: tuple[int, int] | None = None
    nat_interface_filter: str = ""
    nat_exclude_hosts: bool = False
    #: --random-fully on MASQUERADE and SNAT, as Felix where the kernel and iptables have it
    #: (every supported node); FeatureDetectOverride MASQFullyRandom/SNATFullyRandom=false.
    masq_random_fully: bool = True
    snat_random_fully: bool = True
    #: ServiceLoopPrevention: DROP, REJECT, or "" (Disabled) for traffic to service CIDRs.
    service_loop_action: str = "DROP"
    #: FloatingIPs Enabled: the workloads' ipNATs get cali-fip-dnat/cali-fip-snat rules.
    floating_ips: bool = False
    #: OpenStack's special cases (``openstack_active``): workloads may reach the host's DHCP
    #: and DNS and the metadata service (``metadata``), and 169.254.169.254:80 is DNATed to it.
    openstack: bool = False
    metadata: tuple[str, int] | None = None
    #: kube-proxy in IPVS mode: the mark bits of the endpoint ids and the non-Calico id
    #: (0: no IPVS rules), and KubeNodePortRanges, which INPUT hands to IPVS.
    endpoint_mark: int = 0
    non_cali_endpoint_mark: int = 0
    node_port_ranges: tuple[tuple[int, int], ...] = _DEFAULTS.kube_node_port_ranges

    @classmethod
    def for_node(cls, dp: NodeState, *, nftables: bool = False) -> Settings:
        """The configuration's settings, and what the node itself says (kube-proxy's IPVS
        mode gets Felix's endpoint marks: the mask's bits the rules leave free, the
        lowest for the non-Calico mark)."""
        settings = cls.from_config(dp.config, nftables=nftables)
        if not dp.kube_ipvs:
            return settings
        wireguard = dp.config.wireguard_enabled or dp.config.wireguard_enabled_v6
        mask = endpoint_mark_mask(settings.marks.mask, wireguard)
        if not mask:
            raise MarkMaskTooSmall(
                f"IptablesMarkMask {settings.marks.mask:#x} leaves no bit for kube-proxy's IPVS"
                " mode's endpoint marks"
            )
        return attrs.evolve(settings, endpoint_mark=mask, non_cali_endpoint_mark=mask & -mask)

    @classmethod
    def from_config(cls, config: FelixConfig, *, nftables: bool = False) -> Settings:
        """``nftables``: the Nftables* twins of the Iptables* settings (mark mask, allow and
        deny actions) apply, as in Felix's nftables mode."""
        # Each action's member is named as its target is (ACCEPT, RETURN, DROP, REJECT).
        if nftables:
            mask = config.nftables_mark_mask
            allow = config.nftables_filter_allow_action.name
            deny = config.nftables_filter_deny_action.name
            mangle_allow = config.nftables_mangle_allow_action.name
        else:
            mask = config.iptables_mark_mask
            allow = config.iptables_filter_allow_action.name
            deny = config.iptables_filter_deny_action.name
            mangle_allow = config.iptables_mangle_allow_action.name
        return cls(
            marks=MarkBits.from_mask(mask),
            endpoint_to_host_action=config.default_endpoint_to_host_action.name,
            failsafe_in=config.failsafe_inbound_host_ports,
            failsafe_out=config.failsafe_outbound_host_ports,
            log_prefix=config.log_prefix,
            allow_vxlan_from_workloads=config.allow_vxlan_packets_from_workloads,
            allow_ipip_from_workloads=config.allow_ipip_packets_from_workloads,
            interface_prefixes=interface_prefixes(config),
            vxlan_port=config.vxlan_port,
            drop_invalid=not config.disable_conntrack_invalid_check,
            allow=allow,
            deny=deny,
            mangle_allow=mangle_allow,
            log_rate=config.log_action_rate_limit,
            log_burst=config.log_action_rate_limit_burst,
            nat_outgoing_address=config.nat_outgoing_address,
            nat_port_range=config.nat_port_range,
            nat_interface_filter=config.iptables_nat_outgoing_interface_filter,
            nat_exclude_hosts=(
                config.nat_outgoing_exclusions is NATOutgoingExclusions.IPPOOLS_AND_HOST_IPS
            ),
            masq_random_fully=_feature(config, "MASQFullyRandom"),
            snat_random_fully=_feature(config, "SNATFullyRandom"),
            floating_ips=config.floating_ips is FloatingIPs.ENABLED,
            openstack=openstack_active(config),
            metadata=metadata_service(config),
            node_port_ranges=config.kube_node_port_ranges,
            service_loop_action=(
                ""
                if config.service_loop_prevention is ServiceLoopPrevention.DISABLED
                else config.service_loop_prevention.name
            ),
        )
