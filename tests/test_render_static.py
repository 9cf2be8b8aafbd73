"""The static chains of each table (filter, nat, raw, mangle): what Felix adds for the overlays,
NAT outgoing, service loop prevention, failsafes, floating IPs and OpenStack."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from pyfelix import messages as m
from pyfelix.dryrun import compute
from pyfelix.resources.loader import load_paths, load_text
from pyfelix_dataplane.rules.render import render, script_pieces
from tests.rules_harness import (
    REPO,
    chain_rules,
    ipip_cluster,
    rendered_filter_with,
    rendered_nat_with,
    rendered_with,
    text,
    with_felix_config,
)
from tests.test_render_kernel import example_resources


def test_nat_outgoing_settings() -> None:
    """Felix's cali-nat-outgoing: NATPortRange's TCP and UDP rules (each then returned),
    NATOutgoingAddress as SNAT, the interface filter and the hosts' exclusion set; the
    tunnel's masquerade keeps clear of the VXLAN port; --random-fully unless overridden."""
    lines = rendered_nat_with(
        "natPortRange: 40000:40010\n"
        "natOutgoingAddress: 192.0.2.77\n"
        "iptablesNATOutgoingInterfaceFilter: eth+\n"
        "natOutgoingExclusions: IPPoolsAndHostIPs"
    )
    nat = [line.split('" ', 1)[1] for line in lines if "cali-nat-outgoing -m" in line]
    match = (
        "-m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40network-ip-pools"
        " dst -m set ! --match-set cali40all-hosts-net dst"
    )
    assert nat == [
        f"{match} -p tcp --out-interface eth+ --jump SNAT --to-source 192.0.2.77:40000-40010 --random-fully",
        f"{match} -p tcp --out-interface eth+ --jump RETURN",
        f"{match} -p udp --out-interface eth+ --jump SNAT --to-source 192.0.2.77:40000-40010 --random-fully",
        f"{match} -p udp --out-interface eth+ --jump RETURN",
        f"{match} --out-interface eth+ --jump SNAT --to-source 192.0.2.77 --random-fully",
    ]
    plain = rendered_nat_with("featureDetectOverride: MASQFullyRandom=false")
    assert any(line.endswith("--jump MASQUERADE --to-ports 4790-65535") for line in plain)
    assert not any("random-fully" in line for line in plain)


def test_service_loop_prevention() -> None:
    """cali-FORWARD jumps to cali-cidr-block, which drops (Drop, the default) or rejects
    forwarded traffic to the default BGPConfiguration's service CIDRs; Disabled leaves it
    empty."""
    dropping = rendered_filter_with("logSeverityScreen: Info")
    assert "--jump cali-cidr-block" in dropping
    assert "-A cali-cidr-block" in dropping
    assert "--destination 10.96.0.0/12 --jump DROP" in dropping
    rejecting = rendered_filter_with("serviceLoopPrevention: Reject")
    assert "--destination 10.96.0.0/12 --jump REJECT" in rejecting
    disabled = rendered_filter_with("serviceLoopPrevention: Disabled")
    assert "-A cali-cidr-block" not in disabled
    assert ":cali-cidr-block" in disabled


def test_overlay_rules_felix_adds_for_vxlan_and_wireguard() -> None:
    """With VXLAN on (the example): VXLAN's UDP is never tracked (raw PREROUTING and OUTPUT),
    and cali-OUTPUT lets the node's VXLAN packets to the other VXLAN hosts through before host
    endpoint policy; with WireGuard, its outgoing packets too."""
    resources = example_resources()
    _, dataplane = compute(resources, "node-a")
    rendered = render(dataplane, versions=(4,)).chains[4]
    raw = {c.name: text(list(c.rules)) for c in rendered["raw"]}
    for chain in ("cali-PREROUTING", "cali-OUTPUT"):
        assert "-p udp --dport 4789 --jump NOTRACK" in raw[chain]
    output = str(compute(resources, "node-a")[0]["iptables"]["ipv4"]["filter"])
    assert (
        '"Allow IPv4 VXLAN packets to other allowed hosts" -p 17 -m multiport'
        " --destination-ports 4789 -m addrtype --src-type LOCAL -m set --match-set"
        " cali40all-vxlan-net dst --jump ACCEPT"
    ) in output
    wireguard = rendered_filter_with("wireguardEnabled: true")
    assert (
        '"Allow outgoing IPv4 Wireguard packets" -p 17 -m multiport --destination-ports 51820'
        " -m addrtype --src-type LOCAL --jump ACCEPT"
    ) in wireguard


