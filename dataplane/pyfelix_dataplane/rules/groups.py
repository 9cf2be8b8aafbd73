"""Policy groups, as Felix renders them: policies next to each other in a tier that share a
selector form a group; a group of more than one policy gets its own chain (cali-gi-<id> for
ingress, cali-go-<id> for egress) and endpoint chains jump to it once instead of to each policy.

Sharing a selector means every endpoint one of the policies applies to gets the whole group,
so endpoints on the same policy set share the chain: 200 endpoints and 10,000 policies with
one selector are 200 jumps and a 10,000-rule chain, not 2,000,000 jumps. Within the group
chain, a policy is only jumped to if none before it set the accept or pass mark, and every
fifth jump is preceded by a return when one has.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Mapping, Sequence
from functools import cached_property

import attrs

from pyfelix import messages as m
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.matches import match_mark
from pyfelix_dataplane.rules.model import Chain, Rule
from pyfelix_dataplane.rules.policy import policy_chain_name

#: iptables' chain name limit less the prefix.
MAX_UID_LENGTH = 28 - len("cali-gi-")
#: A return on a verdict every this many policy jumps (Felix's returnStride).
RETURN_STRIDE = 5


@attrs.frozen(eq=False)
class PolicyGroup:
    """Equal by its uid, which digests all it holds: a render's groups are new objects, and
    the endpoint chain cache compares them with the last render's, a field-by-field compare
    that cost seconds at 10,000 policies in a group."""

    inbound: bool
    policies: tuple[m.PolicyID, ...]
    selector: str

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PolicyGroup):
            return NotImplemented
        return self is other or (
            self.inbound == other.inbound
            and self.selector == other.selector
            and len(self.policies) == len(other.policies)
            and self.uid == other.uid
        )

    def __hash__(self) -> int:
        return hash(self.uid)

    @cached_property
    def uid(self) -> str:
        """Felix's: SHA3-224 over selector, direction, count and each policy id, a line each."""
        lines = [self.selector, "inbound" if self.inbound else "outbound", str(len(self.policies))]
        lines += [
            f"{{Name: {p.name}, Namespace: {p.namespace}, Kind: {p.kind}}}" for p in self.policies
        ]
        digest = hashlib.sha3_224("".join(f"{line}\n" for line in lines).encode()).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")[:MAX_UID_LENGTH]

    @property
    def chain_name(self) -> str:
        return f"cali-g{'i' if self.inbound else 'o'}-{self.uid}"

    @property
    def inlined(self) -> bool:
        """Too small for a chain of its own: its policy is jumped to directly."""
        return len(self.policies) <= 1


@attrs.frozen(cache_hash=True)
class TierGroups:
    """A tier as an endpoint chain renders it: its policy groups per direction."""

    name: str
    default_action: str
    ingress: tuple[PolicyGroup, ...] = ()
    egress: tuple[PolicyGroup, ...] = ()

    def groups(self, inbound: bool) -> tuple[PolicyGroup, ...]:
        return self.ingress if inbound else self.egress


def group_policies(
    policies: Sequence[m.PolicyID], selectors: Mapping[m.PolicyID, str], inbound: bool
) -> tuple[PolicyGroup, ...]:
    """Runs of consecutive policies with the same selector, in order."""
    groups: list[tuple[str, list[m.PolicyID]]] = []
    for policy in policies:
        selector = selectors.get(policy, "")
        if groups and groups[-1][0] == selector:
            groups[-1][1].append(policy)
        else:
            groups.append((selector, [policy]))
    return tuple(PolicyGroup(inbound, tuple(ids), selector) for selector, ids in groups)


def tier_groups(
    tiers: Sequence[m.TierInfo], selectors: Mapping[m.PolicyID, str]
) -> tuple[TierGroups, ...]:
    return tuple(
        TierGroups(
            tier.name,
            tier.default_action,
            group_policies(tier.ingress_policies, selectors, True),
            group_policies(tier.egress_policies, selectors, False),
        )
        for tier in tiers
    )


def group_targets(group: PolicyGroup) -> list[str]:
    """The chains an endpoint chain jumps to for this group."""
    if group.inlined:
        return [policy_chain_name(p, group.inbound) for p in group.policies]
    return [group.chain_name]


#: Group chains are rebuilt on every apply from the same groups: most come from this cache.
GROUP_CHAIN_CACHE = 16384


@functools.lru_cache(maxsize=GROUP_CHAIN_CACHE)
def group_chain(group: PolicyGroup, marks: MarkBits) -> Chain:
    verdict = marks.accept | marks.pass_
    rules: list[Rule] = []
    for index, policy in enumerate(group.policies):
        if index and index % RETURN_STRIDE == 0:
            rules.append(
                Rule((mt.Mark(0, verdict, negate=True),), mt.RETURN, ("Return on verdict",))
            )
        match: mt.Match = () if index % RETURN_STRIDE == 0 else (match_mark(0, verdict),)
        rules.append(Rule(match, mt.Jump(policy_chain_name(policy, group.inbound))))
    return Chain(group.chain_name, tuple(rules))


def group_chains(
    tiers: Sequence[TierGroups],
    marks: MarkBits,
    seen: set[str],
    *,
    ingress: bool = True,
    egress: bool = True,
) -> list[Chain]:
    """The chains of the groups in ``tiers`` (of the directions asked) not yet in ``seen``
    (which they are added to)."""
    chains = []
    for tier in tiers:
        groups = (*(tier.ingress if ingress else ()), *(tier.egress if egress else ()))
        for group in groups:
            if group.inlined or group.chain_name in seen:
                continue
            seen.add(group.chain_name)
            chains.append(group_chain(group, marks))
    return chains


def selectors_of(policies: Mapping[m.PolicyID, m.ActivePolicyUpdate]) -> dict[m.PolicyID, str]:
    return {pid: update.original_selector for pid, update in policies.items()}
