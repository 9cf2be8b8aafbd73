"""Mark bits carved from IptablesMarkMask, lowest bits first: accept, pass, drop, scratch0,
scratch1 (0x10000, 0x20000, 0x40000, 0x80000, 0x100000 for the default 0xffff0000)."""

from __future__ import annotations

import attrs

from pyfelix.errors import PyfelixError

DEFAULT_MARK_MASK = 0xFFFF0000
_NEEDED = 5


class MarkMaskTooSmall(PyfelixError, ValueError):
    """The configured mask has fewer bits than the rules need."""


@attrs.frozen(cache_hash=True)
class MarkBits:
    accept: int
    pass_: int
    drop: int
    scratch0: int
    scratch1: int
    mask: int

    @classmethod
    def from_mask(cls, mask: int = DEFAULT_MARK_MASK) -> MarkBits:
        bits = [1 << i for i in range(32) if mask & (1 << i)]
        if len(bits) < _NEEDED:
            raise MarkMaskTooSmall(
                f"IptablesMarkMask {mask:#x} has {len(bits)} bits; pyfelix needs {_NEEDED}"
            )
        accept, pass_, drop, scratch0, scratch1 = bits[:_NEEDED]
        return cls(accept, pass_, drop, scratch0, scratch1, mask)

    @property
    def all_used(self) -> int:
        return self.accept | self.pass_ | self.drop | self.scratch0 | self.scratch1


def endpoint_mark_mask(mask: int, wireguard: bool) -> int:
    """Felix's endpoint mark bits (kube-proxy's IPVS mode): every bit of the mask the rules,
    and WireGuard if it is on, leave free."""
    bits = [1 << i for i in range(32) if mask & (1 << i)]
    return sum(bits[_NEEDED + (1 if wireguard else 0) :])


def wireguard_mark(mask: int = DEFAULT_MARK_MASK) -> int:
    """The WireGuard device's firewall mark: the first bit of the mask the rules leave free
    (0x200000 for the default mask); 0 if none is."""
    bits = [1 << i for i in range(32) if mask & (1 << i)]
    return bits[_NEEDED] if len(bits) > _NEEDED else 0