def test_floating_ip_chains() -> None:
    """cali-fip-dnat/-snat from the workloads' ipNATs under FloatingIPs Enabled only, jumped
    to from nat PREROUTING, OUTPUT and (first) POSTROUTING."""
    extra = """
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata: {name: node--a-k8s-fip-eth0, namespace: shop}
spec:
  {orchestrator: k8s, node: node-a, pod: fip, endpoint: eth0, interfaceName: califip,
   ipNetworks: [10.65.0.77/32], ipNATs: [{internalIP: 10.65.0.77, externalIP: 192.0.2.100}]}
"""
    resources = example_resources() + [r.resource for r in load_text(extra).resources]
    dnat = "--destination 192.0.2.100 --jump DNAT --to-destination 10.65.0.77"
    snat = "--destination 10.65.0.77 --source 10.65.0.77 --jump SNAT --to-source 192.0.2.100"
    disabled = str(compute(resources, "node-a")[0]["iptables"]["ipv4"]["nat"])
    assert dnat not in disabled
    assert snat not in disabled
    resources = with_felix_config(resources, floatingIPs="Enabled")
    nat = str(compute(resources, "node-a")[0]["iptables"]["ipv4"]["nat"])
    assert dnat in nat
    assert snat in nat
    for chain in ("PREROUTING", "OUTPUT"):
        assert f"-A cali-{chain} -m comment" in nat
    assert nat.index("--jump cali-fip-snat") < nat.index("--jump cali-nat-outgoing")


def test_raw_failsafes_admit_the_replies_of_the_other_direction() -> None:
    """raw runs before conntrack: as Felix, its failsafe-in also accepts replies of outbound
    failsafe connections (their source port) and failsafe-out those of inbound ones, while
    filter's failsafes match destination ports only."""
    resources = with_felix_config(
        example_resources(),
        failsafeInboundHostPorts=[{"protocol": "TCP", "port": 22}],
        failsafeOutboundHostPorts=[{"protocol": "UDP", "port": 53}],
    )
    _, dataplane = compute(resources, "node-a")
    rendered = render(dataplane, versions=(4,)).chains[4]
    raw = {c.name: text(list(c.rules)) for c in rendered["raw"]}
    filter_chains = {c.name: text(list(c.rules)) for c in rendered["filter"]}
    assert raw["cali-failsafe-in"] == [
        "-p tcp -m multiport --destination-ports 22 --jump ACCEPT",
        "-p udp -m multiport --source-ports 53 --jump ACCEPT",
    ]
    assert raw["cali-failsafe-out"] == [
        "-p udp -m multiport --destination-ports 53 --jump ACCEPT",
        "-p tcp -m multiport --source-ports 22 --jump ACCEPT",
    ]
    assert filter_chains["cali-failsafe-in"] == [
        "-p tcp -m multiport --destination-ports 22 --jump ACCEPT"
    ]


def test_network_pools_set_leaves_out_load_balancer_only_pools() -> None:
    """As current Felix: cali40network-ip-pools (NAT outgoing's "not to a pool") holds every
    pool but those only for LoadBalancer addresses, to which traffic is still masqueraded."""
    pool = {
        "apiVersion": "projectcalico.org/v3",
        "kind": "IPPool",
        "metadata": {"name": "lb"},
        "spec": {"cidr": "203.0.113.0/24", "allowedUses": ["LoadBalancer"]},
    }
    extra = load_text(yaml.safe_dump(pool), "lb.yaml").resources
    _, dataplane = compute([*example_resources(), *(item.resource for item in extra)], "node-a")
    sets = render(dataplane, versions=(4,)).ipsets
    pools = sets["cali40network-ip-pools"][1]
    assert "203.0.113.0/24" not in pools
    assert pools, "the example's workload pools are there"
    assert "cali40all-ipam-pools" not in sets


