"""The packet tracer against iptables' traversal rules, on small hand-made chains."""

from __future__ import annotations

import pytest

from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.trace import Packet, TraceLoop, Tracer

PACKET = Packet("10.0.0.1", "10.0.0.2", "tcp", 80, in_interface="cali1", out_interface="cali2")


def trace(chains: list[Chain], entry: list[Rule], packet: Packet = PACKET) -> tuple[str, list[str]]:
    sets = {
        "cali40s:web": ("hash:net", frozenset({"10.0.0.0/30"})),
        "cali40n:http": ("hash:ip,port", frozenset({"10.0.0.2,tcp:80"})),
    }
    result = Tracer.of(chains, sets).run(entry, packet, "FORWARD")
    return result.verdict, [f"{step.chain}:{step.index}" for step in result.steps]


def test_a_jump_comes_back_and_a_goto_returns_to_the_caller_s_caller() -> None:
    chains = [
        Chain("a", (Rule(action=mt.Goto("b")), Rule(action=mt.DROP))),
        Chain("b", (Rule(action=mt.RETURN), Rule(action=mt.DROP))),
    ]
    verdict, steps = trace(chains, [Rule(action=mt.Jump("a")), Rule(action=mt.ACCEPT)])
    # b's RETURN goes back past a (entered by goto) to FORWARD's next rule.
    assert (verdict, steps) == ("ACCEPT", ["FORWARD:0", "a:0", "b:0", "FORWARD:1"])


def test_marks_carry_decisions_between_chains() -> None:
    chains = [Chain("policy", (Rule((mt.Protocol("6"),), mt.SetMark(0x10000, 0x10000)),))]
    entry = [
        Rule(action=mt.Jump("policy")),
        Rule((mt.Mark(0x10000, 0x10000),), mt.ACCEPT),
        Rule(action=mt.DROP),
    ]
    assert trace(chains, entry)[0] == "ACCEPT"
    udp = Packet("10.0.0.1", "10.0.0.2", "udp", 80)
    assert trace(chains, entry, udp)[0] == "DROP"


@pytest.mark.parametrize(
    ("criterion", "matched"),
    [
        (mt.InSet("cali40s:web", "src"), True),
        (mt.InSet("cali40s:web", "dst", negate=True), False),
        (mt.InSet("cali40n:http", "dst,dst"), True),
        (mt.Ports("dst", "22,70:90"), True),
        (mt.Ports("dst", "443"), False),
        (mt.Ports("src", "1024:65535"), True),
        (mt.Interface("in", "cali+"), True),
        (mt.Interface("out", "cali1"), False),
        (mt.Net("dst", "10.0.0.0/24", negate=True), False),
        (mt.ConnState("RELATED,ESTABLISHED"), False),
        (mt.ConnState("INVALID", negate=True), True),
        (mt.AddrType("dst", "LOCAL"), False),
        (mt.Protocol("tcp"), True),
        (mt.Protocol("17", negate=True), True),
    ],
)
def test_criteria(criterion: mt.Criterion, matched: bool) -> None:
    entry = [Rule((criterion,), mt.ACCEPT), Rule(action=mt.DROP)]
    assert trace([], entry)[0] == ("ACCEPT" if matched else "DROP")


def test_a_loop_is_reported() -> None:
    chains = [Chain("a", (Rule(action=mt.Jump("a")),))]
    with pytest.raises(TraceLoop):
        trace(chains, [Rule(action=mt.Jump("a"))])
