"""nftables mode (NFTablesMode): each IP version's ``calico`` table, its sets and maps with
its chains, so one transaction writes a rule and the set it names together.

The chains are translated again only when what they depend on changed (the rules
generation and the host endpoints' placement, as the iptables mode renders them); the sets
are taken from the state at every apply, as the IP set members change without the rules.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import attrs

from pyfelix_dataplane.linux.nftables import NftablesWriter
from pyfelix_dataplane.rules.nft import NftChain, NftTable, family, nft_chains, nft_sets
from pyfelix_dataplane.rules.render import kernel_ipsets, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.state import NodeState

Translated = tuple[dict[str, NftChain], dict[str, dict[str, str]]]


@attrs.define(eq=False)
class NftablesManager:
    state: NodeState
    writers: Mapping[int, NftablesWriter]
    area: str = "nftables"
    _translated: tuple[Hashable, dict[int, Translated]] | None = None

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(self.writers)

    def invalidate(self) -> None:
        for writer in self.writers.values():
            writer.invalidate()

    def render(self, rendering: NodeState, key: Hashable) -> dict[int, NftTable]:
        """Every version's table for the state; ``key`` says when the chains must be
        rendered and translated again."""
        if self._translated is None or self._translated[0] != key:
            settings = Settings.from_config(rendering.config, nftables=True)
            appends = kernel_appends(settings)
            translated = {
                version: nft_chains(version, render_chains(rendering, version, settings), appends)
                for version in self.versions
            }
            self._translated = (key, translated)
        self.state.take_changed_ipsets()  # the sets are taken whole, below
        sets = kernel_ipsets(rendering, self.versions)
        return {
            version: NftTable(family(version), chains, nft_sets(sets, version), maps)
            for version, (chains, maps) in self._translated[1].items()
        }

    async def write(self, version: int, table: NftTable) -> bool:
        return await self.writers[version].apply(table)
