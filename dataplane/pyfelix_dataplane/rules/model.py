"""Chains and rules as data, and their iptables-restore text.

A rule is its typed criteria and action (matches.py), spelled here for iptables as Felix
spells them, long options in Felix's order; its comment (``cali:<hash>``) chains the hash of the
previous rule in the same chain with this rule's text, as Felix does, so a rule's id changes when
anything before it changes, and the Linux driver can tell which chains differ from the kernel's.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import assert_never

import attrs

from pyfelix_dataplane.rules import matches as mt

MAX_CHAIN_NAME = 28
RULE_HASH_LENGTH = 16
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def length_limited(prefix: str, suffix: str, max_length: int = MAX_CHAIN_NAME) -> str:
    """``prefix + suffix``, or, when too long, ``prefix + "_" + hash`` cut to ``max_length``."""
    suffix = suffix or "_"
    if len(prefix) + len(suffix) > max_length or (
        len(prefix) + len(suffix) == max_length and suffix.startswith("_")
    ):
        digest = base64.urlsafe_b64encode(hashlib.sha256(suffix.encode()).digest()).decode()
        return prefix + "_" + digest.rstrip("=")[: max_length - 1 - len(prefix)]
    return prefix + suffix


def rule_ids(chain: str, bodies: Iterable[str]) -> list[str]:
    """Felix's rule ids for the rule bodies of ``chain``: a SHA-224 chain seeded with the chain
    name, each step hashing the previous raw digest and ``-A <chain> HASH <rule>``; the id is
    16 base64url characters. So a rule's id changes whenever anything before it changes."""
    hashes = []
    digest = hashlib.sha224(chain.encode()).digest()
    prefix = f"-A {chain} HASH "
    # 12 bytes are exactly the 16 base64 characters of the id, with no padding.
    id_bytes = RULE_HASH_LENGTH * 3 // 4
    for body in bodies:
        digest = hashlib.sha224(digest + (prefix + body).rstrip().encode()).digest()
        encoded = binascii.b2a_base64(digest[:id_bytes], newline=False)
        hashes.append(encoded.translate(_URLSAFE).decode())
    return hashes


def rule_body(match: str, action: str, comment: Iterable[str]) -> str:
    """Comments first, then the match, then the action (Felix's order)."""
    parts = [f'-m comment --comment "{c}"' for c in comment]
    if match:
        parts.append(match)
    if action:
        parts.append(action)
    return " ".join(parts)


def _bits(value: int, mask: int) -> str:
    return f"{value:#x}/{mask:#x}" if value else f"0/{mask:#x}"


def _not(negate: bool) -> str:
    return "! " if negate else ""


def criterion_text(c: mt.Criterion) -> str:
    """One criterion as iptables is given it."""
    match c:
        case mt.Protocol(name, negate):
            return f"{_not(negate)}-p {name}"
        case mt.Net(end, cidr, negate):
            return f"{_not(negate)}--{'source' if end == 'src' else 'destination'} {cidr}"
        case mt.InSet(name, flags, negate):
            return f"-m set {_not(negate)}--match-set {name} {flags}"
        case mt.Ports(end, ports, negate):
            which = "--source-ports" if end == "src" else "--destination-ports"
            return f"-m multiport {_not(negate)}{which} {ports}"
        case mt.Port(end, port):
            return f"--{'sport' if end == 'src' else 'dport'} {port}"
        case mt.Interface(direction, name, negate):
            return f"{_not(negate)}--{direction}-interface {name}"
        case mt.Mark(value, mask, negate):
            return f"-m mark {_not(negate)}--mark {_bits(value, mask)}"
        case mt.ConnState(states, negate):
            return f"-m conntrack {_not(negate)}--ctstate {states}"
        case mt.AddrType(end, kind, negate, limit_iface_out):
            limit = " --limit-iface-out" if limit_iface_out else ""
            return f"-m addrtype {_not(negate)}--{end}-type {kind}{limit}"
        case mt.Icmp(version, icmp_type, code, negate):
            module, option = ("icmp", "--icmp-type") if version == 4 else ("icmp6", "--icmpv6-type")
            detail = f"/{code}" if code is not None else ""
            return f"-m {module} {_not(negate)}{option} {icmp_type}{detail}"
        case mt.Limit(rate, burst):
            return f"-m limit --limit {rate}" + (f" --limit-burst {burst}" if burst else "")
        case mt.ReversePath(invert):
            return f"-m rpfilter {'--invert ' if invert else ''}--validmark"
        case _:
            assert_never(c)


