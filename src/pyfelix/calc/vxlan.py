"""The VXLAN resolver: one VXLAN tunnel endpoint (VTEP) per node that has both a host IP and a
VXLAN tunnel address. The MAC is the Node's own, or Felix's derived one: 0x66 followed by the
first five bytes of SHA-1 of the node name."""

from __future__ import annotations

import hashlib

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_config_of, host_ip_of
from pyfelix.calc.outputs import VtepOutput
from pyfelix.syncer.api import Update


def derived_vtep_mac(node: str) -> str:
    digest = hashlib.sha1(node.encode()).digest()  # an id, not security
    return ":".join(f"{b:02x}" for b in bytes([0x66]) + digest[:5])


class VXLANResolver:
    def __init__(self, output: VtepOutput) -> None:
        self._out = output
        self._host_ips: dict[str, str] = {}
        self._tunnel_addrs: dict[str, str] = {}
        self._macs: dict[str, str] = {}

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.HostIPKey, self._on_host_ip_update)
        updates.register(model.HostConfigKey, self._on_host_config_update)

    def _on_host_ip_update(self, update: Update) -> None:
        self.on_host_ip(*host_ip_of(update))

    def _on_host_config_update(self, update: Update) -> None:
        self.on_host_config(*host_config_of(update))

    def on_host_ip(self, node: str, value: model.ConfigValue | None) -> None:
        self._set(self._host_ips, node, value)

    def on_host_config(self, node: str, name: str, value: model.ConfigValue | None) -> None:
        if name == "IPv4VXLANTunnelAddr":
            self._set(self._tunnel_addrs, node, value)
        elif name == "VXLANTunnelMACAddr":
            self._set(self._macs, node, value)

    def _set(self, target: dict[str, str], node: str, value: model.ConfigValue | None) -> None:
        if value is None:
            target.pop(node, None)
        else:
            target[node] = value.value
        self._resolve(node)

    def vtep(self, node: str) -> m.VXLANTunnelEndpointUpdate | None:
        host_ip, tunnel = self._host_ips.get(node), self._tunnel_addrs.get(node)
        if not host_ip or not tunnel:
            return None
        mac = self._macs.get(node) or derived_vtep_mac(node)
        return m.VXLANTunnelEndpointUpdate(node, mac.lower(), tunnel, host_ip)

    def _resolve(self, node: str) -> None:
        vtep = self.vtep(node)
        if vtep is None:
            self._out.on_vtep_remove(node)
        else:
            self._out.on_vtep_update(vtep)
