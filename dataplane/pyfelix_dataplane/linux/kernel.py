"""The kernel as the managers see it: one small interface per writer, and the Linux set of them.

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
import trio

from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import ChainInsertMode, IPForwarding, NFTablesMode
from pyfelix_dataplane.linux.commands import available, run
from pyfelix_dataplane.linux.host_endpoints import interface_addresses
from pyfelix_dataplane.linux.ipip import IpipDevice, sync_ipip
from pyfelix_dataplane.linux.ipsets import DesiredSets, IpsetWriter
from pyfelix_dataplane.linux.iptables import (
    Desired,
    IptablesWriter,
    SavedTables,
    Script,
    TableState,
    detect_backend,
)
from pyfelix_dataplane.linux.monitor import watch_interfaces
from pyfelix_dataplane.linux.mtu import Link, read_links
from pyfelix_dataplane.linux.routes import (
    RouteOwnership,
    RouteTarget,
    RouteWriter,
    link_flags,
    set_sysctl,
)
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice, sync_vxlan
from pyfelix_dataplane.linux.wireguard import WireguardDevice, sync_wireguard
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.render import TABLES, ip_versions

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


@attrs.define
class LinuxDevices:
    async def vxlan(
        self, device: VtepDevice | None, remotes: Collection[RemoteVtep], version: int = 4
    ) -> str:
        return await trio.to_thread.run_sync(sync_vxlan, device, remotes, version)

    async def ipip(self, device: IpipDevice | None) -> str:
        return await trio.to_thread.run_sync(sync_ipip, device)

    async def wireguard(
        self, device: WireguardDevice | None, previous: str, version: int = 4
    ) -> str:
        return await trio.to_thread.run_sync(sync_wireguard, device, previous, version)


@attrs.define
class LinuxInterfaces:
    async def addresses(
        self, named: tuple[str, ...], workload_prefixes: tuple[str, ...]
    ) -> dict[str, frozenset[str]]:
        return await trio.to_thread.run_sync(interface_addresses, named, workload_prefixes)

    def flags(self, name: str) -> tuple[int, int] | None:
        return link_flags(name)

    async def links(self) -> list[Link]:
        return await trio.to_thread.run_sync(read_links)


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


def configure_kernel(config: FelixConfig) -> None:
    """Felix's kernel settings at dataplane start (int_dataplane's configureKernel): global
    IPv4 forwarding, and IPv6's when IPv6 is on, unless IPForwarding is Disabled (then left as
    they are); conntrack's packet and byte accounting always. A setting the kernel refuses
    is logged, as Felix logs it, and the agent goes on."""
    wanted = [("net/netfilter/nf_conntrack_acct", "1")]
    if config.ip_forwarding is IPForwarding.ENABLED:
        wanted.insert(0, ("net/ipv4/ip_forward", "1"))
        if config.ipv6_support:
            wanted.insert(1, ("net/ipv6/conf/all/forwarding", "1"))
    else:
        log.info("IPForwarding is Disabled: leaving the forwarding sysctls as they are")
    for path, value in wanted:
        set_sysctl(path, value)


async def kube_proxy_uses_nftables() -> bool:
    """Felix's sign of kube-proxy's nftables mode: a chain in its ``kube-proxy`` table of
    either family."""
    if not available("nft"):
        return False
    for nft_family in ("ip", "ip6"):
        listing = await run(["nft", "-j", "list", "table", nft_family, "kube-proxy"], check=False)
        if '"chain"' in listing:
            return True
    return False


async def nftables_wanted(config: FelixConfig) -> bool:
    """NFTablesMode: Enabled, Disabled, or (Auto) whatever kube-proxy runs."""
    if config.nftables_mode is NFTablesMode.ENABLED:
        return True
    if config.nftables_mode is NFTablesMode.DISABLED:
        return False
    return await kube_proxy_uses_nftables()


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


async def probe_kernel(config: FelixConfig) -> KernelProbe:
    """The backend and the nftables mode ``config``'s settings lead to on this node."""
    detected = await detect_backend(config.iptables_backend)
    nftables = await nftables_wanted(config)
    return KernelProbe(
        config.iptables_backend, config.nftables_mode, detected.backend, nftables, detected.saved
    )


