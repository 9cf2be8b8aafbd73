"""What every kind family's conversion shares: the (key, value) pair, and the normal forms of
actions, protocols and networks."""

from __future__ import annotations

from collections.abc import Hashable

from pyfelix.ipnet import canonical_network

KV = tuple[Hashable, object | None]


def normalise_action(action: str) -> str:
    return "next-tier" if action == "Pass" else action.lower()


def normalise_protocol(protocol: int | str | None) -> int | str | None:
    if isinstance(protocol, str):
        return int(protocol) if protocol.isdigit() else protocol.lower()
    return protocol


def _nets(values: tuple[str, ...]) -> tuple[str, ...]:
    """CIDRs or bare IPs, masked; unparsable entries are skipped (validation reports them)."""
    out = []
    for value in values:
        try:
            out.append(canonical_network(value))
        except ValueError:
            continue
    return tuple(out)


#: How many converted rules are kept by value (policies repeat their rules: the same one is
#: converted once, and its model value is shared).
