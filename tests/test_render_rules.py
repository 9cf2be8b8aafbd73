"""Golden tests of the iptables rendering, one rule feature at a time. Expected lines were
written by hand from Felix's layout (long options, Felix's match order, marks for 0xffff0000:
accept 0x10000, pass 0x20000, drop 0x40000, scratch0 0x80000, scratch1 0x100000)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.rule_scanner import IPSetData, parse_rule
from pyfelix.dryrun import compute
from pyfelix.resources import FelixConfiguration
from pyfelix.resources.cluster import FelixConfigurationSpec
from pyfelix.resources.loader import load_paths, load_text
from pyfelix.values import FrozenMap, Port
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import dispatch_chains, endpoint_chain
from pyfelix_dataplane.rules.groups import group_chain, group_policies, group_targets, tier_groups
from pyfelix_dataplane.rules.ipsets import ipset_name, restore_script
from pyfelix_dataplane.rules.marks import MarkBits, MarkMaskTooSmall
from pyfelix_dataplane.rules.model import Chain, Rule, length_limited
from pyfelix_dataplane.rules.policy import (
    RuleContext,
    policy_chain_name,
    profile_chain_name,
    render_rule,
    split_ports,
)
from pyfelix_dataplane.rules.render import render
from tests.test_render_kernel import example_resources

REPO = Path(__file__).resolve().parent.parent

MARKS = MarkBits.from_mask()
V4 = RuleContext(4, MARKS)
V6 = RuleContext(6, MARKS)
ALLOW = ["-m mark --mark 0x10000/0x10000 --jump RETURN"]


def render_parsed(rule: model.Rule, ctx: RuleContext) -> list[Rule]:
    """A rule rendered as it reaches the dataplane: with the scanner's IP set ids."""
    return list(render_rule(parse_rule(rule), ctx))


def text(rules: list[Rule]) -> list[str]:
    return [r.body for r in rules]


def test_felix_hash_vectors() -> None:
    """Rule ids and shortened chain names reproduce values Felix itself produces."""
    assert Chain("FORWARD", (Rule(action=mt.Jump("cali-FORWARD")),)).rule_hashes() == [
        "wUHhoiAYhphO9Mso"
    ]
    assert length_limited("cali-pi-", "gnp/long-policy-name-that-gets-hashed") == (
        "cali-pi-_PymyFHQQg3808jiz1OJ"
    )
    assert policy_chain_name(m.PolicyID("default", "allow-x"), True) == "cali-pi-gnp/allow-x"
    web = m.PolicyID("default", "web", "shop", "NetworkPolicy")
    assert policy_chain_name(web, False) == "cali-po-np/shop/web"
    assert profile_chain_name("kns.shop", True) == "cali-pri-kns.shop"
    assert all(len(length_limited("cali-tw-", "x" * n)) <= 28 for n in range(40))


def test_rule_ids_depend_on_everything_before() -> None:
    """Changing an earlier rule changes the ids of every rule after it."""
    a = Chain("c", (Rule(action=mt.Jump("ACCEPT")), Rule(action=mt.Jump("DROP"))))
    b = Chain("c", (Rule(action=mt.Jump("RETURN")), Rule(action=mt.Jump("DROP"))))
    assert a.rule_hashes()[1] != b.rule_hashes()[1]
    assert all(len(h) == 16 for h in a.rule_hashes())
    assert a.lines()[0] == f'-A c -m comment --comment "cali:{a.rule_hashes()[0]}" --jump ACCEPT'


def test_mark_bits() -> None:
    """Marks are carved from the mask's lowest bits; too small a mask is an error."""
    assert (MARKS.accept, MARKS.pass_, MARKS.drop, MARKS.scratch0, MARKS.scratch1) == (
        0x10000,
        0x20000,
        0x40000,
        0x80000,
        0x100000,
    )
    assert MarkBits.from_mask(0xF0F00000).accept == 0x100000
    with pytest.raises(MarkMaskTooSmall):
        MarkBits.from_mask(0xF0000000)


