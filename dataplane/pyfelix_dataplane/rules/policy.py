"""Policy and profile chains: each Calico rule as iptables matches and mark-setting actions.

Written with Felix's long option names and in Felix's match order, so that a rule's text, and
therefore its ``cali:`` id, is what Felix would program. An Allow sets the accept mark and
returns; a Pass sets the pass mark and returns; a Deny sets the drop mark and drops; a Log logs
and falls through. Where a rule needs an OR (several CIDRs on a side, more ports than one
multiport match holds, numeric and named ports together), it is built from blocks that set the
scratch marks, then the main rule tests them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import attrs

from pyfelix import messages as m
from pyfelix.values import Port
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.matches import match_mark, set_mark
from pyfelix_dataplane.rules.model import Chain, Rule, length_limited

MAX_MULTIPORT_SLOTS = 15
KIND_SHORT = {
    "NetworkPolicy": "np",
    "GlobalNetworkPolicy": "gnp",
    "StagedNetworkPolicy": "snp",
    "StagedGlobalNetworkPolicy": "sgnp",
    "StagedKubernetesNetworkPolicy": "sknp",
    "KubernetesNetworkPolicy": "knp",
    "KubernetesClusterNetworkPolicy": "kcnp",
}


def policy_chain_id(policy: m.PolicyID) -> str:
    """Felix's policy id for chain names: "<kind>/<name>" or "<kind>/<namespace>/<name>"."""
    kind = KIND_SHORT.get(policy.kind, policy.kind)
    return (
        f"{kind}/{policy.namespace}/{policy.name}" if policy.namespace else f"{kind}/{policy.name}"
    )


def policy_chain_name(policy: m.PolicyID, inbound: bool) -> str:
    return length_limited("cali-pi-" if inbound else "cali-po-", policy_chain_id(policy))


def profile_chain_name(profile: str, inbound: bool) -> str:
    return length_limited("cali-pri-" if inbound else "cali-pro-", profile)


def split_ports(ports: Sequence[Port]) -> list[str]:
    """Numeric ports as multiport lists of at most 15 slots (a range takes two)."""
    splits: list[list[str]] = [[]]
    used = 0
    for port in ports:
        cost = 1 if port.min_port == port.max_port else 2
        if used + cost > MAX_MULTIPORT_SLOTS:
            splits.append([])
            used = 0
        splits[-1].append(str(port))
        used += cost
    return [",".join(s) for s in splits if s]


def _protocol(protocol: int | str | None) -> str:
    return "" if protocol is None else str(protocol)


def _family(cidr: str) -> int:
    return 6 if ":" in cidr else 4


@attrs.frozen(cache_hash=True)
class RuleContext:
    """What rendering one rule needs: IP version, marks and how to name IP sets."""

    version: int
    marks: MarkBits
    log_prefix: str = "calico-packet"
    #: IptablesFilterDenyAction for the filter table's policies (raw and mangle: DROP).
    deny: str = "DROP"
    #: LogActionRateLimit and LogActionRateLimitBurst: Log rules under ``-m limit`` if set.
    log_rate: str = ""
    log_burst: int = 5


_LOG_SPECIFIER = re.compile("%[tknp]")


def log_prefix(prefix: str, kind: str, name: str, namespace: str, tier: str) -> str:
    """LogPrefix with Felix's specifiers replaced: %t the tier, %k the kind's short name,
    %n the name, %p namespace/name (the name for cluster-wide kinds)."""
    if "%" not in prefix:
        return prefix
    values = {
        "%t": tier,
        "%k": kind,
        "%n": name,
        "%p": f"{namespace}/{name}" if namespace else name,
    }
    return _LOG_SPECIFIER.sub(lambda found: values[found.group()], prefix)


def _set_names(set_ids: Sequence[str], version: int) -> list[str]:
    return [ipset_name(set_id, version) for set_id in set_ids]


#: Rendered rules kept by value: policies repeat rules (the same peers, ports and action in
#: many namespaces' policies), and a kept rule's text is built once for all its chains.
RULE_CACHE = 32768


@functools.lru_cache(maxsize=RULE_CACHE)
def render_rule(parsed: m.ParsedRule, ctx: RuleContext) -> tuple[Rule, ...]:
    """The iptables rules for one Calico rule (none when it cannot match this IP version)."""
    return tuple(_render_rule(parsed, ctx))


