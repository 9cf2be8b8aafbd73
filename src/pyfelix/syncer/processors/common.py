"""What every kind family's conversion shares: the (key, value) pair, and the normal forms of
actions, protocols and networks."""

from __future__ import annotations

from collections.abc import Hashable

KV = tuple[Hashable, object | None]


#: Calico's rule actions as Felix's model spells them: one string each for every rule (a
#: lowered copy for each was 5 MB for 100,000 policies).
_ACTIONS = {"Allow": "allow", "Deny": "deny", "Log": "log", "Pass": "next-tier"}


def normalise_action(action: str) -> str:
    return _ACTIONS.get(action) or action.lower()


def normalise_protocol(protocol: int | str | None) -> int | str | None:
    if isinstance(protocol, str):
        return int(protocol) if protocol.isdigit() else protocol.lower()
    return protocol


#: How many converted rules are kept by value (policies repeat their rules: the same one is
#: converted once, and its model value is shared).