def test_allow_tcp_port() -> None:
    """Allow: set the accept mark, then return if set."""
    rule = model.Rule(action="allow", protocol="tcp", dst_ports=(Port(80, 80), Port(1000, 2000)))
    assert text(render_parsed(rule, V4)) == [
        "-p tcp -m multiport --destination-ports 80,1000:2000 --jump MARK --set-mark 0x10000/0x10000",
        *ALLOW,
    ]


def test_deny_pass_log() -> None:
    """Deny sets the drop mark and drops; Pass sets the pass mark; Log logs and falls through."""
    assert text(render_parsed(model.Rule(action="deny"), V4)) == [
        "--jump MARK --set-mark 0x40000/0x40000",
        "-m mark --mark 0x40000/0x40000 --jump DROP",
    ]
    assert text(render_parsed(model.Rule(action="next-tier", protocol=17), V4)) == [
        "-p 17 --jump MARK --set-mark 0x20000/0x20000",
        "-m mark --mark 0x20000/0x20000 --jump RETURN",
    ]
    assert text(render_parsed(model.Rule(action="log"), RuleContext(4, MARKS, "audit"))) == [
        '--jump LOG --log-prefix "audit: " --log-level 5'
    ]


def test_selectors_and_negations() -> None:
    """Selector sets match src/dst; notSelector and notNets negate; one net is a plain -s. A
    notSelector beside a selector is folded into it, as Felix's combineMatchesIfPossible
    does (one set); alone, it is a set of its own, matched negated."""
    rule = model.Rule(
        action="allow",
        src_selector='app == "a"',
        not_src_selector='app == "b"',
        src_nets=("10.0.0.0/8",),
        not_dst_nets=("10.1.0.0/16",),
    )
    folded = ipset_name(IPSetData(selector='(app == "a") && (!(app == "b"))').id)
    assert text(render_parsed(rule, V4))[0] == (
        f"--source 10.0.0.0/8 -m set --match-set {folded} src ! --destination 10.1.0.0/16 "
        "--jump MARK --set-mark 0x10000/0x10000"
    )
    alone = model.Rule(action="allow", not_src_selector='app == "b"')
    b = ipset_name(IPSetData(selector='app == "b"').id)
    assert text(render_parsed(alone, V4))[0] == (
        f"-m set ! --match-set {b} src --jump MARK --set-mark 0x10000/0x10000"
    )


def test_several_nets_use_blocks() -> None:
    """Two source CIDRs become an OR block on scratch0, tested by the main rule."""
    rule = model.Rule(
        action="allow",
        protocol="tcp",
        src_nets=("10.0.0.0/8", "192.168.0.0/16"),
        dst_ports=(Port(80, 80),),
    )
    assert text(render_parsed(rule, V4)) == [
        "--jump MARK --set-mark 0/0x180000",
        "--source 10.0.0.0/8 --jump MARK --set-mark 0x80000/0x80000",
        "--source 192.168.0.0/16 --jump MARK --set-mark 0x80000/0x80000",
        "-p tcp -m multiport --destination-ports 80 -m mark --mark 0x80000/0x80000 "
        "--jump MARK --set-mark 0x10000/0x10000",
        *ALLOW,
    ]


def test_more_than_fifteen_ports_split() -> None:
    """A multiport match holds 15 slots (a range takes two): more ports need a block."""
    ports = tuple(Port(p, p) for p in range(1, 20))
    assert split_ports(ports) == [",".join(str(p) for p in range(1, 16)), "16,17,18,19"]
    rules = text(render_parsed(model.Rule(action="allow", protocol="udp", dst_ports=ports), V4))
    assert rules[0] == "--jump MARK --set-mark 0/0x180000"
    assert rules[1].startswith("-p udp -m multiport --destination-ports 1,2,3")
    assert rules[1].endswith("--jump MARK --set-mark 0x80000/0x80000")
    assert (
        rules[2]
        == "-p udp -m multiport --destination-ports 16,17,18,19 --jump MARK --set-mark 0x80000/0x80000"
    )
    assert (
        rules[3] == "-p udp -m mark --mark 0x80000/0x80000 --jump MARK --set-mark 0x10000/0x10000"
    )