def _render_rule(parsed: m.ParsedRule, ctx: RuleContext) -> list[Rule]:
    rule, sets = parsed.rule, parsed.ipsets
    version = ctx.version
    if rule.ip_version not in (None, version):
        return []
    if (rule.protocol in ("icmp", 1) and version == 6) or (
        rule.protocol in ("icmpv6", 58) and version == 4
    ):
        return []
    nets = {
        name: tuple(c for c in getattr(rule, name) if _family(c) == version)
        for name in ("src_nets", "dst_nets", "not_src_nets", "not_dst_nets")
    }
    for side in ("src_nets", "dst_nets"):
        if getattr(rule, side) and not nets[side]:
            return []
    marks = ctx.marks
    protocol = _protocol(rule.protocol)
    src_sel_sets, src_named = sets.src, sets.src_named_ports
    dst_sel_sets, dst_named = sets.dst, sets.dst_named_ports
    src_numeric = split_ports([p for p in rule.src_ports if not p.is_named])
    dst_numeric = split_ports([p for p in rule.dst_ports if not p.is_named])

    positive: list[mt.Criterion] = []
    if protocol:
        positive.append(mt.Protocol(protocol))
    # Each block is an OR of its alternatives; each alternative is criteria ANDed.
    blocks: list[list[mt.Match]] = []

    def port_alternative(option: mt.Criterion) -> mt.Match:
        return (mt.Protocol(protocol), option) if protocol else (option,)

    if len(nets["src_nets"]) == 1:
        positive.append(mt.Net("src", nets["src_nets"][0]))
    elif nets["src_nets"]:
        blocks.append([(mt.Net("src", c),) for c in nets["src_nets"]])
    positive.extend(mt.InSet(n, "src") for n in _set_names(src_sel_sets, version))
    src_port_options: list[mt.Criterion] = [mt.Ports("src", p) for p in src_numeric]
    src_port_options += [mt.InSet(n, "src,src") for n in _set_names(src_named, version)]
    if len(src_port_options) == 1:
        positive.append(src_port_options[0])
    elif src_port_options:
        blocks.append([port_alternative(o) for o in src_port_options])
    if len(nets["dst_nets"]) == 1:
        positive.append(mt.Net("dst", nets["dst_nets"][0]))
    elif nets["dst_nets"]:
        blocks.append([(mt.Net("dst", c),) for c in nets["dst_nets"]])
    positive.extend(mt.InSet(n, "dst") for n in _set_names(dst_sel_sets, version))
    if sets.dst_service:
        positive.append(mt.InSet(ipset_name(sets.dst_service, version), "dst,dst"))
    if sets.src_service:
        positive.append(mt.InSet(ipset_name(sets.src_service, version), "src"))
    dst_port_options: list[mt.Criterion] = [mt.Ports("dst", p) for p in dst_numeric]
    dst_port_options += [mt.InSet(n, "dst,dst") for n in _set_names(dst_named, version)]
    if len(dst_port_options) == 1:
        positive.append(dst_port_options[0])
    elif dst_port_options:
        blocks.append([port_alternative(o) for o in dst_port_options])
    if rule.icmp_type is not None:
        positive.append(mt.Icmp(version, rule.icmp_type, rule.icmp_code))

    negative: list[mt.Criterion] = []
    if rule.not_protocol is not None:
        negative.append(mt.Protocol(str(rule.not_protocol), negate=True))
    not_blocks: list[mt.Criterion] = []
    sides: tuple[tuple[str, str, mt.End], ...] = (
        ("not_src_nets", "src_nets", "src"),
        ("not_dst_nets", "dst_nets", "dst"),
    )
    for side, positive_side, end in sides:
        # iptables takes one -s/-d per rule: a negated CIDR shares it only when alone.
        if len(nets[side]) == 1 and not nets[positive_side]:
            negative.append(mt.Net(end, nets[side][0], negate=True))
        else:
            not_blocks.extend(mt.Net(end, c) for c in nets[side])
    for name in _set_names(sets.not_src, version):
        negative.append(mt.InSet(name, "src", negate=True))
    for split in split_ports([p for p in rule.not_src_ports if not p.is_named]):
        negative.append(mt.Ports("src", split, negate=True))
    for split in split_ports([p for p in rule.not_dst_ports if not p.is_named]):
        negative.append(mt.Ports("dst", split, negate=True))
    for name in _set_names(sets.not_dst, version):
        negative.append(mt.InSet(name, "dst", negate=True))
    not_dst_named = _set_names(sets.not_dst_named_ports, version)
    negative.extend(mt.InSet(n, "dst,dst", negate=True) for n in not_dst_named)
    if rule.not_icmp_type is not None:
        negative.append(mt.Icmp(version, rule.not_icmp_type, rule.not_icmp_code, negate=True))

    out: list[Rule] = []
    if blocks or not_blocks:
        all_blocks, this_block = marks.scratch0, marks.scratch1
        first_value = 0 if blocks else all_blocks
        out.append(Rule(action=set_mark(first_value, all_blocks | this_block)))
        for index, block in enumerate(blocks):
            if index == 0:
                out.extend(Rule(m_, set_mark(all_blocks)) for m_ in block)
                continue
            out.append(Rule(action=set_mark(0, this_block)))
            out.extend(Rule(m_, set_mark(this_block)) for m_ in block)
            out.append(Rule((match_mark(0, this_block),), set_mark(0, all_blocks)))
        out.extend(Rule((m_,), set_mark(0, all_blocks)) for m_ in not_blocks)
        positive.append(match_mark(all_blocks))
    match = (*positive, *negative)
    action = rule.action
    if action == "allow":
        out.append(Rule(match, set_mark(marks.accept)))
        out.append(Rule((match_mark(marks.accept),), mt.RETURN))
    elif action == "next-tier":
        out.append(Rule(match, set_mark(marks.pass_)))
        out.append(Rule((match_mark(marks.pass_),), mt.RETURN))
    elif action == "deny":
        out.append(Rule(match, set_mark(marks.drop)))
        out.append(Rule((match_mark(marks.drop),), mt.Jump(ctx.deny)))
    elif action == "log":
        if ctx.log_rate:
            match = (mt.Limit(ctx.log_rate, ctx.log_burst), *match)
        out.append(Rule(match, mt.Log(f"{ctx.log_prefix}: ", 5)))
    return out