def test_external_nodes_may_send_vxlan_and_are_hosts() -> None:
    """ExternalNodesCIDRList: as Felix, the CIDRs join the VXLAN sources set (the INPUT rule
    accepting VXLAN from them) and, with NATOutgoingExclusions IPPoolsAndHostIPs, the hosts
    set NAT outgoing leaves alone."""
    resources = with_felix_config(
        example_resources(),
        externalNodesList=["198.51.100.0/24"],
        natOutgoingExclusions="IPPoolsAndHostIPs",
    )
    _, dataplane = compute(resources, "node-a")
    sets = render(dataplane, versions=(4,)).ipsets
    assert "198.51.100.0/24" in sets["cali40all-vxlan-net"][1]
    assert "198.51.100.0/24" in sets["cali40all-hosts-net"][1]
    _, plain = compute(example_resources(), "node-a")
    assert "198.51.100.0/24" not in render(plain, versions=(4,)).ipsets["cali40all-vxlan-net"][1]


def test_dry_run_with_route_source_workload_ips() -> None:
    """routeSource WorkloadIPs in the FelixConfiguration: the dry-run's graph routes the other
    node's workloads by address instead of its IPAM block."""
    resources = with_felix_config(example_resources(), routeSource="WorkloadIPs")
    view, _ = compute(resources, "node-a")
    ipam_view, _ = compute(example_resources(), "node-a")
    by_dst = {r["dst"]: r for r in view["routes"]}
    blocks = {r["dst"] for r in ipam_view["routes"] if r["dst"].endswith("/26")}
    assert blocks
    assert not blocks & set(by_dst)
    remote = [r for r in view["routes"] if r["types"] == ["REMOTE_WORKLOAD"]]
    assert remote
    assert all(r["dst"].endswith("/32") and r["dst_node"] == "node-b" for r in remote)


def test_openstack_special_cases() -> None:
    """Felix's OpenStack special cases, on when ClusterType says openstack (or MetadataAddr is
    set): workloads may reach the metadata service, the host's DHCP and DNS before their
    egress policy, and 169.254.169.254:80 is DNATed to MetadataAddr:MetadataPort."""
    plain = rendered_filter_with("logSeverityScreen: Info")
    assert not any("udp" in rule for rule in chain_rules(plain, "cali-wl-to-host"))
    assert "169.254.169.254" not in rendered_with("logSeverityScreen: Info", "nat")
    config = "metadataAddr: 10.0.0.9\nmetadataPort: 8775"
    assert chain_rules(rendered_filter_with(config), "cali-wl-to-host")[:3] == [
        "-p tcp -m multiport --destination-ports 8775 --destination 10.0.0.9 --jump ACCEPT",
        "-p udp -m multiport --source-ports 68 -m multiport --destination-ports 67 --jump ACCEPT",
        "-p udp -m multiport --destination-ports 53 --jump ACCEPT",
    ]
    assert (
        "-p tcp -m multiport --destination-ports 80 --destination 169.254.169.254/32"
        " --jump DNAT --to-destination 10.0.0.9:8775"
    ) in chain_rules(rendered_with(config, "nat"), "cali-PREROUTING")
    # A tap interface prefix (Felix's other sign of OpenStack) with a metadata host name: DHCP
    # and DNS, no metadata rules.
    named = rendered_filter_with("interfacePrefix: tap\nmetadataAddr: metadata.internal")
    rules = chain_rules(named, "cali-wl-to-host")
    assert rules[0].startswith("-p udp -m multiport --source-ports 68")
    assert not any("8775" in rule for rule in rules)


