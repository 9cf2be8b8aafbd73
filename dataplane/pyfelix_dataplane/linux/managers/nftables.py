"""nftables mode (NFTablesMode): each IP version's ``calico`` table, its sets and maps with
its chains, so one transaction writes a rule and the set it names together.

The chains are translated again only when what they depend on changed (the rules
generation and the host endpoints' placement, as the iptables mode renders them); the sets
are rendered again only where the state names their members as changed (all of them after a
refresh or a failed write), and only those are compared with the kernel.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping

import attrs
import trio

from pyfelix import messages as m
from pyfelix.errors import DataplaneWriteError
from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.linux.kernel import NftablesWriting
from pyfelix_dataplane.linux.managers import CHECK_ATTEMPTS
from pyfelix_dataplane.linux.nftables import KernelTable
from pyfelix_dataplane.linux.reading import Reading
from pyfelix_dataplane.rules.ipsets import SPECIAL_IDS
from pyfelix_dataplane.rules.nft import (
    NftChain,
    NftSet,
    NftTable,
    family,
    nft_chains,
    nft_sets,
    port_sets,
    set_name,
)
from pyfelix_dataplane.rules.render import kernel_ipsets, kernel_ipsets_of, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.state import NodeState

#: A version's chains, verdict maps, and the port sets its rules name.
Translated = tuple[dict[str, NftChain], dict[str, dict[str, str]], dict[str, NftSet]]


@attrs.define(eq=False)
class NftablesManager:
    state: NodeState
    writers: Mapping[int, NftablesWriting]
    #: Where each version's table as written is counted, for the metrics.
    stats: DataplaneStats | None = None
    area: str = "nftables"
    _translated: tuple[Hashable, dict[int, Translated]] | None = None
    #: Per version, the table's sets as last rendered; None: render them all again.
    _sets: dict[int, dict[str, NftSet]] | None = None
    #: The rules generation the special sets were last rendered at (they follow pools,
    #: hosts and the encapsulation, which bump it).
    _generation: int = -1
    #: Per version, the sets rendered again by the last render (None: all of them).
    _changed: dict[int, set[str] | None] = attrs.Factory(dict)
    #: The ids of the sets whose type or members messages changed since the last render.
    _changed_ids: set[str] = attrs.Factory(set)

    @property
    def versions(self) -> tuple[int, ...]:
        return tuple(self.writers)

    @property
    def written(self) -> bool:
        return any(writer.written for writer in self.writers.values())

    def invalidate(self) -> None:
        self._sets = None
        for writer in self.writers.values():
            writer.invalidate()

    def on_update(self, msg: m.ToDataplane) -> None:
        if isinstance(msg, m.IPSetUpdate | m.IPSetDeltaUpdate | m.IPSetRemove):
            self._changed_ids.add(msg.id)

    async def check(self) -> bool:
        """Each version's table read back beside the applies; one that differs from what was
        written is read again and repaired by the next apply (every set rendered again for
        it). Whether the next apply has something to repair."""
        differ: dict[int, bool] = {}

        async def read(version: int) -> None:
            differ[version] = await self.writers[version].check(CHECK_ATTEMPTS)

        async with trio.open_nursery() as nursery:
            for version in self.versions:
                nursery.start_soon(read, version)
        if not any(differ.values()):
            return False
        self._sets = None
        return True

    def render(self, rendering: NodeState, key: Hashable) -> Iterator[tuple[int, NftTable]]:
        """Each version's table for the state, rendered when its turn comes (the driver
        writes one while the next is rendered); ``key`` says when the chains must be
        rendered and translated again. The sets are rendered again only where members
        changed (the state names the sets), as the iptables mode writes only those."""
        if self._translated is None or self._translated[0] != key:
            self._translated = (key, {})
        changed, self._changed_ids = self._changed_ids, set()
        names: set[str] | None = None
        if self._sets is None:
            every = kernel_ipsets(rendering, self.versions)
            self._sets = {version: nft_sets(every, version) for version in self.versions}
        else:
            if self._generation != self.state.rules_generation:
                changed |= SPECIAL_IDS
            names = set()
            for name, entry in kernel_ipsets_of(rendering, self.versions, changed).items():
                version = 6 if name.startswith("cali6") else 4
                nft = set_name(name)
                names.add(nft)
                if entry is None:
                    self._sets[version].pop(nft, None)
                else:
                    self._sets[version].update(nft_sets({name: entry}, version))
        self._generation = self.state.rules_generation
        sets, translated = self._sets, self._translated[1]
        for version in self.versions:
            if version not in translated:
                settings = Settings.for_node(rendering, nftables=True)
                rendered = render_chains(rendering, version, settings)
                chains, maps = nft_chains(version, rendered, kernel_appends(settings))
                translated[version] = (chains, maps, port_sets(chains))
            chains, maps, ports = translated[version]
            # The port sets follow the chains: compared with the kernel on every apply (a few).
            self._changed[version] = None if names is None else names | ports.keys()
            yield version, NftTable(family(version), chains, {**sets[version], **ports}, maps)

    def adopt(self, readings: Mapping[int, Reading[KernelTable | None]]) -> None:
        """Each version's table read before this manager was (``NftablesWriting.adopt``)."""
        for version, reading in readings.items():
            if version in self.writers:
                self.writers[version].adopt(reading)

    async def read_unknown(self) -> None:
        """Read every table whose contents are not known (at the start, after a refresh or
        a failure), all at once: a write then starts with its transaction."""
        async with trio.open_nursery() as nursery:
            for writer in self.writers.values():
                nursery.start_soon(writer.know)

    async def write(self, version: int, table: NftTable) -> bool:
        """Write what differs; only the sets named changed are compared (all after a
        refresh, a failure or a full render)."""
        try:
            wrote = await self.writers[version].apply(table, self._changed.get(version))
        except DataplaneWriteError:
            self._sets = None
            raise
        if self.stats is not None:
            rules = sum(len(chain.rules) for chain in table.chains.values())
            sizes = (len(table.chains), rules, len(table.sets), len(table.maps))
            self.stats.nft[version] = sizes
        return wrote
