"""The kernel as the managers see it: one small interface per writer, and the set of them a
driver is given (``Kernel``). Opening the real one, and probing its tools, is
pyfelix_dataplane.linux.opening's.

Each writer's real implementation is tested against the kernel in namespaces; each has a fake in
tests/fake_kernel.py that checks what it is given as the kernel would (a rule naming a set that
does not exist, a member of the wrong family), so the driver's ordering, retry and repair are
tested without root. A writer raises DataplaneWriteError for every failure (commands.writing
maps what fails below it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import NFTablesMode
from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.ipsets import DesiredSets
from pyfelix_dataplane.linux.iptables import (
    Desired,
    Script,
    TableState,
)
from pyfelix_dataplane.linux.mtu import Link
from pyfelix_dataplane.linux.routes import (
    RouteOwnership,
    RouteTarget,
)
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice
from pyfelix_dataplane.linux.wireguard import WireguardDevice
from pyfelix_dataplane.rules.model import Chain

if TYPE_CHECKING:
    from pyfelix_dataplane.linux.nftables import KernelTable
    from pyfelix_dataplane.linux.reading import Reading
    from pyfelix_dataplane.rules.nft import NftTable

log = logging.getLogger(__name__)


class IpsetWriting(Protocol):
    @property
    def oversized(self) -> Mapping[str, int]:
        """The sets wanted with more members than a set may hold, and how many were wanted:
        each is programmed cut (linux/ipsets.py)."""
        ...

    async def apply_updates(
        self,
        desired: DesiredSets,
        refresh: bool = False,
        changed: Collection[str] | None = None,
    ) -> str: ...

    async def apply_deletions(self, desired: DesiredSets) -> list[str]: ...


class TableReader(Protocol):
    """One IP version's tables as the kernel holds them now."""

    async def read(self, tables: Collection[str]) -> dict[str, TableState]: ...


class TableWriting(TableReader, Protocol):
    """One IP version's tables: plan a restore against the kernel as it is (read now, or by
    ``read`` a moment before), then write it."""

    version: int

    async def prepare(
        self, desired: Mapping[str, Desired], states: Mapping[str, TableState] | None = None
    ) -> Script: ...

    async def write(self, script: Script) -> None: ...

    async def differing(self, desired: Mapping[str, Desired]) -> set[str]: ...

    def rewrites(
        self, state: TableState, hooks: Sequence[tuple[str, str]], appends: Sequence[Chain]
    ) -> bool:
        """Whether a plan against ``state`` rewrites a kernel chain (it needs a reading)."""
        ...

    def after(
        self,
        table: str,
        state: TableState,
        chains: Sequence[Chain],
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain] = (),
    ) -> TableState:
        """What the table holds once the plan for the same arguments is written."""
        ...


class NftablesWriting(Protocol):
    """One IP version's ``calico`` table (NFTablesMode): what the kernel holds is known from
    the last write, or read when it is not known (``invalidate``); a write brings it to the
    desired table in one transaction."""

    @property
    def written(self) -> bool:
        """Whether a table is known written (a check has something to compare)."""
        ...

    def invalidate(self) -> None: ...

    def adopt(self, reading: Reading[KernelTable | None]) -> None:
        """A reading made before this writer existed, for its first ``know``."""
        ...

    async def know(self) -> bool:
        """Read the table if it is not known; whether it was read since the last write (then
        every set is compared at the next)."""
        ...

    async def apply(self, desired: NftTable, changed_sets: Collection[str] | None = None) -> bool:
        """Write what differs; whether anything was written. ``changed_sets``: the only sets
        whose elements may have changed since the last apply (None: any)."""
        ...

    async def check(self, attempts: int) -> bool:
        """Read the table back; whether it differs from what was written (then the next apply
        reads it again and repairs it)."""
        ...


class RouteWriting(Protocol):
    async def apply(
        self, desired: Mapping[str, RouteTarget], ownership: RouteOwnership | None = None
    ) -> dict[str, str]: ...


class DeviceWriting(Protocol):
    """The tunnel devices: VXLAN (returns absent/ready/waiting), IPIP (absent/ready) and
    WireGuard (its key)."""

    async def vxlan(
        self, device: VtepDevice | None, remotes: Collection[RemoteVtep], version: int = 4
    ) -> str: ...

    async def ipip(self, device: IpipDevice | None) -> str: ...

    async def wireguard(
        self, device: WireguardDevice | None, previous: str, version: int = 4
    ) -> str: ...


class InterfaceReading(Protocol):
    async def addresses(
        self, named: tuple[str, ...], workload_prefixes: tuple[str, ...]
    ) -> dict[str, frozenset[str]]: ...

    def flags(self, name: str) -> tuple[int, int] | None: ...

    async def links(self) -> list[Link]:
        """(name, MTU, running) of every interface, for MTU detection."""
        ...


@attrs.define(eq=False)
class Kernel:
    """Everything the driver writes and reads, for the IP versions it programs."""

    ipsets: IpsetWriting
    tables: dict[int, TableWriting]
    routes: RouteWriting
    devices: DeviceWriting
    interfaces: InterfaceReading
    #: Calls back with an interface name on every link or address change, until cancelled.
    watch: Callable[[Callable[[str], None]], Awaitable[None]]
    description: str = ""
    #: NFTablesMode: the ``calico`` table of each IP version (None: the iptables mode).
    nftables: dict[int, NftablesWriting] | None = None
    #: Removes what the other mode (iptables or nftables) left, once this mode's first
    #: apply is in place; None: nothing to remove (a fake kernel).
    remove_other_mode: Callable[[], Awaitable[None]] | None = None
    #: NFTablesMode Auto: whether kube-proxy runs in nftables mode now (Felix re-checks
    #: every 15 s and restarts when it changes); None: the mode does not follow it.
    kube_proxy_nftables: Callable[[], Awaitable[bool]] | None = None


@attrs.frozen
class KernelProbe:
    """What the node's tools say before anything is written: the iptables backend in use and
    whether the nftables mode is wanted, for the two settings that decide them. Read-only, so
    the driver probes with the start-up configuration beside the first read, as Felix detects
    its backend when its dataplane starts: with kube-proxy's rules on the node, the two
    iptables-save runs of the detection take a while."""

    iptables_backend: str
    nftables_mode: NFTablesMode
    backend: str
    nftables: bool
    #: The backend's whole save output per IP version, where the detection read it.
    saved: Mapping[int, str] = attrs.field(factory=dict, eq=False, repr=False)

    def answers(self, config: FelixConfig) -> bool:
        """Whether this probe was made for ``config``'s settings."""
        return (self.iptables_backend, self.nftables_mode) == (
            config.iptables_backend,
            config.nftables_mode,
        )


class NftReader(Protocol):
    """One IP version's ``calico`` table as the kernel holds it now (None: there is none)."""

    async def read(self) -> KernelTable | None: ...


@attrs.frozen
class EarlyReaders:
    """What the kernel opened with a configuration and a probe will program, per IP version,
    to be read before then: its iptables tables, or in the nftables mode its tables."""

    tables: Mapping[int, TableReader] = attrs.Factory(dict)
    nftables: Mapping[int, NftReader] = attrs.Factory(dict)
