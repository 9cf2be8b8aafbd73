"""VXLAN: this node's VTEP devices (vxlan.calico for IPv4, vxlan-v6.calico for IPv6) and a
neighbour and FDB entry per remote VTEP of the same IP version."""

from __future__ import annotations

import attrs

from pyfelix import messages as m
from pyfelix_dataplane.linux.kernel import DeviceWriting
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice
from pyfelix_dataplane.state import NodeState

Vxlan = tuple[VtepDevice | None, tuple[RemoteVtep, ...]]
VERSIONS = (4, 6)
#: What a VTEP device, its neighbours or its MTU's inputs come from.
CHANGES_VXLAN = (
    m.VXLANTunnelEndpointUpdate,
    m.VXLANTunnelEndpointRemove,
    m.Encapsulation,
    m.ConfigUpdate,
)


def vtep_half(vtep: m.VXLANTunnelEndpointUpdate, version: int) -> tuple[str, str, str]:
    """(MAC, tunnel address, underlay address) of one IP version's half of a VTEP."""
    if version == 6:
        return vtep.mac_v6, vtep.ipv6_addr, vtep.parent_device_ipv6
    return vtep.mac, vtep.ipv4_addr, vtep.parent_device_ip


@attrs.define(eq=False)
class VxlanManager:
    state: NodeState
    writer: DeviceWriting
    hostname: str
    area: str = "routes"
    #: Where the devices' MTUs come from (detected, or configured: managers/mtu.py).
    mtus: MtuManager | None = None
    #: The IP versions whose device is up (the routes manager routes through them).
    on: frozenset[int] = frozenset()
    _written: dict[int, Vxlan] = attrs.Factory(dict)
    #: Whether a message since the last write may change a device or its neighbours.
    _dirty: bool = True

    @property
    def mtu(self) -> int:
        return self.mtus.vxlan if self.mtus is not None else 0

    @property
    def mtu_v6(self) -> int:
        return self.mtus.vxlan_v6 if self.mtus is not None else 0

    def invalidate(self) -> None:
        self._written, self._dirty = {}, True

    def on_update(self, msg: m.ToDataplane) -> None:
        if isinstance(msg, CHANGES_VXLAN):
            self._dirty = True

    def enabled(self, version: int) -> bool:
        encapsulation = self.state.encapsulation
        if encapsulation is None:
            return False
        return encapsulation.vxlan_enabled_v6 if version == 6 else encapsulation.vxlan_enabled

    def desired(self, version: int = 4) -> Vxlan:
        """This node's VTEP device of IP ``version`` and the remote VTEPs of that version,
        when VXLAN is on for it and our VTEP has that half."""
        local = self.state.vteps.get(self.hostname)
        if not self.enabled(version) or local is None:
            return None, ()
        mac, tunnel, parent = vtep_half(local, version)
        if not tunnel or not parent:
            return None, ()
        config = self.state.config
        device = VtepDevice(
            vni=config.vxlan_vni,
            port=config.vxlan_port,
            mac=mac,
            tunnel_ip=tunnel,
            parent_ip=parent,
            mtu=self.mtu_v6 if version == 6 else self.mtu,
            version=version,
        )
        remotes = []
        for node, vtep in sorted(self.state.vteps.items()):
            mac, tunnel, parent = vtep_half(vtep, version)
            if node != self.hostname and tunnel and parent:
                remotes.append(RemoteVtep(tunnel, mac, parent))
        return device, tuple(remotes)

    async def complete_deferred_work(self) -> None:
        """Write each device and its neighbours if they changed; note the IP versions whose
        device is up (their routes go through it). A device waiting for its parent's
        address is tried again on the next apply."""
        if not self._dirty:
            return
        on, waiting = set(), False
        for version in VERSIONS:
            vxlan = self.desired(version)
            if self._written.get(version) != vxlan:
                if await self.writer.vxlan(*vxlan, version) == "waiting":
                    waiting = True
                else:
                    self._written[version] = vxlan
            if vxlan[0] is not None:
                on.add(version)
        self.on, self._dirty = frozenset(on), waiting