def test_named_and_numeric_ports_or_together() -> None:
    """A numeric port and a named port on one side: a block of two alternatives."""
    rule = model.Rule(
        action="allow",
        protocol="tcp",
        dst_selector="has(web)",
        dst_ports=(Port(8080, 8080), Port(name="http")),
    )
    named = ipset_name(IPSetData(selector="has(web)", named_port="http", protocol="tcp").id)
    plain = ipset_name(IPSetData(selector="has(web)").id)
    assert text(render_parsed(rule, V4)) == [
        "--jump MARK --set-mark 0/0x180000",
        "-p tcp -m multiport --destination-ports 8080 --jump MARK --set-mark 0x80000/0x80000",
        f"-p tcp -m set --match-set {named} dst,dst --jump MARK --set-mark 0x80000/0x80000",
        f"-p tcp -m set --match-set {plain} dst -m mark --mark 0x80000/0x80000 "
        "--jump MARK --set-mark 0x10000/0x10000",
        *ALLOW,
    ]


def test_icmp_and_versions() -> None:
    """ICMP type/code (and negation) per family; rules for the other family render nothing."""
    rule = model.Rule(action="allow", protocol="icmp", icmp_type=8, icmp_code=0, not_icmp_type=3)
    assert text(render_parsed(rule, V4))[0] == (
        "-p icmp -m icmp --icmp-type 8/0 -m icmp ! --icmp-type 3 --jump MARK --set-mark 0x10000/0x10000"
    )
    assert render_parsed(rule, V6) == []
    v6 = model.Rule(action="allow", protocol="icmpv6", icmp_type=128)
    assert text(render_parsed(v6, V6))[0] == (
        "-p icmpv6 -m icmp6 --icmpv6-type 128 --jump MARK --set-mark 0x10000/0x10000"
    )
    only_v4_nets = model.Rule(action="allow", src_nets=("10.0.0.0/8",))
    assert render_parsed(only_v4_nets, V6) == []
    assert render_parsed(model.Rule(action="allow", ip_version=4), V6) == []


def test_service_match() -> None:
    """A destination service matches its ip,port set."""
    rule = model.Rule(action="allow", dst_service="web", dst_service_namespace="shop")
    name = ipset_name(IPSetData(service="shop/web", include_ports=True).id)
    assert text(render_parsed(rule, V4))[0] == (
        f"-m set --match-set {name} dst,dst --jump MARK --set-mark 0x10000/0x10000"
    )


def test_endpoint_chain_layout() -> None:
    """Conntrack, mark clearing, encap drops, tiers with end-of-tier drop, profiles, final drop."""
    tiers = tier_groups(
        (
            m.TierInfo("security", "Pass", (m.PolicyID("security", "p1"),), ()),
            m.TierInfo(
                "default", "Deny", (m.PolicyID("default", "p2", "ns", "NetworkPolicy"),), ()
            ),
        ),
        {},
    )
    chain = endpoint_chain(
        "cali-fw-cali1",
        active=True,
        tiers=tiers,
        profiles=("kns.ns",),
        inbound=True,
        marks=MARKS,
        from_workload=True,
    )
    assert [r.body for r in chain.rules] == [
        "-m conntrack --ctstate RELATED,ESTABLISHED --jump ACCEPT",
        "-m conntrack --ctstate INVALID --jump DROP",
        "--jump MARK --set-mark 0/0x30000",
        '-m comment --comment "Drop VXLAN encapped packets originating in workloads" '
        "-p 17 -m multiport --destination-ports 4789 --jump DROP",
        '-m comment --comment "Drop IPinIP encapped packets originating in workloads" -p 4 --jump DROP',
        '-m comment --comment "Start of tier security" --jump MARK --set-mark 0/0x20000',
        "-m mark --mark 0/0x20000 --jump cali-pi-gnp/p1",
        '-m comment --comment "Return if policy accepted" -m mark --mark 0x10000/0x10000 --jump RETURN',
        '-m comment --comment "Start of tier default" --jump MARK --set-mark 0/0x20000',
        "-m mark --mark 0/0x20000 --jump cali-pi-np/ns/p2",
        '-m comment --comment "Return if policy accepted" -m mark --mark 0x10000/0x10000 --jump RETURN',
        '-m comment --comment "End of tier default. Drop if no policies passed packet" '
        "-m mark --mark 0/0x20000 --jump DROP",
        "--jump cali-pri-kns.ns",
        '-m comment --comment "Return if profile accepted" -m mark --mark 0x10000/0x10000 --jump RETURN',
        '-m comment --comment "Drop if no profiles matched" --jump DROP',
    ]
    down = endpoint_chain("c", active=False, tiers=tiers, profiles=(), inbound=True, marks=MARKS)
    assert [r.body for r in down.rules] == [
        '-m comment --comment "Endpoint admin disabled" --jump DROP'
    ]


