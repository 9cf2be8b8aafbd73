"""IP sets: Calico's sets and the special ones (pools, VXLAN hosts) for every IP version."""

from __future__ import annotations

import attrs

from pyfelix_dataplane.linux.ipsets import DesiredSets
from pyfelix_dataplane.linux.kernel import IpsetWriting
from pyfelix_dataplane.rules.render import kernel_ipsets
from pyfelix_dataplane.state import NodeState


@attrs.define(eq=False)
class IpsetsManager:
    state: NodeState
    writer: IpsetWriting
    versions: tuple[int, ...]
    area: str = "ipsets"
    _stale: bool = True
    _desired: DesiredSets = attrs.Factory(dict)

    def invalidate(self) -> None:
        self._stale = True

    def desired(self) -> DesiredSets:
        return kernel_ipsets(self.state, self.versions)

    async def apply(self, desired: DesiredSets) -> None:
        """Create, fill and resize ``desired`` (before the tables that refer to it)."""
        self._desired = desired
        await self.writer.apply_updates(desired, refresh=self._stale)
        self._stale = False

    async def clean_up(self) -> None:
        """Destroy the sets no longer wanted (after the tables stopped referring to them)."""
        await self.writer.apply_deletions(self._desired)
