"""The iptables tables manager with the fake kernel's restore parser: chains rendered once per
key, a version's tables planned against the kernel and written only where they changed, and
a table another program clobbered found by the check beside the applies."""

from __future__ import annotations

from pyfelix_dataplane.linux.managers.ipsets import IpsetsManager
from pyfelix_dataplane.linux.managers.tables import TablesManager
from pyfelix_dataplane.state import NodeState
from tests.calc_harness import example_state
from tests.driver_harness import messages_for
from tests.fake_kernel import FakeIpsets, FakeNode, FakeTables


async def programmed() -> tuple[NodeState, FakeNode, TablesManager]:
    """The example's node, its sets and both versions' tables written once."""
    state, node = NodeState(), FakeNode()
    for msg in messages_for(example_state()):
        state.apply(msg)
    ipsets = IpsetsManager(state, FakeIpsets(node), (4, 6))
    ipsets.desired()
    await ipsets.complete_deferred_work()
    manager = TablesManager({v: FakeTables(node, v) for v in (4, 6)})
    for version in (4, 6):
        chains = manager.render(state, "key", version)
        script, tables = await manager.plan(version, chains)
        await manager.write(version, script, tables)
    return state, node, manager


async def test_the_chains_are_rendered_once_per_key() -> None:
    state, _, manager = await programmed()
    assert manager.rendered("key")
    assert manager.render(state, "key", 4) is manager.render(state, "key", 4)
    assert not manager.rendered("another key")


async def test_nothing_is_written_again_while_the_chains_are_the_same() -> None:
    state, node, manager = await programmed()
    assert "cali-FORWARD" in node.tables[4]["filter"]
    committed = len(node.log)
    script, tables = await manager.plan(4, manager.render(state, "key", 4))
    assert not script
    assert tables == {}
    assert len(node.log) == committed


async def test_a_clobbered_table_is_found_by_the_check_and_rewritten() -> None:
    state, node, manager = await programmed()
    policy = next(name for name in node.tables[4]["filter"] if name.startswith("cali-pi-"))
    wanted = list(node.tables[4]["filter"][policy])
    node.tables[4]["filter"][policy].clear()
    assert await manager.check()
    chains = manager.render(state, "key", 4)
    script, tables = await manager.plan(4, chains)
    assert set(tables) == {"filter"}
    await manager.write(4, script, tables)
    assert node.tables[4]["filter"][policy] == wanted
    assert not await manager.check()


async def test_what_a_write_leaves_is_known_without_reading_it_back() -> None:
    """After each write the manager knows each table as a reading would find it (so the next
    plan reads nothing), another program's rule in a kernel chain included; a plan that
    would rewrite a kernel chain reads first."""
    state, node, manager = await programmed()
    node.table(4, "filter")["FORWARD"].append("-j ACCEPT")  # another program's, at the end
    manager.invalidate()
    for version in (4, 6):
        chains = manager.render(state, "key", version)
        script, tables = await manager.plan(version, chains)
        await manager.write(version, script, tables)
    reads = node.table_reads
    writers = manager.writers
    for (version, table), known in manager._kernel.items():
        assert known == (await writers[version].read([table]))[table], (version, table)
    assert node.table_reads == reads + len(manager._kernel)
    policy = next(name for name in node.tables[4]["filter"] if name.startswith("cali-pi-"))
    node.tables[4]["filter"][policy].clear()
    assert await manager.check()
    reads = node.table_reads
    script, tables = await manager.plan(4, manager.render(state, "key", 4))
    assert node.table_reads == reads + 1, "the changed table is read again"
    await manager.write(4, script, tables)
    assert node.tables[4]["filter"][policy]