def test_dispatch_tree() -> None:
    """Interfaces group by the character after their common prefix; always --goto."""
    targets = {name: f"cali-fw-{name}" for name in ("calia1", "calia2", "calib1")}
    root, *children = dispatch_chains(
        "cali-from-wl-dispatch",
        targets,
        outbound=False,
        end=[Rule(action=mt.Jump("DROP"), comment=("Unknown interface",))],
    )
    assert [r.body for r in root.rules] == [
        "--in-interface calia+ --goto cali-from-wl-dispatch-a",
        "--in-interface calib1 --goto cali-fw-calib1",
        '-m comment --comment "Unknown interface" --jump DROP',
    ]
    (child,) = children
    assert child.name == "cali-from-wl-dispatch-a"
    assert [r.body for r in child.rules][:2] == [
        "--in-interface calia1 --goto cali-fw-calia1",
        "--in-interface calia2 --goto cali-fw-calia2",
    ]


def test_ipset_script() -> None:
    """Sets per family, members sorted, maxelem Felix's MaxIpsetSize (default 1048576)."""
    sets = {"s:x": ("hash:net", {"10.0.0.2/32", "10.0.0.1/32", "fd00::1/128"})}
    assert restore_script(sets).splitlines() == [
        "create cali40s:x hash:net family inet maxelem 1048576",
        "add cali40s:x 10.0.0.1/32",
        "add cali40s:x 10.0.0.2/32",
        "create cali60s:x hash:net family inet6 maxelem 1048576",
        "add cali60s:x fd00::1/128",
    ]
    assert "maxelem 5000\n" in restore_script(sets, maxelem=5000)
    assert ipset_name("s:" + "a" * 40) == "cali40s:" + "a" * 23


def test_nets_and_not_nets_on_one_side() -> None:
    """iptables allows one -s per rule: the exception becomes a negated block that clears the
    all-blocks mark (found by the packet tests)."""
    rule = model.Rule(action="allow", src_nets=("10.0.0.0/8",), not_src_nets=("10.65.0.3/32",))
    assert text(render_parsed(rule, V4)) == [
        "--jump MARK --set-mark 0x80000/0x180000",
        "--source 10.65.0.3/32 --jump MARK --set-mark 0/0x80000",
        "--source 10.0.0.0/8 -m mark --mark 0x80000/0x80000 --jump MARK --set-mark 0x10000/0x10000",
        *ALLOW,
    ]


HOST_ENDPOINTS = """
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: a-eth0}
spec: {node: node-a, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: b-eth0}
spec: {node: node-a, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: all}
spec: {node: node-a, interfaceName: "*"}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: by-address}
spec: {node: node-a, expectedIPs: [192.0.2.9]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: pre}
spec: {selector: all(), preDNAT: true, applyOnForward: true, ingress: [{action: Allow}]}
"""


