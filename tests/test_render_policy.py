"""Policy and profile rules, one feature at a time. Expected lines were written by hand from
Felix's layout (long options, Felix's match order, marks for 0xffff0000: accept 0x10000, pass
0x20000, drop 0x40000, scratch0 0x80000, scratch1 0x100000)."""

from __future__ import annotations

from pyfelix import model
from pyfelix.calc.rule_scanner import IPSetData
from pyfelix.dryrun import compute
from pyfelix.resources.loader import load_text
from pyfelix.values import Port
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.rules.policy import (
    RuleContext,
    split_ports,
)
from tests.rules_harness import (
    ALLOW,
    MARKS,
    V4,
    V6,
    render_parsed,
    text,
    with_felix_config,
)
from tests.test_render_kernel import example_resources


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
