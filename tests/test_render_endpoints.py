"""Endpoint chains, policy groups and the dispatch trees, for workloads and host endpoints, as
Felix lays them out."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix.dryrun import compute
from pyfelix.resources.loader import load_text
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import dispatch_chains, endpoint_chain
from pyfelix_dataplane.rules.groups import group_chain, group_policies, group_targets, tier_groups
from pyfelix_dataplane.rules.model import Rule
from pyfelix_dataplane.rules.policy import (
    policy_chain_name,
)
from pyfelix_dataplane.rules.render import render
from tests.rules_harness import (
    MARKS,
    rendered_filter_with,
    text,
    with_felix_config,
)
from tests.test_render_kernel import example_resources


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