def test_all_interfaces_host_endpoint_is_the_default() -> None:
    """A "*" host endpoint catches every interface without its own host endpoint (filter and
    pre-DNAT, never untracked); of two endpoints naming one interface, the first by name
    governs it; an endpoint known only by its addresses is not resolved."""
    resources = [item.resource for item in load_text(HOST_ENDPOINTS).resources]
    view, _ = compute(resources, "node-a")
    tables = view["iptables"]["ipv4"]
    dispatch = [
        line
        for line in tables["filter"].splitlines()
        if line.startswith("-A cali-from-host-endpoint ")
    ]
    assert [line.split(" --")[-1] for line in dispatch] == [
        "goto cali-fh-eth0",
        "goto cali-fh-any-interface-at-all",
    ]
    assert "--in-interface eth0" in dispatch[0]
    assert "--in-interface" not in dispatch[1]
    assert tables["filter"].count(":cali-fh-eth0 ") == 1
    assert ":cali-th-any-interface-at-all " in tables["filter"]
    assert "--goto cali-fh-any-interface-at-all" in tables["mangle"]
    assert "any-interface-at-all" not in tables["raw"]
    assert "192.0.2.9" not in tables["filter"]


def test_policy_groups_share_one_chain_per_selector_run() -> None:
    """Consecutive policies with one selector form a group with its own chain (cali-gi-/go-),
    jumped to once; a lone policy is jumped to directly; the group chain returns on a verdict
    every fifth policy and skips later policies once one has decided."""
    ids = [m.PolicyID("default", f"p{i}") for i in range(12)]
    selectors = dict.fromkeys(ids[:11], "all()") | {ids[11]: 'app == "x"'}
    groups = group_policies(ids, selectors, inbound=True)
    assert [len(g.policies) for g in groups] == [11, 1]
    big, lone = groups
    assert big.chain_name.startswith("cali-gi-")
    assert len(big.chain_name) <= 28
    assert not big.inlined
    assert lone.inlined
    assert group_targets(lone) == [policy_chain_name(ids[11], True)]
    chain = group_chain(big, MARKS)
    lines = text(list(chain.rules))
    returns = [i for i, line in enumerate(lines) if "--jump RETURN" in line]
    assert returns == [5, 11], "a return before the 6th and the 11th jump"
    assert lines[0] == f"--jump {policy_chain_name(ids[0], True)}"
    assert lines[1] == f"-m mark --mark 0/0x30000 --jump {policy_chain_name(ids[1], True)}"
    assert (
        lines[5]
        == '-m comment --comment "Return on verdict" -m mark ! --mark 0/0x30000 --jump RETURN'
    )
    egress = group_policies(ids[:3], selectors, inbound=False)[0]
    assert egress.chain_name.startswith("cali-go-")
    assert egress.uid != big.uid


def test_endpoints_on_one_policy_set_jump_to_one_group_chain() -> None:
    """Two workloads selected by the same 20 policies: each endpoint chain has one jump into
    the group chain, which holds the 20 policy jumps once."""
    policies = "".join(
        f"---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {{name: g{i}}}\n"
        f"spec: {{order: {5000 + i}, selector: all(), types: [Ingress], ingress: [{{action: Allow}}]}}\n"
        for i in range(20)
    )
    resources = example_resources() + [item.resource for item in load_text(policies).resources]
    _, dataplane = compute(resources, "node-a")
    chains = {c.name: c for c in render(dataplane, versions=(4,)).chains[4]["filter"]}
    groups = [name for name in chains if name.startswith("cali-gi-")]
    assert len(groups) == 1
    assert sum("--jump cali-pi-gnp/g" in line for line in text(list(chains[groups[0]].rules))) == 20
    tw = [name for name in chains if name.startswith("cali-tw-")]
    assert len(tw) == 2
    for name in tw:
        body = text(list(chains[name].rules))
        assert sum(groups[0] in line for line in body) == 1
        assert not any("cali-pi-gnp/g" in line for line in body)


def rendered_with(config: str, table: str) -> str:
    """One IPv4 table of node-a for examples/ with ``config`` added to its FelixConfiguration
    default."""
    resources = []
    for original in example_resources():
        resource = original
        if original.KIND == "FelixConfiguration" and original.name == "default":
            manifest = original.to_manifest()
            for line in config.splitlines():
                name, _, value = line.partition(": ")
                manifest["spec"][name] = yaml.safe_load(value)
            (item,) = load_text(yaml.safe_dump(manifest)).resources
            resource = item.resource
        resources.append(resource)
    view, _ = compute(resources, "node-a")
    return str(view["iptables"]["ipv4"][table])


