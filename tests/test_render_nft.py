"""The nftables rendering: Felix's layout from the same chains as the iptables mode, each rule
translated, and the real `nft` parser accepting every cluster the other tests render."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources.loader import load_paths
from pyfelix_dataplane.linux.libnftables import LISTING_OPTIONS
from pyfelix_dataplane.linux.nftables import delta, parse_listing
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.nft import (
    NftSet,
    NftUnsupported,
    nft_table,
    render_nftables,
    translate,
)
from pyfelix_dataplane.state import NodeState
from tests.netns import run_in
from tests.test_golden_dry_run import CASES

REPO = Path(__file__).resolve().parent.parent


#: (criteria, action, the iptables mode's text, the nft mode's): one value, two spellings.
SPELLINGS: list[tuple[mt.Match, mt.Action, str, str]] = [
    ((), mt.Jump("cali-FORWARD"), "--jump cali-FORWARD", "counter jump filter-cali-FORWARD"),
    (
        (mt.Mark(0x10000, 0x10000),),
        mt.ACCEPT,
        "-m mark --mark 0x10000/0x10000 --jump ACCEPT",
        "meta mark & 0x10000 == 0x10000 counter accept",
    ),
    (
        (),
        mt.SetMark(0, 0x1B0000),
        "--jump MARK --set-mark 0/0x1b0000",
        "counter meta mark set mark & 0xffe4ffff",
    ),
    (
        (),
        mt.SetMark(0x80000, 0x80000),
        "--jump MARK --set-mark 0x80000/0x80000",
        "counter meta mark set mark or 0x80000",
    ),
    (
        (mt.Protocol("tcp"), mt.Ports("dst", "80,8000:8080")),
        mt.ACCEPT,
        "-p tcp -m multiport --destination-ports 80,8000:8080 --jump ACCEPT",
        "meta l4proto tcp tcp dport @calipt-80_8000-8080 counter accept",
    ),
    (
        (
            mt.Protocol("17"),
            mt.Ports("dst", "4789"),
            mt.InSet("cali40all-vxlan-net", "src"),
            mt.AddrType("dst", "LOCAL"),
        ),
        mt.ACCEPT,
        "-p 17 -m multiport --destination-ports 4789 -m set --match-set cali40all-vxlan-net"
        " src -m addrtype --dst-type LOCAL --jump ACCEPT",
        "meta l4proto 17 udp dport 4789 ip saddr @cali40all-vxlan-net fib daddr type local"
        " counter accept",
    ),
    (
        (mt.InSet("cali40n:abc", "dst,dst", negate=True),),
        mt.RETURN,
        "-m set ! --match-set cali40n:abc dst,dst --jump RETURN",
        "ip daddr . meta l4proto . th dport != @cali40n-abc counter return",
    ),
    (
        (mt.Interface("in", "cali+"),),
        mt.Goto("cali-wl-to-host"),
        "--in-interface cali+ --goto cali-wl-to-host",
        'iifname "cali*" counter goto filter-cali-wl-to-host',
    ),
    (
        (mt.ConnState("RELATED,ESTABLISHED"),),
        mt.ACCEPT,
        "-m conntrack --ctstate RELATED,ESTABLISHED --jump ACCEPT",
        "ct state related,established counter accept",
    ),
    (
        (mt.ConnState("DNAT", negate=True),),
        mt.Jump("cali-x"),
        "-m conntrack ! --ctstate DNAT --jump cali-x",
        "ct status != dnat counter jump filter-cali-x",
    ),
    (
        (
            mt.Interface("out", "tunl0"),
            mt.AddrType("src", "LOCAL", negate=True, limit_iface_out=True),
            mt.AddrType("src", "LOCAL"),
        ),
        mt.Masquerade(random_fully=True),
        "--out-interface tunl0 -m addrtype ! --src-type LOCAL --limit-iface-out"
        " -m addrtype --src-type LOCAL --jump MASQUERADE --random-fully",
        'oifname "tunl0" fib saddr . oif type != local fib saddr type local counter'
        " masquerade fully-random",
    ),
    (
        (mt.Mark(0x80000, 0x80000), mt.ReversePath()),
        mt.DROP,
        "-m mark --mark 0x80000/0x80000 -m rpfilter --invert --validmark --jump DROP",
        "meta mark & 0x80000 == 0x80000 fib saddr . mark . iif oif 0 counter drop",
    ),
    (
        (mt.Protocol("icmp"), mt.Icmp(4, 8, 0)),
        mt.DROP,
        "-p icmp -m icmp --icmp-type 8/0 --jump DROP",
        "meta l4proto icmp icmp type 8 icmp code 0 counter drop",
    ),
    (
        (mt.Net("src", "10.0.0.0/8", negate=True),),
        mt.Snat("10.9.9.9"),
        "! --source 10.0.0.0/8 --jump SNAT --to-source 10.9.9.9",
        "ip saddr != 10.0.0.0/8 counter snat to 10.9.9.9",
    ),
    (
        (mt.Limit("10/second", 5), mt.Protocol("udp"), mt.Port("dst", 53)),
        mt.Log("calico-packet: "),
        "-m limit --limit 10/second --limit-burst 5 -p udp --dport 53 --jump LOG --log-prefix"
        ' "calico-packet: " --log-level 5',
        "limit rate 10/second burst 5 packets meta l4proto udp udp dport 53 counter log prefix"
        ' "calico-packet: " level notice',
    ),
]


@pytest.mark.parametrize(("match", "action", "iptables", "nft"), SPELLINGS)
def test_one_rule_value_is_spelled_by_both_modes(
    match: mt.Match, action: mt.Action, iptables: str, nft: str
) -> None:
    """A rule is typed criteria and an action; each table mode spells them its own way, as
    Felix's two match builders do."""
    rule = Rule(match, action)
    assert rule.body == iptables
    assert translate(rule, "filter", 4).text == nft


