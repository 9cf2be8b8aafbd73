"""Routes: each local workload through its interface (with its interface settings and pinned
MAC); with VXLAN, each remote block through the remote node's tunnel address of the block's
IP version (vxlan.calico or vxlan-v6.calico), or straight to the node where the pool is
CrossSubnet and the node shares our subnet; with IPIP (and ProgramClusterRoutes Enabled or
EnabledIPIPOnly, Felix's default), each remote block via the node's address, onlink out of
tunl0; each remote block of an unencapsulated pool straight to its node, with
ProgramClusterRoutes Enabled or EnabledNoEncapOnly (otherwise BIRD programs those)."""

from __future__ import annotations

import time

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix.config.felix_config import ProgramClusterRoutes
from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.linux.ipip import DEVICE as IPIP_DEVICE
from pyfelix_dataplane.linux.kernel import RouteWriting
from pyfelix_dataplane.linux.managers.ipip import IpipManager
from pyfelix_dataplane.linux.managers.vxlan import VxlanManager, vtep_half
from pyfelix_dataplane.linux.routes import RouteOwnership, RouteTarget
from pyfelix_dataplane.linux.vxlan import DEVICE as VXLAN_DEVICE
from pyfelix_dataplane.linux.vxlan import DEVICE_V6 as VXLAN_V6_DEVICE
from pyfelix_dataplane.linux.vxlan import device_name
from pyfelix_dataplane.rules.settings import interface_prefixes
from pyfelix_dataplane.state import NodeState

#: What the routes come from: local workloads, remote blocks and VTEPs, the settings, and
#: which tunnels are up (the tunnel managers', compared on every apply).
CHANGES_ROUTES = (
    m.WorkloadEndpointUpdate,
    m.WorkloadEndpointRemove,
    m.RouteUpdate,
    m.RouteRemove,
    m.VXLANTunnelEndpointUpdate,
    m.VXLANTunnelEndpointRemove,
    m.ConfigUpdate,
    m.IPAMPoolUpdate,
    m.IPAMPoolRemove,
)


IPIP_ROUTES = (ProgramClusterRoutes.ENABLED, ProgramClusterRoutes.ENABLED_IPIPONLY)
NO_ENCAP_ROUTES = (ProgramClusterRoutes.ENABLED, ProgramClusterRoutes.ENABLED_NO_ENCAP_ONLY)


def _unencapsulated(pool: model.IPPool) -> bool:
    return pool.ipip_mode in ("", "Never") and pool.vxlan_mode in ("", "Never")


@attrs.define(eq=False)
class RoutesManager:
    state: NodeState
    writer: RouteWriting
    hostname: str
    #: The tunnel managers, applied before this one: whether their devices are up.
    vxlan: VxlanManager | None = None
    ipip: IpipManager | None = None
    #: Where the routes managed and each write's time are counted, for the metrics.
    stats: DataplaneStats | None = None
    area: str = "routes"
    #: Per destination: "added", "waiting" (interface missing) or "failed", from the last write.
    results: dict[str, str] = attrs.Factory(dict)
    _written: dict[str, RouteTarget] | None = None
    #: Whether a message since the last write may change a route, and the tunnels then up.
    _dirty: bool = True
    _tunnels: tuple[frozenset[int], bool] = (frozenset(), False)

    def invalidate(self) -> None:
        self._written, self._dirty = None, True

    def on_update(self, msg: m.ToDataplane) -> None:
        if isinstance(msg, CHANGES_ROUTES):
            self._dirty = True

    def desired(
        self, vxlan_on: frozenset[int] = frozenset(), ipip_on: bool = False
    ) -> dict[str, RouteTarget]:
        """``vxlan_on``: the IP versions whose VXLAN device is up."""
        routes = {}
        config = self.state.config
        v4, v6 = config.ipv4_normal_route_priority, config.ipv6_normal_route_priority
        for update in self.state.workloads.values():
            endpoint = update.endpoint
            spoofing = bool(endpoint.allow_spoofed_source_prefixes)
            # As Felix: the workload's addresses and its floating IPs, at the normal priority.
            floating = [
                f"{nat.ext_ip}/{128 if ':' in nat.ext_ip else 32}"
                for nat in endpoint.ipv4_nat + endpoint.ipv6_nat
            ]
            for net in (*endpoint.ipv4_nets, *endpoint.ipv6_nets, *floating):
                priority = v6 if ":" in net else v4
                routes[net] = RouteTarget(
                    endpoint.name, endpoint.mac, spoofing=spoofing, priority=priority
                )
        # Cluster routes are Felix's unless ProgramClusterRoutes leaves them to BIRD: IPIP's
        # with Enabled or EnabledIPIPOnly (the default), unencapsulated pools' with Enabled or
        # EnabledNoEncapOnly (and only while such a pool exists).
        program = config.program_cluster_routes
        ipip_routes = ipip_on and program in IPIP_ROUTES
        no_encap = program in NO_ENCAP_ROUTES and any(
            _unencapsulated(update.pool) for update in self.state.pools.values()
        )
        if not (vxlan_on or ipip_routes or no_encap):
            return routes
        for route in self.state.routes.values():
            if "REMOTE_WORKLOAD" not in route.types or route.dst_node == self.hostname:
                continue
            version = 6 if ":" in route.dst else 4
            direct = RouteTarget("", gateway=route.dst_node_ip) if route.dst_node_ip else None
            if route.tunnel == "none":
                if no_encap and direct is not None:
                    routes[route.dst] = direct
            elif route.tunnel == "vxlan" and version in vxlan_on:
                # CrossSubnet, and the node shares our subnet: straight to it.
                vtep = self.state.vteps.get(route.dst_node)
                tunnel_ip = vtep_half(vtep, version)[1] if vtep is not None else ""
                if route.same_subnet and direct is not None:
                    routes[route.dst] = direct
                elif tunnel_ip:
                    routes[route.dst] = RouteTarget(device_name(version), gateway=tunnel_ip)
            elif route.tunnel == "ipip" and ipip_routes and direct is not None:
                # As Felix's IPIP manager: onlink via the node's own address, out of tunl0,
                # unless CrossSubnet and in our subnet.
                gateway = route.dst_node_ip
                routes[route.dst] = (
                    direct if route.same_subnet else RouteTarget(IPIP_DEVICE, gateway=gateway)
                )
        return routes

    async def complete_deferred_work(self) -> None:
        tunnels = (
            self.vxlan.on if self.vxlan is not None else frozenset(),
            self.ipip.on if self.ipip is not None else False,
        )
        if not self._dirty and tunnels == self._tunnels:
            return
        self._tunnels = tunnels
        desired = self.desired(*tunnels)
        if self._written == desired:
            self._dirty = False
            return
        config = self.state.config
        ownership = RouteOwnership(
            device_proto=config.device_route_protocol,
            workload_prefixes=interface_prefixes(config),
            remove_external=config.remove_external_routes,
            special_interfaces=(VXLAN_DEVICE, VXLAN_V6_DEVICE, IPIP_DEVICE),
            source_v4=config.device_route_source_address,
            source_v6=config.device_route_source_address_ipv6,
            sync=not config.route_sync_disabled,
        )
        started = time.monotonic()
        self.results = await self.writer.apply(desired, ownership)
        if self.stats is not None:
            self.stats.route_syncs.observe(time.monotonic() - started)
            interfaces = {target.interface for target in desired.values() if target.interface}
            self.stats.routes = (len(desired), len(interfaces))
        if not {"waiting", "failed"} & set(self.results.values()):
            self._written, self._dirty = desired, False