def rendered_filter_with(config: str) -> str:
    return rendered_with(config, "filter")


def test_vxlan_port_reaches_the_rules() -> None:
    """VXLANPort (Felix's parameter) in cali-INPUT's VXLAN rules and the workload-egress drop,
    not a fixed 4789."""
    text = rendered_filter_with("vxlanPort: 4790")
    assert "--destination-ports 4789" not in text
    assert "-A cali-INPUT" in text
    assert text.count("--destination-ports 4790") >= 3  # two INPUT rules, a drop per workload


def test_disable_conntrack_invalid_check() -> None:
    assert "--ctstate INVALID --jump DROP" in rendered_filter_with("logSeverityScreen: Info")
    assert "--ctstate INVALID" not in rendered_filter_with("disableConntrackInvalidCheck: true")


def with_felix_config(resources: list[Any], **values: object) -> list[Any]:
    """``resources`` with ``values`` added to FelixConfiguration default's spec."""
    out = []
    for resource in resources:
        if isinstance(resource, FelixConfiguration) and resource.name == "default":
            spec = FelixConfigurationSpec(FrozenMap(dict(resource.spec.values, **values)))
            out.append(attrs.evolve(resource, spec=spec))
        else:
            out.append(resource)
    return out


def test_every_interface_prefix_gets_the_workload_rules() -> None:
    """InterfacePrefix "cali,tap": each prefix is matched wherever Felix matches workload
    interfaces (forward dispatch, to host, output return, raw's RPF mark), in the order given."""
    resources = with_felix_config(example_resources(), interfacePrefix="cali,tap")
    _, dataplane = compute(resources, "node-a")
    rendered = render(dataplane, versions=(4,)).chains[4]
    filter_chains = {c.name: text(list(c.rules)) for c in rendered["filter"]}
    raw = {c.name: text(list(c.rules)) for c in rendered["raw"]}
    forward = [line for line in filter_chains["cali-FORWARD"] if "-interface" in line]
    assert [line.split("--")[-2:] for line in forward] == [
        ["in-interface cali+ ", "jump cali-from-wl-dispatch"],
        ["out-interface cali+ ", "jump cali-to-wl-dispatch"],
        ["in-interface tap+ ", "jump cali-from-wl-dispatch"],
        ["out-interface tap+ ", "jump cali-to-wl-dispatch"],
    ]
    for prefix in ("cali+", "tap+"):
        assert any(
            f"--in-interface {prefix} --goto cali-wl-to-host" in line
            for line in filter_chains["cali-INPUT"]
        )
        assert any(
            f"--out-interface {prefix} --jump RETURN" in line
            for line in filter_chains["cali-OUTPUT"]
        )
        assert any(f"--in-interface {prefix}" in line for line in raw["cali-PREROUTING"])


def test_filter_allow_and_deny_actions() -> None:
    """IptablesFilterDenyAction Reject: every drop of the filter table rejects, with Felix's
    comments; IptablesFilterAllowAction Return: established traffic is flagged accepted, then
    returned; the defaults render as before."""
    default = rendered_filter_with("logSeverityScreen: Info")
    rejecting = rendered_filter_with("iptablesFilterDenyAction: Reject")
    assert "--jump REJECT" not in default
    assert "--jump DROP" in default
    for phrase in (
        "Reject if no profiles matched",
        "Reject if no policies passed packet",
        "Reject VXLAN encapped packets originating in workloads",
        'comment "Unknown interface" --jump REJECT',
        "--ctstate INVALID --jump REJECT",
    ):
        assert phrase in rejecting, phrase
    # Only the IPv4 VXLAN guard keeps its plain drop, as Felix's.
    assert [line for line in rejecting.split("\\n") if "--jump DROP" in line] == [
        line for line in rejecting.split("\\n") if "VXLAN packets from non-allowed" in line
    ]
    returning = rendered_filter_with("iptablesFilterAllowAction: Return")
    assert "--ctstate RELATED,ESTABLISHED --jump MARK --set-mark 0x10000/0x10000" in returning
    assert "--ctstate RELATED,ESTABLISHED --jump RETURN" in returning
    assert 'accepted packet." -m mark --mark 0x10000/0x10000 --jump RETURN' in returning
    assert "--ctstate RELATED,ESTABLISHED --jump MARK" not in default


