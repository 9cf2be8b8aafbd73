"""IPIP: this node's tunl0, up with the IPIP MTU and its IPIP tunnel address, while an IP pool
has IPIP on (Felix's IPIP manager); the routes through it are the routes manager's."""

from __future__ import annotations

import attrs

from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.kernel import DeviceWriting
from pyfelix_dataplane.state import NodeState


@attrs.define(eq=False)
class IpipManager:
    state: NodeState
    writer: DeviceWriting
    area: str = "routes"
    #: tunl0's MTU (IpInIpMtu, or the host MTU less 20: see linux/mtu.py).
    mtu: int = 0
    _written: IpipDevice | str | None = "never"

    def invalidate(self) -> None:
        self._written = "never"

    def desired(self) -> IpipDevice | None:
        """tunl0 when IPIP is on and this node's IPIP address is known."""
        encapsulation = self.state.encapsulation
        # The node's IpInIpTunnelAddr comes with its host configuration, as in Felix.
        address = (self.state.config_text or {}).get("IpInIpTunnelAddr", "")
        if encapsulation is None or not encapsulation.ipip_enabled or not address:
            return None
        return IpipDevice(address=address, mtu=self.mtu)

    async def apply(self) -> bool:
        """Write the device if it changed; whether IPIP is on (routes go through it then)."""
        device = self.desired()
        if self._written != device:
            await self.writer.ipip(device)
            self._written = device
        return device is not None
