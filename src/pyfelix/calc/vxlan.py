"""The VXLAN resolver: a VXLAN tunnel endpoint (VTEP) per node, with an IPv4 half when the
node has an IPv4 address and an IPv4 VXLAN tunnel address, and an IPv6 half when it has both
in IPv6 (either half alone is a VTEP, as Felix). The MACs are the Node's own, or Felix's
derived ones: 0x66 followed by the first five bytes of SHA-1 of the node name (of the name and
"-v6" for the IPv6 half)."""

from __future__ import annotations

import hashlib

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, host_config_of, host_ip_of
from pyfelix.calc.outputs import VtepOutput
from pyfelix.syncer.api import Update

#: The Node fields each half takes: its tunnel address and its MAC.
_FIELDS = {
    "IPv4VXLANTunnelAddr": (4, "tunnel"),
    "VXLANTunnelMACAddr": (4, "mac"),
    "IPv6VXLANTunnelAddr": (6, "tunnel"),
    "VXLANTunnelMACAddrV6": (6, "mac"),
}


def derived_vtep_mac(node: str, version: int = 4) -> str:
    name = node if version == 4 else f"{node}-v6"
    digest = hashlib.sha1(name.encode()).digest()  # an id, not security
    return ":".join(f"{b:02x}" for b in bytes([0x66]) + digest[:5])


class VXLANResolver:
    """Each node's VTEP, from its addresses, VXLAN tunnel addresses and MACs: sent once one
    IP version's half has its address and tunnel address (either half alone is a VTEP),
    removed when neither has."""

    def __init__(self, output: VtepOutput) -> None:
        self._out = output
        #: (version, what) -> node -> value; what is "host", "tunnel" or "mac".
        self._facts: dict[tuple[int, str], dict[str, str]] = {
            (version, what): {} for version in (4, 6) for what in ("host", "tunnel", "mac")
        }

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.HostIPKey, self._on_host_ip_update)
        updates.register(model.HostIPv6Key, self._on_host_ip_update)
        updates.register(model.HostConfigKey, self._on_host_config_update)

    def _on_host_ip_update(self, update: Update) -> None:
        self.on_host_ip(*host_ip_of(update))

    def _on_host_config_update(self, update: Update) -> None:
        self.on_host_config(*host_config_of(update))

    def on_host_ip(self, node: str, value: model.ConfigValue | None, version: int = 4) -> None:
        self._set((version, "host"), node, value)

    def on_host_config(self, node: str, name: str, value: model.ConfigValue | None) -> None:
        if name in _FIELDS:
            self._set(_FIELDS[name], node, value)

    def _set(self, fact: tuple[int, str], node: str, value: model.ConfigValue | None) -> None:
        if value is None:
            self._facts[fact].pop(node, None)
        else:
            self._facts[fact][node] = value.value
        self._resolve(node)

    def _half(self, node: str, version: int) -> tuple[str, str, str]:
        """(MAC, tunnel address, host address) of one half; all empty without both
        addresses."""
        host = self._facts[version, "host"].get(node)
        tunnel = self._facts[version, "tunnel"].get(node)
        if not host or not tunnel:
            return "", "", ""
        mac = self._facts[version, "mac"].get(node) or derived_vtep_mac(node, version)
        return mac.lower(), tunnel, host

    def vtep(self, node: str) -> m.VXLANTunnelEndpointUpdate | None:
        (mac, tunnel, host), (mac6, tunnel6, host6) = self._half(node, 4), self._half(node, 6)
        if not tunnel and not tunnel6:
            return None
        return m.VXLANTunnelEndpointUpdate(node, mac, tunnel, host, mac6, tunnel6, host6)

    def _resolve(self, node: str) -> None:
        vtep = self.vtep(node)
        if vtep is None:
            self._out.on_vtep_remove(node)
        else:
            self._out.on_vtep_update(vtep)