LOGGING_POLICY = """
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: audit, namespace: shop}
spec:
  tier: default
  selector: all()
  ingress: [{action: Log, protocol: TCP}, {action: Allow}]
"""


def test_log_prefix_specifiers_and_rate_limit() -> None:
    """LogPrefix's %t %k %n %p become the policy's tier, kind, name and namespace/name (and
    "pro" and the profile's name for profiles); LogActionRateLimit puts Log rules under
    -m limit, before the rule's own match, as Felix combines them."""
    resources = with_felix_config(
        example_resources() + [r.resource for r in load_text(LOGGING_POLICY).resources],
        logPrefix="cal %t/%k/%n/%p",
        logActionRateLimit="10/second",
        logActionRateLimitBurst=3,
    )
    view, _ = compute(resources, "node-a")
    filter_text = str(view["iptables"]["ipv4"]["filter"])
    assert (
        "-m limit --limit 10/second --limit-burst 3 -p tcp --jump LOG"
        ' --log-prefix "cal default/knp/audit/shop/audit: "' not in filter_text
    )
    assert (
        "-m limit --limit 10/second --limit-burst 3 -p tcp --jump LOG"
        ' --log-prefix "cal default/np/audit/shop/audit: " --log-level 5'
    ) in filter_text


def rendered_nat_with(config: str) -> list[str]:
    """The IPv4 nat table's rules for examples/ with ``config`` (as rendered_filter_with)."""
    return [line for line in rendered_with(config, "nat").split("\n") if "-A cali-" in line]


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


def _chain_rules(rendered: str, chain: str) -> list[str]:
    """``chain``'s rules without their ids: ``-A chain [match] --jump target``."""
    return [
        line.split('" ', 1)[1] if '" ' in line else line
        for line in rendered.split("\n")
        if line.startswith(f"-A {chain} ")
    ]


def test_openstack_special_cases() -> None:
    """Felix's OpenStack special cases, on when ClusterType says openstack (or MetadataAddr is
    set): workloads may reach the metadata service, the host's DHCP and DNS before their
    egress policy, and 169.254.169.254:80 is DNATed to MetadataAddr:MetadataPort."""
    plain = rendered_filter_with("logSeverityScreen: Info")
    assert not any("udp" in rule for rule in _chain_rules(plain, "cali-wl-to-host"))
    assert "169.254.169.254" not in rendered_with("logSeverityScreen: Info", "nat")
    config = "metadataAddr: 10.0.0.9\nmetadataPort: 8775"
    assert _chain_rules(rendered_filter_with(config), "cali-wl-to-host")[:3] == [
        "-p tcp -m multiport --destination-ports 8775 --destination 10.0.0.9 --jump ACCEPT",
        "-p udp -m multiport --source-ports 68 -m multiport --destination-ports 67 --jump ACCEPT",
        "-p udp -m multiport --destination-ports 53 --jump ACCEPT",
    ]
    assert (
        "-p tcp -m multiport --destination-ports 80 --destination 169.254.169.254/32"
        " --jump DNAT --to-destination 10.0.0.9:8775"
    ) in _chain_rules(rendered_with(config, "nat"), "cali-PREROUTING")
    # A tap interface prefix (Felix's other sign of OpenStack) with a metadata host name: DHCP
    # and DNS, no metadata rules.
    named = rendered_filter_with("interfacePrefix: tap\nmetadataAddr: metadata.internal")
    rules = _chain_rules(named, "cali-wl-to-host")
    assert rules[0].startswith("-p udp -m multiport --source-ports 68")
    assert not any("8775" in rule for rule in rules)


