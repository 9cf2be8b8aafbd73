"""Which Felix parameters pyfelix acts on, and what it does with each.

The project's rule: every FelixConfiguration parameter is acted on as Felix acts on it, or
named in a warning saying it has no effect. ``ACTED_ON`` is the first list (a test checks it
against the code, both ways); every other parameter that a configuration sets is warned
about, at start-up and whenever a new configuration sets it. docs/CONFIG.md is generated from
this module (``python -m pyfelix.config.support``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from pyfelix.config.params import DATASTORE_PARAMS, PARAMS
from pyfelix.config.text import ParamError, parse_bool

#: Felix name -> what pyfelix does with it.
ACTED_ON: dict[str, str] = {
    "AllowIPIPPacketsFromWorkloads": "lifts the from-workload IPIP drop",
    "AllowVXLANPacketsFromWorkloads": "lifts the from-workload VXLAN drop",
    "ChainInsertMode": (
        "Insert puts the hooks at the top of the kernel's chains, Append after their rules;"
        " Felix's FORWARD accept and nat POSTROUTING jump stay last either way"
    ),
    "DataplaneWatchdogTimeout": "the dataplane loop's health timeout (at least 20 s)",
    "DefaultEndpointToHostAction": "the end of cali-wl-to-host (Drop, Accept, Return)",
    "DeviceRouteProtocol": "the protocol of device routes (workloads, VXLAN device); with "
    "boot (3, the default) routes via a gateway get 80, and 80 marks Felix's routes",
    "DeviceRouteSourceAddress": "the src of the IPv4 workload routes",
    "DeviceRouteSourceAddressIPv6": "the src of the IPv6 workload routes",
    "DisableConntrackInvalidCheck": "drops the endpoint chains' ctstate INVALID rule",
    "EndpointReportingDelaySecs": "at most one endpoint status write per this many seconds "
    "(jittered by a tenth), oldest first, as Felix's reporter",
    "EndpointReportingEnabled": "workload and host endpoint status reported to the datastore",
    "EndpointStatusPathPrefix": "a file per local workload endpoint up, in <prefix>/endpoint-status"
    " (Calico's CNI plugin waits for it); empty: none",
    "ExternalNodesCIDRList": "added to the VXLAN sources set (all-vxlan-net) and, with "
    "NATOutgoingExclusions IPPoolsAndHostIPs, to all-hosts-net (IPv4)",
    "FailsafeInboundHostPorts": "cali-failsafe-in (filter, raw and mangle)",
    "FailsafeOutboundHostPorts": "cali-failsafe-out (filter and raw)",
    "FloatingIPs": "Enabled: workloads' ipNATs (the floatingIPs annotation) become "
    "cali-fip-dnat and cali-fip-snat rules, as Felix's floating IP manager",
    "HealthEnabled": "serves /liveness and /readiness",
    "HealthHost": "the health server's address",
    "HealthPort": "the health server's port",
    "HealthTimeoutOverrides": "replaces a health component's timeout by name, live",
    "InterfaceExclude": "interfaces (names, or /regex/) host endpoints are never placed on, "
    "as Felix's interface monitor ignores them",
    "InterfacePrefix": "workload interfaces: every prefix in the rules, in order, as Felix",
    "IpInIpEnabled": "overrides the IP pools' IPIP mode in the encapsulation (restart check)",
    "IpsetsRefreshInterval": "how often the IP sets are re-read and repaired (0: never)",
    "IPv4NormalRoutePriority": "the metric of the IPv4 workload routes (and floating IPs')",
    "IPv6NormalRoutePriority": "the metric of the IPv6 workload routes (and floating IPs')",
    "IptablesBackend": (
        "Legacy or NFT, or (Auto, as Felix) the backend whose mangle table holds kubelet's or"
        " kube-proxy's hint chain, else the one holding more rules; nft on a tie, where Felix"
        " picks legacy (probed at start with the start-up configuration, again at InSync if the"
        " snapshot's setting differs)"
    ),
    "IptablesFilterAllowAction": "ACCEPT or RETURN: the filter table's accepts (established "
    "connections flagged accepted first when RETURN), as Felix",
    "IptablesFilterDenyAction": "DROP or REJECT: the filter table's drops (endpoint, tier end, "
    "policy deny, unknown interface); raw and mangle still drop",
    "IptablesMangleAllowAction": "ACCEPT or RETURN: mangle cali-PREROUTING's and pre-DNAT "
    "endpoint chains' accepts",
    "IptablesMarkMask": "the mark bits the rules use (and WireGuard's fwmark)",
    "IptablesRefreshInterval": "how often the tables are re-read and repaired (0: never)",
    "Ipv6Support": "false: IPv4 only (no IPv6 tables, sets or routes)",
    "IPForwarding": "Enabled: global IPv4 (and IPv6) forwarding turned on at start; Disabled: "
    "left as they are",
    "LogFilePath": "the log file (created with its directory, following rotation; none: no file)",
    "FeatureDetectOverride": "MASQFullyRandom=false / SNATFullyRandom=false leave out "
    "--random-fully (other features are not detected: no effect)",
    "IptablesNATOutgoingInterfaceFilter": "cali-nat-outgoing only for traffic leaving through "
    "this interface (pattern)",
    "KubeNodePortRanges": "with kube-proxy in IPVS mode, traffic to these ports of this host "
    "is IPVS's (cali-forward-check), so the endpoint's policy applies",
    "LogActionRateLimit": "Log rules under -m limit --limit <rate> (none when unset)",
    "LogActionRateLimitBurst": "the --limit-burst of LogActionRateLimit (0: none)",
    "LogPrefix": "the prefix of the LOG rules policies' Log actions render, %t %k %n %p "
    "expanded to tier, kind, name and namespace/name as Felix",
    "LogSeverityFile": "the log level of LogFilePath",
    "LogSeverityScreen": "the log level on stderr",
    "LogSeveritySys": "the log level sent to the local syslog (/dev/log, tagged calico-felix)",
    "NATOutgoingAddress": "IPv4 NAT outgoing SNATs to this address instead of masquerading",
    "NATOutgoingExclusions": "IPPoolsAndHostIPs also keeps traffic to the hosts' addresses "
    "(set all-hosts-net) out of NAT outgoing",
    "NATPortRange": "NAT outgoing TCP and UDP source ports, as Felix's port-range rules",
    "MaxIpsetSize": "every IP set's maxelem (a set of another maxelem is rebuilt and swapped in)",
    "PrometheusGoMetricsEnabled": "adds the Python runtime's collectors (platform, GC) in "
    "place of Go's",
    "PrometheusMetricsCAFile": "the CA that client certificates of the metrics port are checked "
    "against",
    "PrometheusMetricsCertFile": "serves /metrics over HTTPS with this certificate (re-read for "
    "every connection)",
    "PrometheusMetricsClientAuth": "whether the metrics port asks for and verifies client "
    "certificates (RequireAnyClientCert verifies them)",
    "PrometheusMetricsEnabled": "serves Felix's metric families on /metrics",
    "PrometheusMetricsHost": "the metrics server's address (every interface when empty)",
    "PrometheusMetricsKeyFile": "the key of PrometheusMetricsCertFile",
    "PrometheusMetricsPort": "the metrics server's port",
    "PrometheusProcessMetricsEnabled": "adds the process collector (CPU, memory, open files)",
    "PrometheusWireGuardMetricsEnabled": "the WireGuard families (meta, bytes, handshakes)",
    "ServiceLoopPrevention": "Drop or Reject: cali-cidr-block drops (rejects) forwarded "
    "traffic to the default BGPConfiguration's service CIDRs; Disabled: no rules",
    "RouteSource": "CalicoIPAM routes IPAM blocks and local workloads; WorkloadIPs every "
    "workload's addresses to its node, blocks ignored (read at start; a change restarts)",
    "RouteSyncDisabled": "no route is added or removed (network policy only); workload "
    "interfaces are still configured",
    "RemoveExternalRoutes": "true: every route on a workload interface is Felix's (others' "
    "removed); false: only routes of Felix's protocols there",
    "ReportingIntervalSecs": "how often process status is reported (0: never)",
    "ReportingTTLSecs": "the lease of the process status key in etcd (it vanishes that long "
    "after the agent stops reporting)",
    "RouteRefreshInterval": "how often routes, VXLAN and WireGuard are re-read and repaired",
    "VXLANEnabled": "overrides the IP pools' VXLAN mode in the encapsulation (restart check)",
    "VXLANMTU": "the VXLAN device's MTU (0: the host MTU less 50); the pods' MTU when on",
    "VXLANMTUV6": "vxlan-v6.calico's MTU (0: the host MTU less 70); the pods' MTU when on",
    "VXLANPort": "the VXLAN device's port, admitted in cali-INPUT, dropped from workloads",
    "VXLANVNI": "the VXLAN device's VNI",
    "WireguardEnabled": "the WireGuard device, peers, routing table and rule",
    "WireguardInterfaceName": "the WireGuard device's name",
    "WireguardListeningPort": "the WireGuard port (admitted in cali-INPUT)",
    "WireguardMTU": "the WireGuard device's MTU (0: the host MTU less 60); the pods' MTU "
    "when on and smaller",
    "WireguardRoutingRulePriority": "the priority of WireGuard's routing rules",
    "NFTablesMode": "Enabled: Felix's nftables layout (ip/ip6 calico tables, verdict maps, nft "
    "sets) instead of iptables and ipsets; Auto: nftables when kube-proxy runs in nftables mode, "
    "re-checked every 15 s (a change restarts the agent); the other mode's rules are removed "
    "once this mode's are in place",
    "NftablesRefreshInterval": "how often the calico tables are read back and repaired",
    "NftablesFilterAllowAction": "the verdict of the filter layer's accepts in nftables mode",
    "NftablesFilterDenyAction": "the verdict of the filter layer's drops in nftables mode",
    "NftablesMangleAllowAction": "the verdict of the mangle layer's accepts in nftables mode",
    "NftablesMarkMask": "the mark bits the nftables mode's rules use",
    "WireguardHostEncryptionEnabled": "the nodes' own addresses through WireGuard (allowed "
    "and routed), the device's address the node's when it has no WireGuard address, raw "
    "PREROUTING marking what arrives from outside the tunnels, src_valid_mark",
    "WireguardEnabledV6": "the IPv6 WireGuard device, peers (over the nodes' IPv6 addresses), "
    "routing table (the second one handed out) and rule",
    "WireguardInterfaceNameV6": "the IPv6 WireGuard device's name",
    "WireguardListeningPortV6": "the IPv6 WireGuard port (admitted in cali-INPUT)",
    "WireguardMTUV6": "the IPv6 WireGuard device's MTU (0: the host MTU less 80); the pods' "
    "MTU when on and smaller",
    "WorkloadSourceSpoofing": "Any allows endpoints' allowSpoofedSourcePrefixes (validation)",
    "MTUIfacePattern": "the interfaces whose smallest MTU (running ones) is the host MTU, re-read "
    "every 30 s (a change restarts the agent, as Felix)",
    "RequireMTUFile": "an mtu file that cannot be written (PYFELIX_STATE_DIR, /var/lib/calico) "
    "stops the agent, as Felix",
    "RouteTableRange": "(deprecated) the routing tables pyfelix may own when RouteTableRanges is "
    "unset: WireGuard takes the first",
    "RouteTableRanges": "the routing tables pyfelix may own (253-255 never): WireGuard takes the "
    "first, as Felix's allocator",
    "IptablesLockProbeIntervalMillis": "passed to iptables-restore as --wait-interval, with "
    "--wait 10, as Felix (iptables 1.8.8 and later ignore the interval)",
    "MetadataAddr": "OpenStack (Felix's OpenstackActive: ClusterType openstack, this or "
    "MetadataPort off its default, or a tap prefix): workloads may reach it, and "
    "169.254.169.254:80 is DNATed to it; DHCP and DNS to the host allowed",
    "MetadataPort": "the OpenStack metadata service's port (see MetadataAddr)",
    "WireguardPersistentKeepAlive": "every WireGuard peer's persistent keepalive (0: off)",
    "IptablesPostWriteCheckIntervalSecs": "the tables are re-read this long after a write, "
    "then twice as long each time up to an hour, as Felix (another program's clobbering "
    "repaired within seconds)",
    "InterfaceRefreshInterval": "every interface rescanned as if changed (0: never), as "
    "Felix's interface monitor resync: a missed netlink event costs at most this long",
    "IpInIpMtu": "tunl0's MTU (0: the host MTU less 20); the pods' MTU when IPIP is on "
    "and it is the smallest",
    "ProgramClusterRoutes": "Enabled or EnabledIPIPOnly (Felix's default): remote IPIP blocks "
    "routed onlink via their node out of tunl0; Enabled or EnabledNoEncapOnly: remote blocks "
    "of unencapsulated pools routed straight to their node; what is not programmed is left "
    "to BIRD (which pyfelix does not run)",
    # ClusterInformation's, not a FelixConfiguration field (so not in docs/CONFIG.md's table).
    "ClusterType": "openstack in it turns on Felix's OpenStack special cases (MetadataAddr)",
    # This node's, from its Node resource (not FelixConfiguration fields either).
    "IpInIpTunnelAddr": "tunl0's address",
    "IPv4VXLANTunnelAddr": "vxlan.calico's address",
    "IPv6VXLANTunnelAddr": "vxlan-v6.calico's address",
}

#: Set by the datastore (ClusterInformation), not by an operator: informational, no warning.
INFORMATIONAL = frozenset(p.felix for p in DATASTORE_PARAMS)

NO_EFFECT = "accepted for compatibility, has no effect in pyfelix"

#: Parameters that would leave a node unsafe if accepted and ignored, with the value that does
#: and why: ``pyfelix run`` refuses such a configuration (one line, exit 1), and ``validate``
#: and ``dry-run`` say that it would.
UNSAFE: dict[str, tuple[Callable[[str], bool], str]] = {
    "BPFEnabled": (
        parse_bool,
        "Felix would run its eBPF dataplane, which also balances services for nodes that run"
        " no kube-proxy; pyfelix has no eBPF dataplane, so such a node would have no service"
        " load balancing",
    ),
}


def unsafe(config: Mapping[str, str]) -> list[str]:
    """What in ``config`` (Felix parameter texts) pyfelix must refuse, one sentence each."""
    found = []
    for name, (refused, why) in sorted(UNSAFE.items()):
        text = config.get(name)
        try:
            hit = text is not None and refused(text)
        except ParamError:
            hit = False  # validation reports an unparsable value
        if hit:
            found.append(f"{name} {text} is not supported: {why}")
    return found


def no_effect(config: Mapping[str, str]) -> list[str]:
    """The parameters ``config`` sets that pyfelix does not act on, sorted."""
    known = {p.felix for p in PARAMS if p.felix}
    return sorted(n for n in config if n in known and n not in ACTED_ON)


def document() -> str:
    """docs/CONFIG.md: every parameter with its status."""
    lines = [
        "# FelixConfiguration parameters in pyfelix",
        "",
        "Generated by `python -m pyfelix.config.support` from `src/pyfelix/config/support.py`;",
        "a test fails when this file and the code disagree. Every parameter is accepted (and",
        "validated as Calico validates it). Those marked *acted on* work as in Felix; setting any",
        f'other one logs a warning at start-up and on each new configuration: "{NO_EFFECT}".',
        "",
        "| FelixConfiguration field | Felix parameter | default | status |",
        "| --- | --- | --- | --- |",
    ]
    for param in sorted((p for p in PARAMS if p.felix), key=lambda p: p.felix.lower()):
        status = f"acted on: {ACTED_ON[param.felix]}" if param.felix in ACTED_ON else "no effect"
        if param.felix in UNSAFE:
            status = f"refused when enabled (`pyfelix run` exits): {UNSAFE[param.felix][1]}"
        default = "" if param.default is None else f"`{param.default}`"
        lines.append(f"| `{param.json}` | {param.felix} | {default} | {status} |")
    acted = sum(1 for p in PARAMS if p.felix in ACTED_ON)
    lines += ["", f"{acted} of {sum(1 for p in PARAMS if p.felix)} parameters are acted on.", ""]
    return "\n".join(lines)


TARGET = Path(__file__).resolve().parents[3] / "docs" / "CONFIG.md"


def main(argv: Iterable[str] = ()) -> None:
    text = document()
    if list(argv) == ["--check"]:
        sys.exit(0 if TARGET.read_text() == text else 1)
    TARGET.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