def test_ipip_rules_as_felix(tmp_path: Path) -> None:
    """With an IPIP pool: cali-INPUT admits IPIP only from the Calico hosts (all-hosts-net)
    and drops the rest, cali-OUTPUT lets the node's IPIP to them through before host endpoint
    policy, host traffic into tunl0 is masqueraded from the tunnel address; VXLAN's are gone."""
    view, _ = compute(ipip_cluster(tmp_path / "cluster"), "node-a")
    filter_text = str(view["iptables"]["ipv4"]["filter"])
    assert chain_rules(filter_text, "cali-INPUT")[:2] == [
        '-m comment --comment "Allow IPIP packets from Calico hosts" -p 4 -m set --match-set'
        " cali40all-hosts-net src -m addrtype --dst-type LOCAL --jump ACCEPT",
        '-m comment --comment "DROP IPIP packets from non-Calico hosts" -p 4 --jump DROP',
    ]
    assert (
        '-m comment --comment "Allow IPIP packets to other Calico hosts" -p 4 -m set'
        " --match-set cali40all-hosts-net dst -m addrtype --src-type LOCAL --jump ACCEPT"
    ) in chain_rules(filter_text, "cali-OUTPUT")
    assert "all-vxlan-net" not in filter_text
    nat = chain_rules(str(view["iptables"]["ipv4"]["nat"]), "cali-POSTROUTING")
    assert (
        "--out-interface tunl0 -m addrtype ! --src-type LOCAL --limit-iface-out"
        " -m addrtype --src-type LOCAL --jump MASQUERADE --random-fully"
    ) in nat
    restore = view["ipset_restore"].splitlines()
    assert "add cali40all-hosts-net 192.168.56.11/32" in restore
    assert "add cali40all-hosts-net 192.168.56.12/32" in restore


DUAL_STACK_VXLAN = """
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: default-ipv6-ippool}
spec: {cidr: 'fd65::/48', blockSize: 122, vxlanMode: Always, natOutgoing: true}
---
apiVersion: projectcalico.org/v3
kind: IPAMBlock
metadata: {name: fd65-0-0-1---122}
spec: {cidr: 'fd65:0:0:1::/122', affinity: 'host:node-b'}
"""


def dual_stack_cluster(directory: Path) -> list[Any]:
    """The example with an IPv6 VXLAN pool and IPv6 node and tunnel addresses."""
    shutil.copytree(REPO / "examples" / "cluster", directory)
    (directory / "05-ipv6.yaml").write_text(DUAL_STACK_VXLAN)
    nodes = directory / "10-nodes.yaml"
    text = nodes.read_text()
    for index, name in ((11, "a"), (12, "b")):
        text = text.replace(
            f"    ipv4Address: 192.168.56.{index}/24\n",
            f"    ipv4Address: 192.168.56.{index}/24\n    ipv6Address: fd56::{index}/64\n"
            f"  ipv6VXLANTunnelAddr: 'fd65:0:0:{index - 11}::'\n",
            1,
        )
        assert f"fd56::{index}" in text, name
    nodes.write_text(text)
    result = load_paths([directory])
    assert result.ok, result.problems
    return [item.resource for item in result.resources]


