"""The IP sets manager with the fake kernel's ipset writer (which, as the real one, writes
only the sets it is told changed): what ``on_update`` notes is what is written."""

from __future__ import annotations

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix_dataplane.linux.managers.ipsets import IpsetsManager
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeIpsets, FakeNode


@attrs.define
class Managed:
    state: NodeState = attrs.Factory(NodeState)
    node: FakeNode = attrs.Factory(FakeNode)
    manager: IpsetsManager = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.manager = IpsetsManager(self.state, FakeIpsets(self.node), (4, 6))

    def send(self, *messages: m.ToDataplane) -> None:
        for msg in messages:
            self.state.apply(msg)
            self.manager.on_update(msg)

    async def apply(self) -> None:
        self.manager.desired()
        await self.manager.complete_deferred_work()
        await self.manager.clean_up()

    def members(self, name: str) -> set[str]:
        return self.node.sets[name][1]


async def test_a_delta_writes_its_set_and_each_version_gets_its_members() -> None:
    r = Managed()
    r.send(m.IPSetUpdate("s:a", "hash:net", frozenset({"10.0.0.1/32", "fd00::1/128"})))
    await r.apply()
    assert r.members("cali40s:a") == {"10.0.0.1/32"}
    assert r.members("cali60s:a") == {"fd00::1/128"}
    r.send(m.IPSetDeltaUpdate("s:a", frozenset({"10.0.0.2/32"}), frozenset({"10.0.0.1/32"})))
    await r.apply()
    assert r.members("cali40s:a") == {"10.0.0.2/32"}


async def test_only_the_sets_noted_are_compared_until_a_refresh() -> None:
    """A set changed in the kernel behind the manager's back stays as it is while no message
    names it (the writer is told which sets changed); the refresh (``invalidate``) compares
    every set and puts it right."""
    r = Managed()
    r.send(
        m.IPSetUpdate("s:a", "hash:net", frozenset({"10.0.0.1/32"})),
        m.IPSetUpdate("s:b", "hash:net", frozenset({"10.0.1.1/32"})),
    )
    await r.apply()
    r.members("cali40s:b").clear()
    r.send(m.IPSetDeltaUpdate("s:a", frozenset({"10.0.0.2/32"}), frozenset()))
    await r.apply()
    assert r.members("cali40s:a") == {"10.0.0.1/32", "10.0.0.2/32"}
    assert r.members("cali40s:b") == set()
    r.manager.invalidate()
    await r.apply()
    assert r.members("cali40s:b") == {"10.0.1.1/32"}


async def test_a_removed_set_is_destroyed_at_the_clean_up() -> None:
    r = Managed()
    r.send(m.IPSetUpdate("s:a", "hash:net", frozenset({"10.0.0.1/32"})))
    await r.apply()
    r.send(m.IPSetRemove("s:a"))
    await r.apply()
    assert "cali40s:a" not in r.node.sets
    assert "ipset destroy cali40s:a" in r.node.log


async def test_the_special_sets_follow_the_pools() -> None:
    """The pools and masquerade sets are not IP set messages: they follow the pools,
    which move the rules generation."""
    r = Managed()
    await r.apply()
    pool = model.IPPool("10.65.0.0/16", "Never", "Never", True, False)
    r.send(m.IPAMPoolUpdate("pool-1", pool))
    await r.apply()
    assert r.members("cali40network-ip-pools") == {"10.65.0.0/16"}
    assert r.members("cali40masq-ipam-pools") == {"10.65.0.0/16"}


async def test_a_disabled_pool_stays_in_the_masquerade_set() -> None:
    """As Felix: disabling a pool only stops IPAM assigning from it; the pods still in it
    keep being masqueraded (the pool's natOutgoing)."""
    r = Managed()
    pool = model.IPPool("10.66.0.0/16", "Never", "Always", True, True)
    r.send(m.IPAMPoolUpdate("old-pool", pool))
    await r.apply()
    assert r.members("cali40masq-ipam-pools") == {"10.66.0.0/16"}
