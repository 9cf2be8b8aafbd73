"""IPIP: this node's tunl0, up with the IPIP MTU and its IPIP tunnel address, while an IP pool
has IPIP on (Felix's IPIP manager); the routes through it are the routes manager's."""

from __future__ import annotations

import attrs

from pyfelix import messages as m
from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.kernel import DeviceWriting
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.state import NodeState


@attrs.define(eq=False)
class IpipManager:
    state: NodeState
    writer: DeviceWriting
    area: str = "routes"
    #: Where the devices' MTUs come from (detected, or configured: managers/mtu.py).
    mtus: MtuManager | None = None
    _written: IpipDevice | None = None
    #: Whether ``_written`` is what the kernel was given (a refresh forgets it).
    _synced: bool = False
    #: Whether IPIP is on (the routes manager routes through tunl0 then).
    on: bool = False

    @property
    def mtu(self) -> int:
        return self.mtus.ipip if self.mtus is not None else 0

    def invalidate(self) -> None:
        self._synced = False

    def on_update(self, msg: m.ToDataplane) -> None:
        """Nothing to note: the device is worked out again on every apply (it is one)."""

    def desired(self) -> IpipDevice | None:
        """tunl0 when IPIP is on and this node's IPIP address is known."""
        encapsulation = self.state.encapsulation
        address = self.state.ipip_tunnel_addr
        if encapsulation is None or not encapsulation.ipip_enabled or not address:
            return None
        return IpipDevice(address=address, mtu=self.mtu)

    async def complete_deferred_work(self) -> None:
        """Write the device if it changed."""
        device = self.desired()
        if not self._synced or self._written != device:
            await self.writer.ipip(device)
            self._written, self._synced = device, True
        self.on = device is not None
