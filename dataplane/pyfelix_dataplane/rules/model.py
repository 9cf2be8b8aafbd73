"""Chains and rules as data, and their iptables-restore text.

A rule is a match string plus an action; its comment (``cali:<hash>``) chains the hash of the
previous rule in the same chain with this rule's text, as Felix does, so a rule's id changes when
anything before it changes, and the Linux driver can tell which chains differ from the kernel's.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Iterable, Sequence

import attrs

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


@attrs.frozen
class Rule:
    match: str = ""
    action: str = ""
    comment: tuple[str, ...] = ()

    @functools.cached_property
    def body(self) -> str:
        """Its text (rule_body); once per rule value, as both its id and its line need it."""
        return rule_body(self.match, self.action, self.comment)


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
    lines = [f"*{table}"]
    lines.extend(f":{chain.name} - [0:0]" for chain in sorted(chains, key=lambda c: c.name))
    for chain in sorted(chains, key=lambda c: c.name):
        lines.extend(chain.lines())
    lines.extend(hooks)
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"
