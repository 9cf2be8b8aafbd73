"""VXLAN: this node's VTEP device (vxlan.calico) and a neighbour and FDB entry per remote VTEP."""

from __future__ import annotations

import attrs

from pyfelix_dataplane.linux.kernel import DeviceWriting
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice
from pyfelix_dataplane.state import NodeState

Vxlan = tuple[VtepDevice | None, tuple[RemoteVtep, ...]]


@attrs.define(eq=False)
class VxlanManager:
    state: NodeState
    writer: DeviceWriting
    hostname: str
    area: str = "routes"
    #: The device's MTU (VXLANMTU, or the host MTU less 50: see linux/mtu.py).
    mtu: int = 0
    _written: Vxlan | None = None

    def invalidate(self) -> None:
        self._written = None

    def desired(self) -> Vxlan:
        """This node's VTEP device and the remote VTEPs, when VXLAN is on and ours is known."""
        encapsulation = self.state.encapsulation
        local = self.state.vteps.get(self.hostname)
        if encapsulation is None or not encapsulation.vxlan_enabled or local is None:
            return None, ()
        config = self.state.config
        device = VtepDevice(
            vni=config.vxlan_vni,
            port=config.vxlan_port,
            mac=local.mac,
            tunnel_ip=local.ipv4_addr,
            parent_ip=local.parent_device_ip,
            mtu=self.mtu,
        )
        remotes = tuple(
            RemoteVtep(vtep.ipv4_addr, vtep.mac, vtep.parent_device_ip)
            for node, vtep in sorted(self.state.vteps.items())
            if node != self.hostname and vtep.ipv4_addr and vtep.parent_device_ip
        )
        return device, remotes

    async def apply(self) -> bool:
        """Write the device and its neighbours if they changed; whether VXLAN is on (routes go
        through the device then)."""
        vxlan = self.desired()
        if self._written != vxlan and await self.writer.vxlan(*vxlan) != "waiting":
            self._written = vxlan
        return vxlan[0] is not None