def ipip_cluster(directory: Path) -> list[Any]:
    """examples/ with its pool on IPIP (Always) instead of VXLAN, and the nodes' IPIP
    addresses."""
    shutil.copytree(REPO / "examples" / "cluster", directory)
    cluster = directory / "00-cluster.yaml"
    cluster.write_text(
        cluster.read_text()
        .replace("vxlanEnabled: true", "vxlanEnabled: false")
        .replace("vxlanMode: Always\n  ipipMode: Never", "vxlanMode: Never\n  ipipMode: Always")
    )
    nodes = directory / "10-nodes.yaml"
    text = nodes.read_text()
    node_a, node_b = text.split("kind: Node", 2)[1:]
    text = (
        text.split("kind: Node", 1)[0]
        + "kind: Node"
        + node_a.replace(
            "    ipv4Address: 192.168.56.11/24",
            "    ipv4Address: 192.168.56.11/24\n    ipv4IPIPTunnelAddr: 10.65.0.1",
            1,
        )
        + "kind: Node"
        + node_b.replace(
            "    ipv4Address: 192.168.56.12/24",
            "    ipv4Address: 192.168.56.12/24\n    ipv4IPIPTunnelAddr: 10.65.1.1",
            1,
        )
    )
    nodes.write_text(text)
    result = load_paths([directory])
    assert result.ok, result.problems
    return [item.resource for item in result.resources]


def test_ipip_rules_as_felix(tmp_path: Path) -> None:
    """With an IPIP pool: cali-INPUT admits IPIP only from the Calico hosts (all-hosts-net)
    and drops the rest, cali-OUTPUT lets the node's IPIP to them through before host endpoint
    policy, host traffic into tunl0 is masqueraded from the tunnel address; VXLAN's are gone."""
    view, _ = compute(ipip_cluster(tmp_path / "cluster"), "node-a")
    filter_text = str(view["iptables"]["ipv4"]["filter"])
    assert _chain_rules(filter_text, "cali-INPUT")[:2] == [
        '-m comment --comment "Allow IPIP packets from Calico hosts" -p 4 -m set --match-set'
        " cali40all-hosts-net src -m addrtype --dst-type LOCAL --jump ACCEPT",
        '-m comment --comment "DROP IPIP packets from non-Calico hosts" -p 4 --jump DROP',
    ]
    assert (
        '-m comment --comment "Allow IPIP packets to other Calico hosts" -p 4 -m set'
        " --match-set cali40all-hosts-net dst -m addrtype --src-type LOCAL --jump ACCEPT"
    ) in _chain_rules(filter_text, "cali-OUTPUT")
    assert "all-vxlan-net" not in filter_text
    nat = _chain_rules(str(view["iptables"]["ipv4"]["nat"]), "cali-POSTROUTING")
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
    assert _chain_rules(filter6, "cali-INPUT")[:2] == [
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
    assert _chain_rules(plain, "cali-wireguard-incoming-mark") == [
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
    assert _chain_rules(encrypting, "cali-PREROUTING")[:2] == [
        "--jump MARK --set-mark 0/0x1b0000",
        "--jump cali-wireguard-incoming-mark",
    ]


def test_only_the_iptables_spelling_writes_iptables_options() -> None:
    """Rules are typed data: every module of the rules package but the iptables spelling
    (model.py) builds criteria and actions, and the nft spelling reads them, never iptables
    text (a quoted ``--option`` or ``-m``/``-p`` anywhere else would be a step back)."""
    rules = REPO / "dataplane" / "pyfelix_dataplane" / "rules"
    option = re.compile(r"""f?["'](?:--[a-z]|-[mpjgsdio] )""")
    spelled = {
        path.name: [line for line in path.read_text().splitlines() if option.search(line)]
        for path in sorted(rules.glob("*.py"))
        if path.name != "model.py"
    }
    assert {name: lines for name, lines in spelled.items() if lines} == {}
    assert option.search((rules / "model.py").read_text())
