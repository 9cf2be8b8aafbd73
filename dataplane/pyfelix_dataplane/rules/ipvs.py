"""kube-proxy's IPVS mode, as Felix polices it (KubeIPVSSupportEnabled, on where kube-ipvs0 is).

IPVS forwards a connection to a service inside the INPUT and OUTPUT hooks, never through
FORWARD, so the forward chains never see it and the workload's policy would not apply. Felix
tells such packets apart in INPUT (``cali-forward-check``: not addressed to this host, or to
a NodePort of it, and not a reply) and marks them with an id of the endpoint they came from
(``cali-set-endpoint-mark`` dispatches on the interface to ``cali-sm-<iface>``; a packet from
no endpoint gets the non-Calico mark). In OUTPUT the mark sends them to
``cali-forward-endpoint-mark``, which applies the source endpoint's egress policy (dispatched
on the mark, ``cali-from-endpoint-mark``) and the destination's ingress policy, as FORWARD
would have.

The endpoint ids live in the mark bits the rules leave free (after accept, pass, drop, the two
scratch bits and WireGuard's), the lowest of them reserved for the non-Calico mark. Each
interface's id is Felix's: the FNV-1 hash of its name, probed forward past ids taken. Felix
hands ids out as endpoints arrive; here they are handed out in name order on every render, so
two interfaces whose hashes collide may swap ids where Felix would keep them. A mark lives
only while one packet crosses INPUT and OUTPUT, so a changed id costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.endpoints import dispatch_tree, endpoint_chain_name
from pyfelix_dataplane.rules.ipsets import THIS_HOST, ipset_name
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.policy import MAX_MULTIPORT_SLOTS
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState

FORWARD_CHECK = "cali-forward-check"
FORWARD_ENDPOINT_MARK = "cali-forward-endpoint-mark"
SET_ENDPOINT_MARK = "cali-set-endpoint-mark"
FROM_ENDPOINT_MARK = "cali-from-endpoint-mark"
SET_MARK_PREFIX = "cali-sm-"

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1_32(text: str) -> int:
    """FNV-1 (multiply, then xor), 32 bits: Go's ``hash/fnv.New32``."""
    value = _FNV_OFFSET
    for byte in text.encode():
        value = (value * _FNV_PRIME) & 0xFFFFFFFF
        value ^= byte
    return value


def _mask_bits(mask: int) -> list[int]:
    return [1 << i for i in range(32) if mask & (1 << i)]


def number_to_mark(number: int, mask: int) -> int:
    """Bit i of ``number`` set as the i-th bit of ``mask`` (Felix's MapNumberToMark)."""
    return sum(bit for i, bit in enumerate(_mask_bits(mask)) if number & (1 << i))


def endpoint_marks(names: Iterable[str], mask: int) -> dict[str, int]:
    """Each interface's endpoint mark under ``mask``: its FNV-1 hash modulo the ids the mask
    holds, probed forward past 0, the non-Calico id (1) and ids taken; an interface with no
    id left gets none (Felix logs the same)."""
    size = 1 << len(_mask_bits(mask))
    taken = {0, 1}
    marks: dict[str, int] = {}
    for name in sorted(set(names)):
        start = fnv1_32(name)
        for step in range(size):
            position = (start + step) % size
            if position not in taken:
                taken.add(position)
                marks[name] = number_to_mark(position, mask)
                break
    return marks


def input_rules(mask: int) -> list[Rule]:
    """cali-INPUT's check, before the workload interfaces' rules: a packet IPVS will forward
    is marked and leaves INPUT."""
    return [
        Rule(action=mt.SetMark(0, mask)),
        Rule(action=mt.Jump(FORWARD_CHECK)),
        Rule((mt.Mark(0, mask, negate=True),), mt.RETURN),
    ]


def output_rule(mask: int) -> Rule:
    """cali-OUTPUT's diversion of what INPUT marked (a goto: its RETURN ends OUTPUT's turn)."""
    return Rule((mt.Mark(0, mask, negate=True),), mt.Goto(FORWARD_ENDPOINT_MARK))


def mangle_postrouting_rule(mask: int) -> Rule:
    """mangle cali-POSTROUTING: what IPVS forwarded gets no host endpoint egress policy."""
    return Rule((mt.Mark(0, mask, negate=True),), mt.RETURN)


def _port_splits(ranges: Sequence[tuple[int, int]]) -> list[str]:
    """NodePort ranges as multiport lists of at most 15 slots (a range takes two)."""
    splits: list[list[str]] = [[]]
    used = 0
    for low, high in ranges:
        cost = 1 if low == high else 2
        if used + cost > MAX_MULTIPORT_SLOTS:
            splits.append([])
            used = 0
        splits[-1].append(str(low) if low == high else f"{low}:{high}")
        used += cost
    return [",".join(split) for split in splits if split]


