"""Opening the real kernel: probing its tools (the iptables backend, the nftables mode, which
kube-proxy's mode decides in NFTablesMode Auto), configuring it as Felix does at start, and
building the Linux writers of each IP version the settings enable. What a driver does with
them is the managers'; the interfaces are pyfelix_dataplane.linux.kernel's.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

import attrs
import trio

from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import ChainInsertMode, IPForwarding, NFTablesMode
from pyfelix_dataplane.linux.commands import available, run
from pyfelix_dataplane.linux.host_endpoints import interface_addresses
from pyfelix_dataplane.linux.ipip import IpipDevice, sync_ipip
from pyfelix_dataplane.linux.ipsets import IpsetWriter
from pyfelix_dataplane.linux.iptables import (
    IptablesWriter,
    SavedTables,
    detect_backend,
)
from pyfelix_dataplane.linux.monitor import watch_interfaces
from pyfelix_dataplane.linux.mtu import Link, read_links
from pyfelix_dataplane.linux.routes import (
    RouteWriter,
    link_flags,
    set_sysctl,
)
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice, sync_vxlan
from pyfelix_dataplane.linux.wireguard import WireguardDevice, sync_wireguard
from pyfelix_dataplane.rules.render import TABLES, ip_versions

if TYPE_CHECKING:
    pass

from pyfelix_dataplane.linux.kernel import (
    EarlyReaders,
    Kernel,
    KernelProbe,
)

log = logging.getLogger(__name__)


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