def test_dual_stack_vxlan_rules_sets_and_routes(tmp_path: Path) -> None:
    """An IPv6 VXLAN pool beside the IPv4 one: the IPv6 tables get Felix's IPv6 VXLAN rules
    (the other hosts' IPv6 addresses in cali60all-vxlan-net, the rest dropped with the deny
    action), VXLAN is untracked in both families, host traffic into vxlan-v6.calico is
    masqueraded, and the IPv6 block is routed through the remote VTEP's IPv6 half."""
    view, dataplane = compute(dual_stack_cluster(tmp_path / "cluster"), "node-a")
    assert dataplane.encapsulation == m.Encapsulation(False, True, True)
    filter6 = str(view["iptables"]["ipv6"]["filter"])
    assert chain_rules(filter6, "cali-INPUT")[:2] == [
        '-m comment --comment "Allow IPv6 VXLAN packets from allowed hosts" -p 17 -m multiport'
        " --destination-ports 4789 -m set --match-set cali60all-vxlan-net src"
        " -m addrtype --dst-type LOCAL --jump ACCEPT",
        '-m comment --comment "DROP IPv6 VXLAN packets from non-allowed hosts" -p 17'
        " -m multiport --destination-ports 4789 -m addrtype --dst-type LOCAL --jump DROP",
    ]
    assert (
        '"Allow IPv6 VXLAN packets to other allowed hosts" -p 17 -m multiport'
        " --destination-ports 4789 -m addrtype --src-type LOCAL -m set --match-set"
        " cali60all-vxlan-net dst --jump ACCEPT"
    ) in filter6
    assert "-p udp --dport 4789 --jump NOTRACK" in str(view["iptables"]["ipv6"]["raw"])
    assert "--out-interface vxlan-v6.calico -m addrtype ! --src-type LOCAL" in str(
        view["iptables"]["ipv6"]["nat"]
    )
    restore = view["ipset_restore"].splitlines()
    assert "add cali60all-vxlan-net fd56::12/128" in restore
    assert "add cali40all-vxlan-net 192.168.56.12/32" in restore
    vtep = dataplane.vteps["node-b"]
    assert (vtep.ipv6_addr, vtep.parent_device_ipv6) == ("fd65:0:0:1::", "fd56::12")
    route = dataplane.routes["fd65:0:0:1::/122"]
    assert (route.tunnel, route.dst_node_ip) == ("vxlan", "fd56::12")


def test_wireguard_host_encryption_marks_what_arrives_from_outside_the_tunnels() -> None:
    """cali-wireguard-incoming-mark is always there, as Felix renders it; with
    wireguardHostEncryptionEnabled raw cali-PREROUTING jumps to it right after clearing the
    marks, so the reverse-path check of encrypted packets skips WireGuard's table."""
    plain = rendered_with("wireguardEnabled: true", "raw")
    assert chain_rules(plain, "cali-wireguard-incoming-mark") == [
        "--in-interface lo --jump RETURN",
        "--in-interface wireguard.cali --jump RETURN",
        "--in-interface wg-v6.cali --jump RETURN",
        "--in-interface cali+ --jump RETURN",
        "--jump MARK --set-mark 0x200000/0x200000",
    ]
    assert "--jump cali-wireguard-incoming-mark" not in plain
    encrypting = rendered_with(
        "wireguardEnabled: true\nwireguardHostEncryptionEnabled: true", "raw"
    )
    assert chain_rules(encrypting, "cali-PREROUTING")[:2] == [
        "--jump MARK --set-mark 0/0x1b0000",
        "--jump cali-wireguard-incoming-mark",
    ]


def test_scripts_made_in_pieces_are_the_rendered_scripts(tmp_path: Path) -> None:
    """The dry-run's JSON writes the restore scripts as they are made, one IP version's
    chains at a time: joined, each is what ``render`` gives, in either order of reading."""
    for resources, node in [
        (dual_stack_cluster(tmp_path / "cluster"), "node-a"),
        (example_resources(), "node-b"),
    ]:
        _, dataplane = compute(resources, node)
        rendered = render(dataplane)
        tables, ipsets = script_pieces(dataplane)
        assert sorted(tables) == sorted(rendered.iptables) == [4, 6]
        for version in (6, 4, 6):  # the chains held are the last version's
            for table, made in tables[version].items():
                assert "".join(made()) == rendered.iptables[version][table]
        assert "".join(ipsets()) == rendered.ipset_restore
        assert rendered.ipset_restore.count("create ") > 3
        # Given the sets' members sorted already (as the dry-run's view lists them).
        listed = {i: sorted(members) for i, (_, members) in dataplane.ipsets.items()}
        assert listed
        _, ipsets = script_pieces(dataplane, listed)
        assert "".join(ipsets()) == rendered.ipset_restore