def test_rules_on_the_same_ports_share_one_set_of_the_table() -> None:
    """Several ports are a set of the table named by them, one for every rule on the same
    ports (Felix's anonymous sets cost the kernel O(N^2) to load); overlapping ranges stay
    an anonymous set, which an interval set could not hold."""
    rules = (
        Rule((mt.Protocol("tcp"), mt.Ports("dst", "80,443")), mt.ACCEPT),
        Rule((mt.Protocol("udp"), mt.Ports("src", "80,443")), mt.DROP),
        Rule((mt.Protocol("tcp"), mt.Ports("dst", "53,1000:2000")), mt.ACCEPT),
        Rule((mt.Protocol("tcp"), mt.Ports("dst", "80,70:90")), mt.ACCEPT),
    )
    chains = {"raw": (), "mangle": (), "nat": (), "filter": (Chain("cali-pi-x", rules),)}
    table = nft_table(4, chains, {}, {})
    assert [r.text for r in table.chains["filter-cali-pi-x"].rules] == [
        "meta l4proto tcp tcp dport @calipt-80_443 counter accept",
        "meta l4proto udp udp sport @calipt-80_443 counter drop",
        "meta l4proto tcp tcp dport @calipt-53_1000-2000 counter accept",
        "meta l4proto tcp tcp dport { 80, 70-90 } counter accept",
    ]
    assert table.sets["calipt-80_443"] == NftSet("inet_service", False, frozenset({"80", "443"}))
    assert table.sets["calipt-53_1000-2000"] == NftSet(
        "inet_service", True, frozenset({"53", "1000-2000"})
    )


def test_a_kernel_target_without_an_nft_spelling_is_an_error_naming_the_rule() -> None:
    with pytest.raises(NftUnsupported, match="--jump CLASSIFY"):
        translate(Rule((mt.Protocol("tcp"),), mt.Jump("CLASSIFY")), "filter", 4)