def match_text(match: mt.Match) -> str:
    return " ".join(criterion_text(c) for c in match)


def action_text(action: mt.Action | None) -> str:
    """The action as iptables is given it (``--jump``/``--goto`` and the target's options)."""
    match action:
        case None:
            return ""
        case mt.Jump(target):
            return f"--jump {target}"
        case mt.Goto(target):
            return f"--goto {target}"
        case mt.SetMark(value, mask):
            return f"--jump MARK --set-mark {_bits(value, mask)}"
        case mt.Masquerade(to_ports, random_fully):
            ports = f" --to-ports {to_ports}" if to_ports else ""
            return f"--jump MASQUERADE{ports}{' --random-fully' if random_fully else ''}"
        case mt.Snat(to, random_fully):
            return f"--jump SNAT --to-source {to}{' --random-fully' if random_fully else ''}"
        case mt.Dnat(to):
            return f"--jump DNAT --to-destination {to}"
        case mt.Log(prefix, level):
            return f'--jump LOG --log-prefix "{prefix}" --log-level {level}'
        case _:
            assert_never(action)


@attrs.frozen(cache_hash=True)
class Rule:
    """A rule of a chain: all of ``match`` must hold for ``action``; the comments follow its
    id on its line."""

    match: mt.Match = ()
    action: mt.Action | None = None
    comment: tuple[str, ...] = ()

    @functools.cached_property
    def body(self) -> str:
        """Its iptables text (rule_body); once per rule value, as both its id and its line
        need it."""
        return rule_body(match_text(self.match), action_text(self.action), self.comment)


@attrs.frozen
class Chain:
    name: str
    rules: tuple[Rule, ...] = ()

    @functools.cached_property
    def hashes(self) -> tuple[str, ...]:
        """The rule ids, computed once per chain value."""
        return tuple(self.rule_hashes())

    def rule_hashes(self) -> list[str]:
        return rule_ids(self.name, (rule.body for rule in self.rules))

    def lines(self) -> list[str]:
        head = f"-A {self.name} -m comment --comment "
        return [
            f'{head}"cali:{rule_hash}" {rule.body}'
            for rule, rule_hash in zip(self.rules, self.hashes, strict=True)
        ]


def restore_script(table: str, chains: Sequence[Chain], hooks: Iterable[str] = ()) -> str:
    """An iptables-restore payload for one table: declare every chain, then its rules.

    ``hooks`` are extra lines (e.g. ``-I FORWARD -j cali-FORWARD``) appended after the chains.
    """
    return "".join(restore_pieces(table, chains, hooks))


def restore_pieces(table: str, chains: Sequence[Chain], hooks: Iterable[str] = ()) -> Iterator[str]:
    """``restore_script``'s text in pieces of whole lines, a chain's rules a piece: a writer
    that takes them one by one never holds the whole (18 MB of a cluster's filter table, and
    a line object for each of its rules while it is joined)."""
    ordered = sorted(chains, key=lambda c: c.name)
    yield "".join([f"*{table}\n", *(f":{chain.name} - [0:0]\n" for chain in ordered)])
    for chain in ordered:
        lines = chain.lines()
        if lines:
            yield "\n".join(lines) + "\n"
    yield "".join([*(f"{line}\n" for line in hooks), "COMMIT\n"])
