"""The nftables manager with the fake kernel's nftables writer: each version's table rendered
and written in one transaction, a member change naming only its set, a tampered table found
by the check; and the fake refusing what nft refuses."""

from __future__ import annotations

import attrs
import pytest

from pyfelix import messages as m
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.managers.nftables import NftablesManager
from pyfelix_dataplane.rules.nft import NftChain, NftRule, render_nftables
from pyfelix_dataplane.state import NodeState
from tests.calc_harness import example_state
from tests.driver_harness import messages_for
from tests.fake_kernel import FakeNftables, FakeNode


@attrs.define
class Managed:
    state: NodeState = attrs.Factory(NodeState)
    node: FakeNode = attrs.Factory(FakeNode)
    manager: NftablesManager = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        writers = {v: FakeNftables(self.node, v) for v in (4, 6)}
        self.manager = NftablesManager(self.state, writers)

    def send(self, *messages: m.ToDataplane) -> None:
        for msg in messages:
            self.state.apply(msg)
            self.manager.on_update(msg)

    async def apply(self) -> list[bool]:
        await self.manager.read_unknown()
        key = self.state.rules_generation
        return [
            await self.manager.write(version, table)
            for version, table in self.manager.render(self.state, key)
        ]


async def test_each_version_holds_the_rendered_table() -> None:
    r = Managed()
    r.send(*messages_for(example_state()))
    assert await r.apply() == [True, True]
    assert r.node.nft == render_nftables(r.state, (4, 6))
    assert await r.apply() == [False, False]


async def test_a_member_change_reaches_its_set() -> None:
    r = Managed()
    r.send(*messages_for(example_state()), m.IPSetUpdate("s:x", "hash:net", frozenset()))
    await r.apply()
    r.send(m.IPSetDeltaUpdate("s:x", frozenset({"10.9.0.1/32"}), frozenset()))
    assert await r.apply() == [True, False]
    assert r.node.nft[4].sets["cali40s-x"].elements == frozenset({"10.9.0.1"})


async def test_a_tampered_table_is_found_by_the_check_and_repaired() -> None:
    r = Managed()
    r.send(*messages_for(example_state()))
    await r.apply()
    wanted = r.node.nft[4]
    r.node.nft[4] = attrs.evolve(wanted, sets={})
    assert await r.manager.check()
    await r.apply()
    assert r.node.nft[4] == wanted
    assert not await r.manager.check()


async def test_the_fake_refuses_a_rule_naming_a_missing_set_or_chain() -> None:
    node = FakeNode()
    writer = FakeNftables(node, 4)
    table = render_nftables(NodeState(), (4,))[4]
    for text in ("ip saddr @cali40s-nowhere accept", "jump filter-cali-nowhere"):
        chain = NftChain("filter-cali-extra", (NftRule(text),))
        bad = attrs.evolve(table, chains={**table.chains, chain.name: chain})
        with pytest.raises(DataplaneWriteError, match="nowhere"):
            await writer.apply(bad)
    assert 4 not in node.nft
    assert await writer.apply(table)
