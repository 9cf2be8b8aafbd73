"""The Linux driver's loop in both table modes, against the fake kernel: the iptables mode
(IP sets, then restores) and the nftables mode (a transaction per IP version). Each fake
refuses what its kernel would (a rule naming a missing set or chain), so the driver's order,
retry and repair hold in each mode without root."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix import model
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.rules.nft import render_nftables
from pyfelix_dataplane.rules.render import kernel_ipsets
from pyfelix_dataplane.state import NodeState
from tests.calc_harness import example_state, load_manifest
from tests.driver_harness import Datastore, Running, messages_for, received, running, with_config
from tests.fake_kernel import FakeNode

MODES = pytest.mark.parametrize("nftables", [False, True], ids=["iptables", "nftables"])
#: What a failed table write is injected as, per mode.
FAILURES = {
    False: ("tables", DataplaneWriteError("iptables-restore", "boom", "-A cali-x")),
    True: ("nftables", DataplaneWriteError("nft", "boom", "add rule ip calico cali-x")),
}

NEW_POLICY = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: late}
spec:
  selector: all()
  types: [Ingress]
  ingress: [{action: Allow, source: {selector: brand-new == "set"}}]
"""


def assert_as_rendered(r: Running) -> None:
    """The kernel holds what a fresh rendering of the driver's state gives: in the nftables
    mode each version's whole table, in the iptables mode the IP sets (the chains' text is
    the planner's, tested with the real tools)."""
    state: NodeState = r.driver.state
    if r.nftables:
        assert r.node.nft == render_nftables(state, (4, 6))
    else:
        kernel = {name: (t, frozenset(s)) for name, (t, s) in r.node.sets.items()}
        assert kernel == kernel_ipsets(state, (4, 6))


@MODES
async def test_the_first_apply_programs_the_node_and_reports_in_sync(
    nftables: bool, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(nftables=nftables) as r:
        await r.send(messages_for(example_state()))
        await r.settle()
        assert r.driver.stats.failures == 0
        assert any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))
        assert {"cali-FORWARD", "cali-INPUT"} <= r.chains(4)
        assert any(name.startswith("cali-pi-") for name in r.chains(6))
        assert r.node.routes, "local workloads are routed"
        assert_as_rendered(r)


@MODES
async def test_a_failed_table_write_is_retried_and_the_routes_still_written(
    nftables: bool, autojump_clock: trio.testing.MockClock
) -> None:
    kind, error = FAILURES[nftables]
    node = FakeNode(fail={kind: [error] * 3})
    async with running(node, nftables=nftables) as r:
        await r.send(messages_for(example_state()))
        await trio.sleep(0.05)
        assert r.node.routes, "routes are written although the tables failed"
        assert not any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))
        await r.settle(5)
        assert r.driver.stats.failures >= 2
        assert "cali-FORWARD" in r.chains(4)
        assert any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))
        assert_as_rendered(r)


@MODES
async def test_a_policy_and_its_new_set_arrive_together(
    nftables: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """A later policy brings a new IP set; the fakes refuse a rule naming a set the kernel
    lacks, so no failure means the set went in first (or in the same transaction)."""
    datastore = Datastore()
    async with running(nftables=nftables) as r:
        await r.send(datastore.snapshot(example_state()))
        await r.settle()
        await r.send(datastore.put([load_manifest(NEW_POLICY)]))
        await r.settle()
        assert r.driver.stats.failures == 0
        assert "cali-pi-gnp/late" in r.chains(4), r.chains(4)
        assert_as_rendered(r)
        await r.send(datastore.delete([("GlobalNetworkPolicy", "", "late")]))
        await r.settle()
        assert r.driver.stats.failures == 0
        assert "cali-pi-gnp/late" not in r.chains(4)
        assert_as_rendered(r)


def _tamper(r: Running) -> tuple[str, Any]:
    """Empty a policy chain in the kernel behind the driver's back: its name, and its rules."""
    if r.nftables:
        table = r.node.nft[4]
        name = next(name for name in table.chains if name.startswith("filter-cali-pi-"))
        chain = table.chains[name]
        emptied = {**table.chains, name: type(chain)(name, ())}
        r.node.nft[4] = type(table)(table.family, emptied, table.sets, table.maps)
        return name, chain.rules
    filter_table = r.node.tables[4]["filter"]
    name = next(name for name in filter_table if name.startswith("cali-pi-"))
    wanted = list(filter_table[name])
    filter_table[name].clear()
    return name, wanted


def _rules(r: Running, name: str) -> Any:
    if r.nftables:
        return r.node.nft[4].chains[name].rules
    return r.node.tables[4]["filter"][name]


@MODES
async def test_a_tampered_chain_is_repaired_on_its_refresh_period(
    nftables: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """IptablesRefreshInterval and NftablesRefreshInterval (180 s each, with no post-write
    check meanwhile) bring a chain another program emptied back."""
    settings = {"IptablesPostWriteCheckIntervalSecs": "1000"}
    async with running(nftables=nftables) as r:
        await r.send(with_config(messages_for(example_state()), **settings))
        await r.settle()
        name, wanted = _tamper(r)
        await r.settle(150)
        assert not _rules(r, name)
        await r.settle(60)
        assert _rules(r, name) == wanted


@MODES
async def test_sets_stay_exact_through_incremental_applies(
    nftables: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Random set creations, deltas, removals and pool changes (which move the special sets),
    with a failed write now and then: after every apply the kernel holds exactly the sets the
    state describes, though each apply writes only the sets that changed (the nftables fake
    keeps a set not named changed as it was, as the real writer does)."""
    rng = random.Random(7)
    members = [f"10.{i // 250}.{i % 250}.1/32" for i in range(60)] + ["fd00::1/128"]
    kind = "nftables" if nftables else "ipsets"
    async with running(nftables=nftables) as r:
        await r.send(messages_for(example_state()))
        await r.settle()
        live: set[str] = set()
        for step in range(80):
            roll = rng.random()
            set_id = f"s:random-{rng.randrange(6)}"
            msg: Any
            if roll < 0.2 or set_id not in live:
                chosen = frozenset(rng.sample(members, rng.randrange(5)))
                msg = m.IPSetUpdate(set_id, "hash:net", chosen)
                live.add(set_id)
            elif roll < 0.7:
                present = sorted(r.driver.state.ipsets[set_id][1])
                removed = frozenset(rng.sample(present, 1)) if present else frozenset()
                msg = m.IPSetDeltaUpdate(
                    set_id, frozenset(rng.sample(members, 2)) - removed, removed
                )
            elif roll < 0.85:
                msg = m.IPSetRemove(set_id)
                live.discard(set_id)
            else:
                cidr = f"10.{rng.randrange(200, 250)}.0.0/16"
                pool = model.IPPool(cidr, "Never", "Never", rng.random() < 0.5, False)
                msg = m.IPAMPoolUpdate(f"pool-{rng.randrange(3)}", pool)
            if step % 17 == 5:
                r.node.fail[kind] = [DataplaneWriteError(kind, "boom", "")]
            await r.send([msg])
            await r.settle(rng.choice([0.0005, 0.02, 0.5]))
            if r.node.fail.get(kind):
                continue  # the failed write has not been retried yet
            await r.settle(1)
            assert_as_rendered(r)