def _iptables_versions(config: FelixConfig, backend: str) -> list[int]:
    """The IP versions whose iptables tables ``config`` programs: IPv6 only where it is enabled
    and ip6tables exists."""
    return [v for v in ip_versions(config) if v == 4 or available(f"ip6tables-{backend}")]


class NftReader(Protocol):
    """One IP version's ``calico`` table as the kernel holds it now (None: there is none)."""

    async def read(self) -> KernelTable | None: ...


@attrs.frozen
class EarlyReaders:
    """What the kernel opened with a configuration and a probe will program, per IP version,
    to be read before then: its iptables tables, or in the nftables mode its tables."""

    tables: Mapping[int, TableReader] = attrs.Factory(dict)
    nftables: Mapping[int, NftReader] = attrs.Factory(dict)


def early_readers(config: FelixConfig, probe: KernelProbe) -> EarlyReaders:
    """The readers of what ``linux_kernel(config, probe)`` will program; the iptables tables
    from what the probe saved, where it did."""
    if probe.nftables:
        from pyfelix_dataplane.linux.nftables import NftablesWriter  # noqa: PLC0415
        from pyfelix_dataplane.rules.nft import family  # noqa: PLC0415

        return EarlyReaders(nftables={v: NftablesWriter(family(v)) for v in ip_versions(config)})
    return EarlyReaders(
        tables={
            v: SavedTables(probe.saved[v]) if v in probe.saved else IptablesWriter(v, probe.backend)
            for v in _iptables_versions(config, probe.backend)
        }
    )


async def linux_kernel(config: FelixConfig, probe: KernelProbe | None = None) -> Kernel:
    """The real kernel, with the iptables backend chosen as configured (or detected), and IPv6
    only where it is enabled and ip6tables exists; configured as Felix configures it first.
    In nftables mode the iptables writers stay, to remove what the iptables mode left.
    ``probe`` stands for the detection if it was made for these settings."""
    configure_kernel(config)
    if probe is None or not probe.answers(config):
        probe = await probe_kernel(config)
    backend = probe.backend
    mode = "append" if config.chain_insert_mode is ChainInsertMode.APPEND else "insert"
    ipsets = IpsetWriter(config.max_ipset_size)
    auto = kube_proxy_uses_nftables if config.nftables_mode is NFTablesMode.AUTO else None
    if probe.nftables:
        # The nftables mode's modules are imported when it is on (0.02 s of start-up).
        from pyfelix_dataplane.linux.nftables import NftablesWriter  # noqa: PLC0415
        from pyfelix_dataplane.rules.nft import family  # noqa: PLC0415

        versions = list(ip_versions(config))
        legacy = [
            IptablesWriter(v, backend, mode, config.iptables_lock_probe_interval)
            for v in versions
            if available(f"ip{'6' if v == 6 else ''}tables-{backend}")
        ]

        async def remove_iptables_mode() -> None:
            for writer in legacy:
                if await writer.remove_ours(TABLES):
                    log.info("removed the iptables mode's IPv%d chains", writer.version)
            await ipsets.apply_deletions({})

        return Kernel(
            ipsets=ipsets,
            tables={},
            routes=RouteWriter(),
            devices=LinuxDevices(),
            interfaces=LinuxInterfaces(),
            watch=watch_interfaces,
            description=f"nftables, IPv{'/'.join(map(str, versions))}",
            nftables={v: NftablesWriter(family(v)) for v in versions},
            remove_other_mode=remove_iptables_mode,
            kube_proxy_nftables=auto,
        )
    versions = _iptables_versions(config, backend)

    async def remove_nftables_mode() -> None:
        """After the first apply: the nftables mode's tables, if a previous run left them."""
        if not available("nft"):
            return
        from pyfelix_dataplane.linux.nftables import NftablesWriter  # noqa: PLC0415
        from pyfelix_dataplane.rules.nft import family  # noqa: PLC0415

        for version in (4, 6):
            await NftablesWriter(family(version)).remove()

    return Kernel(
        ipsets=ipsets,
        tables={
            v: IptablesWriter(v, backend, mode, config.iptables_lock_probe_interval)
            for v in versions
        },
        routes=RouteWriter(),
        devices=LinuxDevices(),
        interfaces=LinuxInterfaces(),
        watch=watch_interfaces,
        description=f"iptables-{backend}, IPv{'/'.join(map(str, versions))}",
        remove_other_mode=remove_nftables_mode,
        kube_proxy_nftables=auto,
    )
