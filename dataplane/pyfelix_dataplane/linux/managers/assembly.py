"""Which managers a kernel gets: one of each concern, over one desired state, the table mode
chosen by the kernel (iptables with its IP sets, or nftables). The driver orders them; this
module only builds them, passes each message to them, and names the ones a refresh may
find due."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from pyfelix import messages as m
from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.driver import ToCalc
from pyfelix_dataplane.linux.kernel import InterfaceReading, Kernel
from pyfelix_dataplane.linux.managers import Manager, Refreshed
from pyfelix_dataplane.linux.managers.endpoint_status import EndpointStatusManager
from pyfelix_dataplane.linux.managers.endpoints import EndpointManager
from pyfelix_dataplane.linux.managers.host_facts import HostFactsManager
from pyfelix_dataplane.linux.managers.ipip import IpipManager
from pyfelix_dataplane.linux.managers.ipsets import IpsetsManager
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.linux.managers.routes import RoutesManager
from pyfelix_dataplane.linux.managers.tables import TablesManager
from pyfelix_dataplane.linux.managers.vxlan import VxlanManager
from pyfelix_dataplane.linux.managers.wireguard import WireguardManager
from pyfelix_dataplane.linux.table_mode import IptablesMode, NftablesMode, TableMode
from pyfelix_dataplane.state import NodeState


@attrs.define(eq=False)
class Managers:
    """The managers of one kernel, over one desired state."""

    #: What the node itself holds (its addresses, kube-proxy's mode): before all others.
    host_facts: HostFactsManager
    endpoints: EndpointManager
    #: IptablesMode (its IP sets and tables managers) or NftablesMode (NFTablesMode).
    table_mode: TableMode
    vxlan: VxlanManager
    ipip: IpipManager
    wireguard: WireguardManager
    routes: RoutesManager
    status: EndpointStatusManager
    mtus: MtuManager

    @classmethod
    def build(
        cls,
        state: NodeState,
        kernel: Kernel,
        hostname: str,
        to_calc: ToCalc,
        *,
        mtus: Callable[[InterfaceReading], MtuManager],
        stats: DataplaneStats | None = None,
    ) -> Managers:
        table_mode: TableMode
        if kernel.nftables:
            from pyfelix_dataplane.linux.managers.nftables import NftablesManager  # noqa: PLC0415

            table_mode = NftablesMode(NftablesManager(state, kernel.nftables, stats))
        else:
            ipsets = IpsetsManager(state, kernel.ipsets, tuple(kernel.tables), stats)
            table_mode = IptablesMode(ipsets, TablesManager(kernel.tables, stats))
        mtu = mtus(kernel.interfaces)
        endpoints = EndpointManager(state, kernel.interfaces)
        vxlan = VxlanManager(state, kernel.devices, hostname, mtus=mtu)
        ipip = IpipManager(state, kernel.devices, mtus=mtu)
        routes = RoutesManager(state, kernel.routes, hostname, vxlan, ipip, stats)
        return cls(
            host_facts=HostFactsManager(state, kernel.interfaces),
            endpoints=endpoints,
            table_mode=table_mode,
            vxlan=vxlan,
            ipip=ipip,
            wireguard=WireguardManager(state, kernel.devices, hostname, to_calc, mtus=mtu),
            routes=routes,
            status=EndpointStatusManager(state, kernel.interfaces, to_calc, endpoints, routes),
            mtus=mtu,
        )

    def routing(self) -> tuple[Manager, ...]:
        """The devices (routes go through them), then the routes."""
        return (self.vxlan, self.ipip, self.wireguard, self.routes)

    def on_update(self, msg: m.ToDataplane) -> None:
        self.host_facts.on_update(msg)
        self.endpoints.on_update(msg)
        self.table_mode.on_update(msg)
        for manager in self.routing():
            manager.on_update(msg)
        self.status.on_update(msg)

    def refreshed(self) -> tuple[Refreshed, ...]:
        return (
            self.host_facts,
            self.endpoints,
            *self.table_mode.managers(),
            *self.routing(),
            self.status,
        )

    def on_interface(self, name: str, state: NodeState) -> bool:
        """A link or an address changed: whether an apply is wanted now rather than at the
        refresh. A local workload's interface is re-routed; with host endpoints they are
        re-resolved and their status reported; a host interface may change the host's
        addresses."""
        wanted = self.host_facts.on_interface(name)
        if any(update.endpoint.name == name for update in state.workloads.values()):
            self.routes.invalidate()
            return True
        return wanted or bool(state.hosts)
