"""What the node itself holds that the rules read, beside the datastore's messages: its own
addresses (Felix's host IP manager, the ``this-host`` IP set) and whether kube-proxy runs in
IPVS mode (Felix's check for kube-ipvs0 at start, rules/ipvs.py).

Both go into the desired state before the other managers render from it, with its rules
generation bumped when they change, so the IP sets and tables follow. kube-proxy switching
mode (kube-ipvs0 appearing or going) restarts the agent, as it restarts Felix.
"""

from __future__ import annotations

import logging

import attrs

from pyfelix import messages as m
from pyfelix.errors import RestartRequired
from pyfelix_dataplane.linux.host_endpoints import interface_excludes, without_excluded
from pyfelix_dataplane.linux.kernel import InterfaceReading
from pyfelix_dataplane.rules.settings import interface_prefixes
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)

#: kube-proxy's IPVS mode holds every service address on this device (Felix's sign of IPVS).
KUBE_IPVS_DEVICE = "kube-ipvs0"


@attrs.define(eq=False)
class HostFactsManager:
    state: NodeState
    interfaces: InterfaceReading
    area: str = "routes"
    #: The addresses are read again on the next apply (an interface changed, or a refresh).
    _stale: bool = True
    #: kube-ipvs0's presence when the agent started; None before the first apply.
    _ipvs_at_start: bool | None = None

    def invalidate(self) -> None:
        self._stale = True

    def on_update(self, msg: m.ToDataplane) -> None:
        """InterfacePrefix and InterfaceExclude decide which addresses are the host's."""
        if isinstance(msg, m.ConfigUpdate):
            self._stale = True

    def on_interface(self, name: str) -> bool:
        """An interface changed: whether the next apply has something to read (a workload's
        interface holds no address of the host's)."""
        if name.startswith(interface_prefixes(self.state.config)):
            return False
        self._stale = True
        return True

    async def complete_deferred_work(self) -> None:
        """Note kube-proxy's mode (at the first apply; a change restarts the agent), then the
        host's addresses if anything may have changed them."""
        ipvs = self.interfaces.flags(KUBE_IPVS_DEVICE) is not None
        if self._ipvs_at_start is None:
            self._ipvs_at_start = ipvs
            if ipvs:
                log.info("%s found: kube-proxy runs in IPVS mode", KUBE_IPVS_DEVICE)
                self.state.kube_ipvs = True
                self.state.rules_generation += 1
        elif ipvs != self._ipvs_at_start:
            raise RestartRequired(
                f"kube-proxy's mode changed ({KUBE_IPVS_DEVICE} {'appeared' if ipvs else 'went'})"
            )
        if not self._stale:
            return
        config = self.state.config
        found = await self.interfaces.addresses((), interface_prefixes(config))
        kept = without_excluded(found, interface_excludes(config.interface_exclude))
        addresses = frozenset(a for name in kept for a in kept[name])
        self._stale = False
        if addresses != self.state.host_ips:
            log.debug("this host's addresses: %s", " ".join(sorted(addresses)))
            self.state.host_ips = addresses
            self.state.rules_generation += 1