def rules_chain(
    name: str, rules: Sequence[m.ParsedRule], ctx: RuleContext, description: str
) -> Chain:
    """A policy or profile chain: the rules in order, a trailing RETURN dropped (it is implied),
    and the first rule commented with what the chain is."""
    out: list[Rule] = []
    for rule in rules:
        out.extend(render_rule(rule, ctx))
    if out and out[-1].action == mt.RETURN:
        out.pop()
    if not out:
        return Chain(name, (Rule(comment=(description,)),))
    first = out[0]
    out[0] = attrs.evolve(first, comment=(description, *first.comment))
    return Chain(name, tuple(out))


# Rendering is a pure function of frozen values; policies rarely change between applies, so
# their chains are cached (bounded: a few thousand policies at most are active on a node).
@functools.lru_cache(maxsize=16384)
def policy_chains(policy: m.ActivePolicyUpdate, ctx: RuleContext) -> list[Chain]:
    pid = policy.id
    label = f"{pid.kind} {pid.namespace + '/' if pid.namespace else ''}{pid.name}"
    short = KIND_SHORT.get(pid.kind, pid.kind)
    prefix = log_prefix(ctx.log_prefix, short, pid.name, pid.namespace, pid.tier)
    ctx = attrs.evolve(ctx, log_prefix=prefix) if prefix != ctx.log_prefix else ctx
    return [
        rules_chain(policy_chain_name(pid, True), policy.inbound, ctx, f"{label} ingress"),
        rules_chain(policy_chain_name(pid, False), policy.outbound, ctx, f"{label} egress"),
    ]


@functools.lru_cache(maxsize=16384)
def profile_chains(profile: m.ActiveProfileUpdate, ctx: RuleContext) -> list[Chain]:
    label = f"Profile {profile.id}"
    prefix = log_prefix(ctx.log_prefix, "pro", profile.id, "", "")
    ctx = attrs.evolve(ctx, log_prefix=prefix) if prefix != ctx.log_prefix else ctx
    return [
        rules_chain(
            profile_chain_name(profile.id, True),
            profile.inbound,
            ctx,
            f"{label} ingress",
        ),
        rules_chain(
            profile_chain_name(profile.id, False),
            profile.outbound,
            ctx,
            f"{label} egress",
        ),
    ]