def test_layout_dispatch_maps_sets_and_base_chains() -> None:
    """The workload dispatch becomes a verdict map keyed by interface; base chains are
    hooked at Felix's priorities and hold the jumps into ours and the kept FORWARD rules;
    an interval set leaves out a member inside a wider one; named-port members are
    concatenations."""
    dispatch = Chain(
        "cali-from-wl-dispatch",
        (
            Rule((mt.Interface("in", "cali1"),), mt.Goto("cali-fw-cali1")),
            Rule((mt.Interface("in", "cali2"),), mt.Goto("cali-fw-cali2")),
            Rule(action=mt.DROP, comment=("Unknown interface",)),
        ),
    )
    chains = {"raw": (), "mangle": (), "nat": (), "filter": (dispatch,)}
    kept = {"filter": (Chain("FORWARD", (Rule(action=mt.ACCEPT),)),)}
    sets = {
        "cali40s:a": ("hash:net", frozenset({"10.0.0.0/8", "10.1.0.0/16", "192.0.2.1/32"})),
        "cali40n:b": ("hash:ip,port", frozenset({"10.0.0.1,tcp:8080"})),
    }
    table = nft_table(4, chains, kept, sets)
    assert table.maps["filter-cali-from-wl-dispatch"] == {
        "cali1": "goto filter-cali-fw-cali1",
        "cali2": "goto filter-cali-fw-cali2",
    }
    assert [r.text for r in table.chains["filter-cali-from-wl-dispatch"].rules] == [
        "iifname vmap @filter-cali-from-wl-dispatch",
        "counter drop",
    ]
    forward = table.chains["filter-FORWARD"]
    assert forward.hook == "type filter hook forward priority 0; policy accept;"
    assert [r.text for r in forward.rules] == ["counter jump filter-cali-FORWARD", "counter accept"]
    assert table.chains["nat-POSTROUTING"].hook.endswith("priority 110; policy accept;")
    assert table.sets["cali40s-a"].elements == {"10.0.0.0/8", "192.0.2.1"}
    assert table.sets["cali40n-b"].elements == {"10.0.0.1 . tcp . 8080"}
    assert table.sets["cali40n-b"].type == "ipv4_addr . inet_proto . inet_service"


def _cluster_state(name: str) -> NodeState:
    node, sources = CASES[name]
    result = load_paths(sources)
    assert result.ok, result.problems
    _, dataplane = compute([item.resource for item in result.resources], node)
    return dataplane


@pytest.mark.netns
@pytest.mark.parametrize("name", sorted(CASES))
def test_nft_loads_every_cluster_in_both_families(netns: str, name: str, tmp_path: Path) -> None:
    """The real nft parses and loads each cluster's tables, and lists every chain and set; the
    writer, reading that listing, finds nothing to write (each chain's rule ids and hook, each
    set's and map's elements, as written)."""
    dataplane = _cluster_state(name)
    for version, table in render_nftables(dataplane).items():
        script = tmp_path / f"v{version}.nft"
        script.write_text(table.script())
        loaded = run_in(netns, "nft", "-f", str(script))
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        listed = run_in(netns, "nft", "list", "table", table.family, "calico").stdout
        for chain in table.chains:
            assert f"chain {chain} {{" in listed
        for set_name in table.sets:
            assert f"set {set_name} {{" in listed
        options = LISTING_OPTIONS
        kernel = parse_listing(
            run_in(netns, "nft", *options, "list", "table", table.family, "calico").stdout
        )
        assert kernel.chains == {name: (c.hashes, c.hook) for name, c in table.chains.items()}
        assert delta(kernel, table) == ""


def test_the_dry_run_prints_the_nft_scripts_in_nftables_mode(tmp_path: Path) -> None:
    """NFTablesMode Enabled: the dry-run prints each family's nft script instead of the
    iptables-restore and ipset restore scripts, in text and JSON."""
    directory = tmp_path / "cluster"
    shutil.copytree(REPO / "examples" / "cluster", directory)
    config = directory / "00-cluster.yaml"
    config.write_text(
        config.read_text().replace(
            "  vxlanEnabled: true", "  vxlanEnabled: true\n  nftablesMode: Enabled", 1
        )
    )
    argv = [sys.executable, "-m", "pyfelix", "dry-run", "--hostname", "node-a"]
    text = subprocess.run(
        [*argv, str(directory)], capture_output=True, text=True, check=True
    ).stdout
    assert "# nft -f (ipv4)" in text
    assert "# iptables-restore" not in text
    assert "\tchain filter-cali-FORWARD {" in text
    as_json = subprocess.run(
        [*argv, "--format", "json", str(directory)], capture_output=True, text=True, check=True
    ).stdout
    assert '"nftables"' in as_json
    assert '"iptables"' not in as_json
