"""The encapsulation resolver: is VXLAN (or IPIP) in use on this cluster?

From the IP pools (any pool with a VXLAN or IPIP mode turns it on, a disabled one too: it
only stops IPAM assigning from it, and the pods still in it keep their routes, as Calico's
pool migration relies on), unless FelixConfiguration's vxlanEnabled/ipipEnabled says
otherwise. The connector restarts the agent if this changes after
start-up, as Felix does.
"""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, value_of
from pyfelix.calc.outputs import EncapsulationOutput
from pyfelix.syncer.api import SyncStatus, Update


class EncapsulationResolver:
    """Whether IPIP and VXLAN (each IP version's) are on, from the pools and the
    FelixConfiguration overrides; sent once in sync and when it changes (the connector
    restarts the agent then)."""

    def __init__(self, output: EncapsulationOutput) -> None:
        self._out = output
        self._pools: dict[str, model.IPPool] = {}
        self._overrides: dict[str, bool] = {}
        self._in_sync = False

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.IPPoolKey, self._on_pool_update)
        updates.register(model.GlobalConfigKey, self._on_config_update)
        updates.register_status(self._on_status)

    def _on_pool_update(self, update: Update) -> None:
        assert isinstance(update.key, model.IPPoolKey)
        self.on_pool(update.key.cidr, value_of(update, model.IPPool))

    def _on_config_update(self, update: Update) -> None:
        assert isinstance(update.key, model.GlobalConfigKey)
        self.on_global_config(update.key.name, value_of(update, model.ConfigValue))

    def _on_status(self, status: SyncStatus) -> None:
        if status is SyncStatus.IN_SYNC:
            self.on_in_sync()

    def on_pool(self, cidr: str, pool: model.IPPool | None) -> None:
        if pool is None:
            self._pools.pop(cidr, None)
        else:
            self._pools[cidr] = pool
        self._send()

    def on_global_config(self, name: str, value: model.ConfigValue | None) -> None:
        if name not in ("VXLANEnabled", "IpInIpEnabled"):
            return
        if value is None:
            self._overrides.pop(name, None)
        else:
            self._overrides[name] = value.value.lower() == "true"
        self._send()

    def on_in_sync(self) -> None:
        self._in_sync = True
        self._send()

    def current(self) -> m.Encapsulation:
        pools = self._pools.values()
        vxlan_v4 = any(p.vxlan_mode for p in pools if ":" not in p.cidr)
        vxlan_v6 = any(p.vxlan_mode for p in pools if ":" in p.cidr)
        ipip = any(p.ipip_mode for p in pools)
        return m.Encapsulation(
            ipip_enabled=self._overrides.get("IpInIpEnabled", ipip),
            vxlan_enabled=self._overrides.get("VXLANEnabled", vxlan_v4),
            vxlan_enabled_v6=vxlan_v6,
        )

    def _send(self) -> None:
        if self._in_sync:
            self._out.on_encapsulation(self.current())