def forward_check_chain(settings: Settings, version: int) -> Chain:
    """What INPUT hands to IPVS: not a reply, and to a NodePort of this host or to an address
    not this host's (a service address, on kube-ipvs0)."""
    this_host = ipset_name(THIS_HOST, version)
    rules = [Rule((mt.ConnState("RELATED,ESTABLISHED"),), mt.RETURN)]
    for ports in _port_splits(settings.node_port_ranges):
        rules += [
            Rule(
                (mt.Protocol(protocol), mt.Ports("dst", ports), mt.InSet(this_host, "dst")),
                mt.Goto(SET_ENDPOINT_MARK),
                ("To kubernetes NodePort service",),
            )
            for protocol in ("tcp", "udp")
        ]
    rules.append(
        Rule(
            (mt.InSet(this_host, "dst", negate=True),),
            mt.Jump(SET_ENDPOINT_MARK),
            ("To kubernetes service",),
        )
    )
    return Chain(FORWARD_CHECK, tuple(rules))


def forward_endpoint_mark_chain(settings: Settings) -> Chain:
    """OUTPUT's treatment of a packet IPVS forwarded: the source endpoint's egress policy (by
    its mark), then the destination's ingress policy, as FORWARD's would be."""
    mask, non_cali = settings.endpoint_mark, settings.non_cali_endpoint_mark
    return Chain(
        FORWARD_ENDPOINT_MARK,
        (
            Rule((mt.Mark(non_cali, mask, negate=True),), mt.Jump(FROM_ENDPOINT_MARK)),
            *(
                Rule((mt.Interface("out", f"{prefix}+"),), mt.Jump("cali-to-wl-dispatch"))
                for prefix in settings.interface_prefixes
            ),
            Rule(action=mt.Jump("cali-to-hep-forward")),
            Rule(action=mt.SetMark(0, mask)),
            Rule(
                (mt.match_mark(settings.marks.accept),),
                mt.Jump(settings.allow),
                ("Policy explicitly accepted packet.",),
            ),
        ),
    )


def endpoint_mark_chains(
    settings: Settings, workloads: Sequence[str], hosts: Sequence[str]
) -> list[Chain]:
    """The endpoints' set-mark chains and the two dispatch chains: by interface to set the
    mark, by mark to the endpoint's egress chain (a workload's cali-fw-, a host endpoint's
    cali-fhfw-)."""
    mask, non_cali = settings.endpoint_mark, settings.non_cali_endpoint_mark
    marks = endpoint_marks([*workloads, *hosts], mask)
    chains = [
        Chain(
            endpoint_chain_name(SET_MARK_PREFIX, name),
            (Rule(action=mt.SetMark(marks[name], mask)),) if name in marks else (),
        )
        for name in sorted({*workloads, *hosts})
    ]
    root: list[Rule] = []
    for infix, names in (("-wep", workloads), ("-hep", hosts)):
        targets = {name: endpoint_chain_name(SET_MARK_PREFIX, name) for name in names}
        rules, children = dispatch_tree(SET_ENDPOINT_MARK, targets, "in", infix=infix)
        root += rules
        chains += children
    root += [
        Rule((mt.Interface("in", f"{prefix}+"),), mt.Jump(settings.deny), ("Unknown endpoint",))
        for prefix in settings.interface_prefixes
    ]
    root.append(Rule(action=mt.SetMark(non_cali, mask), comment=("Non-Cali endpoint mark",)))
    from_mark = [
        Rule((mt.Mark(marks[name], mask),), mt.Goto(endpoint_chain_name(prefix, name)))
        for prefix, names in (("cali-fw-", workloads), ("cali-fhfw-", hosts))
        for name in sorted(set(names))
        if name in marks
    ]
    from_mark.append(Rule(action=mt.Jump(settings.deny), comment=("Unknown interface",)))
    return [
        *chains,
        Chain(SET_ENDPOINT_MARK, tuple(root)),
        Chain(FROM_ENDPOINT_MARK, tuple(from_mark)),
    ]


def ipvs_filter_chains(dp: NodeState, settings: Settings, version: int) -> list[Chain]:
    """The filter table's IPVS chains; none unless the node runs kube-proxy in IPVS mode.
    Host endpoints count where they are placed on an interface (an all-interfaces one is
    not an endpoint of its own here: what it governs gets the non-Calico mark)."""
    if not settings.endpoint_mark:
        return []
    workloads = [update.endpoint.name for update in dp.workloads.values()]
    hosts = [u.endpoint.name for u in dp.hosts.values() if u.endpoint.name not in ("", "*")]
    return [
        forward_check_chain(settings, version),
        forward_endpoint_mark_chain(settings),
        *endpoint_mark_chains(settings, workloads, hosts),
    ]
