"""The Linux driver's loop against a fake kernel: apply order, retry, repair and status, with no
root (the writers themselves are tested against the real kernel in test_linux_*.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix import model
from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import IptablesBackend, NFTablesMode
from pyfelix.errors import DataplaneWriteError, FatalShutdown, RestartRequired
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.driver import LinuxDriver
from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.kernel import EarlyReaders, Kernel, KernelProbe
from pyfelix_dataplane.linux.routes import RouteTarget
from pyfelix_dataplane.rules.ipsets import ipset_name
from pyfelix_dataplane.state import NodeState
from tests.calc_harness import example_state, load_manifest
from tests.driver_harness import (
    Datastore,
    Running,
    messages_for,
    received,
    running,
    with_config,
)
from tests.fake_kernel import FakeNode, fake_kernel
from tests.rules_harness import ipip_cluster


async def test_first_apply_programs_sets_before_the_tables_that_use_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running() as r:
        await r.send(messages_for(example_state()))
        await r.settle()
        assert r.driver.stats.failures == 0
        assert any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))
        log = r.node.log
        first_table = min(i for i, entry in enumerate(log) if "committed" in entry)
        assert all(i < first_table for i, e in enumerate(log) if e.startswith("ipset create"))
        assert "cali-FORWARD" in r.node.tables[4]["filter"]
        assert r.node.sets_in_use() <= set(r.node.sets)
        assert r.node.routes, "local workloads are routed"


async def test_sets_that_fail_leave_the_tables_unwritten_until_they_are_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The sets' tool runs while the first version's tables are rendered, but no table is
    written before the sets are: when they fail, none is, and the retry writes both."""
    node = FakeNode(fail={"ipsets": [DataplaneWriteError("ipset restore", "boom", "")]})
    async with running(node) as r:
        await r.send(messages_for(example_state()))
        await r.settle(0.05)
        assert r.driver.stats.failures == 1
        assert not any("committed" in entry for entry in node.log)
        await r.settle(5)
        assert "cali-FORWARD" in node.tables[4]["filter"]
        first_table = min(i for i, entry in enumerate(node.log) if "committed" in entry)
        assert all(i < first_table for i, e in enumerate(node.log) if e.startswith("ipset create"))


async def test_a_set_goes_only_after_no_rule_uses_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Removing every policy: the chains that used the sets are rewritten first, then the sets
    are destroyed (the fake refuses to destroy a set in use, as the kernel does)."""
    state = example_state()
    datastore = Datastore()
    async with running() as r:
        await r.send(datastore.snapshot(state))
        await r.settle()
        before = set(r.node.sets)
        policies = [k for k in state if k[0] in ("GlobalNetworkPolicy", "NetworkPolicy")]
        removals = datastore.delete(policies)
        assert any(isinstance(x, m.IPSetRemove) for x in removals)
        await r.send(removals)
        await r.settle()
        assert r.driver.stats.failures == 0
        assert set(r.node.sets) < before
        assert r.node.sets_in_use() <= set(r.node.sets)


async def test_a_failed_write_is_retried_and_the_other_areas_still_written(
    autojump_clock: trio.testing.MockClock,
) -> None:
    node = FakeNode()
    # Both versions fail in the first apply, one in the second; the third succeeds.
    node.fail["tables"] = [DataplaneWriteError("iptables-restore", "boom", "-A cali-x")] * 3
    async with running(node) as r:
        await r.send(messages_for(example_state()))
        await trio.sleep(0.05)
        assert r.node.routes, "routes are written although the tables failed"
        assert not any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))
        await r.settle(5)
        assert r.driver.stats.failures == 2
        assert "cali-FORWARD" in r.node.tables[4]["filter"]
        assert any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc))


async def test_tampering_is_repaired_on_the_refresh_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # No post-write check within the test: only the refresh periods repair.
    settings = {"IptablesPostWriteCheckIntervalSecs": "1000"}
    async with running() as r:
        await r.send(with_config(messages_for(example_state()), **settings))
        await r.settle()
        filter_table = r.node.tables[4]["filter"]
        policy_chain = next(name for name in filter_table if name.startswith("cali-pi-"))
        wanted = list(filter_table[policy_chain])
        filter_table[policy_chain].clear()
        some_set = next(iter(r.node.sets))
        members = set(r.node.sets[some_set][1])
        r.node.sets[some_set][1].clear()
        await r.settle(60)
        assert r.node.tables[4]["filter"][policy_chain] == []
        await r.settle(40)  # IpsetsRefreshInterval 90 s
        assert r.node.sets[some_set][1] == members
        await r.settle(90)  # IptablesRefreshInterval 180 s
        assert r.node.tables[4]["filter"][policy_chain] == wanted


NEW_POLICY = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: mid-apply}
spec:
  selector: all()
  types: [Ingress]
  ingress: [{action: Allow, source: {selector: brand-new == "set"}}]
"""


@pytest.mark.parametrize("during", ["ipsets", "plan"])
async def test_rules_never_name_a_set_the_same_apply_did_not_write(
    during: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A policy (and its new IP set) arriving while the IP sets are being written, or while
    the IPv4 tables' write is planned (before the IPv6 ones are rendered): the tables written
    in that apply are rendered from the same state as the sets, so no rule names a set the
    kernel does not have (the fake refuses such a table, as the kernel does); the next apply
    brings both."""
    datastore = Datastore()
    snapshot = datastore.snapshot(example_state())
    late = datastore.put([load_manifest(NEW_POLICY)])
    assert any(isinstance(x, m.IPSetUpdate) for x in late)
    async with running() as r:

        async def meanwhile() -> None:
            await r.send(late)

        setattr(r.node, f"during_{during}", meanwhile)
        await r.send(snapshot)
        await r.settle()
        assert getattr(r.node, f"during_{during}") is None, "the late messages were sent"
        assert r.driver.stats.failures == 0
        filter_table = r.node.tables[4]["filter"]
        assert "cali-pi-gnp/mid-apply" in filter_table


async def test_reporting_interval_zero_turns_status_reports_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ReportingIntervalSecs 0 means no process status reports (Felix's meaning), not every
    30 s: only the one sent at start, before the configuration was known."""
    async with running() as r:
        await trio.sleep(1)
        config = m.ConfigUpdate(FrozenMap({"ReportingIntervalSecs": "0"}))
        await r.send([config, *messages_for(example_state())[1:]])
        await trio.sleep(300)
        statuses = [x for x in received(r.to_calc) if isinstance(x, m.ProcessStatusUpdate)]
        assert len(statuses) == 1


async def test_a_lone_change_goes_at_once_and_a_storm_is_throttled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A change is applied as soon as it arrives (no fixed delay before an apply); a steady
    stream of changes drains the leaky bucket, then applies follow its refill, each taking
    every change that arrived meanwhile."""
    async with running() as r:
        await r.send(
            [*messages_for(example_state()), m.IPSetUpdate("s:probe", "hash:net", frozenset())]
        )
        await r.settle()
        name = "cali40s:probe"
        applies = r.driver.stats.applies.count
        started = trio.current_time()
        await r.send([m.IPSetDeltaUpdate("s:probe", frozenset({"10.9.0.1/32"}), frozenset())])
        while "10.9.0.1/32" not in r.node.sets[name][1]:
            await trio.sleep(0.0001)
        assert trio.current_time() - started < 0.001
        for n in range(200):  # one change every millisecond for 200 ms
            member = frozenset({f"10.9.1.{n}/32"})
            await r.send([m.IPSetDeltaUpdate("s:probe", member, frozenset())])
            await trio.sleep(0.001)
        await r.settle()
        stream = r.driver.stats.applies.count - applies - 1
        assert 15 <= stream <= 10 + 200 / 10 + 2, stream
        assert {f"10.9.1.{n}/32" for n in range(200)} <= r.node.sets[name][1]


def test_rules_generation_ignores_members_and_local_labels() -> None:
    """The Linux driver renders its chains again only when the rules generation moves: never
    for IP set members or a label change (the IP set messages carry those), always for
    anything else, an endpoint's profiles included."""
    state = NodeState()
    key = model.WorkloadEndpointKey("node", "k8s", "ns/pod", "eth0")
    endpoint = model.WorkloadEndpoint("active", "cali1", "", (), ("10.0.0.1/32",), (), FrozenMap())
    state.apply(m.WorkloadEndpointUpdate(key, endpoint, ()))
    generation = state.rules_generation
    relabelled = attrs.evolve(endpoint, labels=FrozenMap({"role": "client"}))
    state.apply(m.WorkloadEndpointUpdate(key, relabelled, ()))
    state.apply(m.IPSetUpdate("s:a", "hash:net", frozenset({"10.0.0.1/32"})))
    state.apply(m.IPSetDeltaUpdate("s:a", frozenset(), frozenset({"10.0.0.1/32"})))
    state.apply(m.IPSetRemove("s:a"))
    assert state.rules_generation == generation
    state.apply(
        m.WorkloadEndpointUpdate(key, attrs.evolve(relabelled, profile_ids=("kns.ns",)), ())
    )
    assert state.rules_generation == generation + 1


async def _first_apply(r: Running, messages: list[Any]) -> None:
    await r.send(messages)
    with trio.fail_after(30):
        while not any(isinstance(x, m.DataplaneInSync) for x in received(r.to_calc)):
            await trio.sleep(0.1)


def _without_pools() -> list[Any]:
    """The example node with no IP pool and no FelixConfiguration (the example's turn VXLAN
    on), so no tunnel."""
    state = {
        key: value
        for key, value in example_state().items()
        if key[0] not in ("IPPool", "FelixConfiguration")
    }
    return messages_for(state)


async def test_the_pods_mtu_is_the_smallest_tunnels_of_the_host_mtu(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """As Felix: the host MTU is the smallest of the running interfaces MTUIfacePattern
    matches (not cali*, not a down one); VXLAN's MTU is it less 50; the pods' MTU (the mtu
    file, for the CNI plugin) is the smallest MTU of the tunnels that are on."""
    node = FakeNode(
        links=[("eth0", 9001, True), ("ens5", 8000, False), ("cali1", 1400, True), ("lo", 0, True)]
    )
    async with running(node, state_dir=tmp_path) as r:
        await _first_apply(r, _without_pools())
        assert (tmp_path / "mtu").read_text() == "9001"
    async with running(node, state_dir=tmp_path) as r:
        await _first_apply(r, messages_for(example_state()))
        assert (tmp_path / "mtu").read_text() == "8951"
        device = node.vxlan[0]
        assert device is not None
        assert device.mtu == 8951


async def test_a_configured_tunnel_mtu_and_an_unmatched_host(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """VXLANMTU set is the pods' MTU; with no interface matching, the host MTU is 1460."""
    node = FakeNode(links=[("weird0", 9000, True)])
    config = m.ConfigUpdate(FrozenMap({"VXLANMTU": "1300"}))
    async with running(node, state_dir=tmp_path) as r:
        await _first_apply(r, [config, *messages_for(example_state())[1:]])
        assert (tmp_path / "mtu").read_text() == "1300"
    async with running(node, state_dir=tmp_path) as r:
        await _first_apply(r, _without_pools())
        assert (tmp_path / "mtu").read_text() == "1460"


async def test_require_mtu_file_makes_an_unwritable_state_dir_fatal(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    config = m.ConfigUpdate(FrozenMap({"RequireMTUFile": "true"}))
    with pytest.RaisesGroup(
        pytest.RaisesExc(FatalShutdown, match="RequireMTUFile"), flatten_subgroups=True
    ):
        async with running(state_dir=blocked / "state") as r:
            await r.send([config, *messages_for(example_state())[1:]])
            await trio.sleep(60)
    # Without it, the agent goes on (and says why pods may get a wrong MTU).
    async with running(state_dir=blocked / "state") as r:
        await _first_apply(r, messages_for(example_state()))


async def test_a_changed_host_mtu_restarts_the_agent(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    node = FakeNode()
    with pytest.RaisesGroup(
        pytest.RaisesExc(RestartRequired, match="1500 to 1450"), flatten_subgroups=True
    ):
        async with running(node, state_dir=tmp_path) as r:
            await _first_apply(r, messages_for(example_state()))
            await trio.sleep(45)  # one check later: unchanged, still running
            node.links = [("eth0", 1450, True)]
            await trio.sleep(60)


async def test_a_table_clobbered_after_a_write_is_repaired_on_felixs_post_write_checks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """IptablesPostWriteCheckIntervalSecs (5 s) after a write, then 10 s, 20 s, ... after it:
    another program flushing a chain just written is found long before the 180 s refresh."""
    async with running() as r:
        await r.send(messages_for(example_state()))
        await r.settle(0.5)
        filter_table = r.node.tables[4]["filter"]
        policy_chain = next(name for name in filter_table if name.startswith("cali-pi-"))
        wanted = list(filter_table[policy_chain])
        filter_table[policy_chain].clear()
        await r.settle(5)  # the 5 s check
        assert r.node.tables[4]["filter"][policy_chain] == wanted
        filter_table = r.node.tables[4]["filter"]
        filter_table[policy_chain].clear()
        await r.settle(3)  # before the 10 s check
        assert r.node.tables[4]["filter"][policy_chain] == []
        await r.settle(3)
        assert r.node.tables[4]["filter"][policy_chain] == wanted


async def test_a_label_change_does_not_wait_for_a_post_write_check(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Reading a large node's tables back takes 0.1-0.3 s: the post-write check runs beside
    the applies, so an IP set member written meanwhile reaches the kernel at once, and the
    check still repairs a table clobbered before it."""
    messages = messages_for(example_state())
    ipset = next(x for x in messages if isinstance(x, m.IPSetUpdate) and x.type == "hash:net")
    async with running() as r:
        await r.send(messages)
        await r.settle(1)  # programmed at once; the first post-write check is due at 5 s
        r.node.table_read_seconds = r.node.check_read_seconds = 2.0
        filter_table = r.node.tables[4]["filter"]
        policy_chain = next(name for name in filter_table if name.startswith("cali-pi-"))
        wanted = list(filter_table[policy_chain])
        filter_table[policy_chain].clear()
        await r.settle(5)  # the check has been reading for a second
        await r.send([m.IPSetDeltaUpdate(ipset.id, frozenset({"10.99.0.1/32"}), frozenset())])
        await r.settle(0.1)
        assert "10.99.0.1/32" in r.node.sets[ipset_name(ipset.id)][1]
        assert r.node.tables[4]["filter"][policy_chain] == []
        await r.settle(4)  # the check found the chain; the next apply rewrote it
        assert r.node.tables[4]["filter"][policy_chain] == wanted


async def test_the_first_apply_reads_both_versions_tables_at_its_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Reading the tables takes a second here: the first apply reads both versions' tables at
    once, at its start, and plans from those readings, so it is done a second after InSync
    (not two, one reading after the other). A later apply plans from what the first wrote,
    reading nothing back (as Felix keeps the hashes it wrote): it is done at once."""
    datastore = Datastore()
    node = FakeNode(table_read_seconds=1.0)
    settings = {"IptablesPostWriteCheckIntervalSecs": "1000"}  # no check reads meanwhile
    async with running(node) as r:
        started = trio.current_time()
        await _first_apply(r, with_config(datastore.snapshot(example_state()), **settings))
        assert trio.current_time() - started < 1.5
        assert node.table_reads == 2
        await r.send(datastore.put([load_manifest(NEW_POLICY)]))
        await r.settle(0.1)
        assert "cali-pi-gnp/mid-apply" in node.tables[6]["filter"]
        assert node.table_reads == 2


async def test_a_check_overlapped_by_our_own_write_reads_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A check whose reading a write of ours overlaps reads again, rather than leaving it to
    the next check: a table that write did not touch (raw), which another program clobbered,
    is repaired from the second reading."""
    datastore = Datastore()
    async with running() as r:
        await r.send(datastore.snapshot(example_state()))
        await r.settle(1)  # written at once; the post-write check is due at 5 s
        # A check reads every table (3 s here), a plan only those it writes (0.5 s).
        r.node.table_read_seconds, r.node.check_read_seconds = 0.5, 3.0
        raw = r.node.tables[4]["raw"]
        wanted = list(raw["cali-failsafe-in"])
        raw["cali-failsafe-in"].clear()
        await r.settle(4.5)
        # A new policy at 5.5 s: its apply writes the filter tables at 6 and 6.5 s, while
        # the check reads (5-8 s); the check reads again (8-11 s); the repair is at 11.5 s.
        await r.send(datastore.put([load_manifest(NEW_POLICY)]))
        await r.settle(7.5)
        assert "cali-pi-gnp/mid-apply" in r.node.tables[4]["filter"]
        assert r.node.tables[4]["raw"]["cali-failsafe-in"] == wanted


async def test_interfaces_are_rescanned_on_interface_refresh_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A workload route lost without a netlink event is put back at the next rescan of the
    interfaces (InterfaceRefreshInterval), long before the route refresh; 0 turns it off."""
    for interval, repaired in (("10", True), ("0", False)):
        settings = {"InterfaceRefreshInterval": interval, "RouteRefreshInterval": "1000"}
        node = FakeNode()
        async with running(node) as r:
            await _first_apply(r, with_config(messages_for(example_state()), **settings))
            workload = next(u.endpoint.name for u in r.driver.state.workloads.values())
            node.links.append((workload, 1500, True))
            lost = next(d for d, t in node.routes.items() if t.interface == workload)
            del node.routes[lost]
            await r.settle(12)
            assert (lost in node.routes) == repaired


async def test_ipip_device_routes_and_mtu(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """An IPIP pool: tunl0 up with the node's IPIP address and the host MTU less 20 (also the
    pods' MTU); remote blocks onlink via their node's address out of tunl0, unless
    ProgramClusterRoutes leaves cluster routes to BIRD."""
    resources = ipip_cluster(tmp_path / "cluster")
    state = {(r.KIND, r.namespace, r.name): r for r in resources}
    for settings, routed in (({}, True), ({"ProgramClusterRoutes": "Disabled"}, False)):
        node = FakeNode()
        async with running(node, state_dir=tmp_path) as r:
            await _first_apply(r, with_config(messages_for(state), **settings))
            assert node.ipip == IpipDevice(address="10.65.0.1", mtu=1480)
            assert (tmp_path / "mtu").read_text() == "1480"
            block = node.routes.get("10.65.1.0/26")
            if routed:
                assert block == RouteTarget("tunl0", gateway="192.168.56.12")
            else:
                assert block is None


async def test_kube_proxy_in_ipvs_mode_gets_felix_s_ipvs_chains(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Where kube-ipvs0 exists at start, the first apply programs Felix's IPVS chains: the
    forward check in INPUT, the endpoint marks, and the diversion in OUTPUT; elsewhere none
    of them."""
    for links, ipvs in (([("eth0", 1500, True), ("kube-ipvs0", 1500, False)], True), ([], False)):
        async with running(FakeNode(links=links)) as r:
            await _first_apply(r, messages_for(example_state()))
            filter_table = r.node.tables[4]["filter"]
            assert ("cali-forward-check" in filter_table) == ipvs
            assert ("cali-set-endpoint-mark" in filter_table) == ipvs
            input_rules = " ".join(filter_table["cali-INPUT"])
            assert ("--jump cali-forward-check" in input_rules) == ipvs
            assert ("cali40this-host" in r.node.sets) is True


@pytest.mark.parametrize("fails", [False, True])
async def test_the_kernel_is_probed_before_insync_with_the_startup_configuration(
    fails: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The read-only probe (iptables backend, nftables mode) runs while the snapshot loads,
    with the configuration the agent started with; at InSync the kernel is opened with it. A
    probe that fails early is left for the opening at InSync."""
    node = FakeNode()
    send, _receive = trio.open_memory_channel[Any](1000)
    probed: list[FelixConfig] = []
    opened: list[KernelProbe | None] = []
    startup = FelixConfig(iptables_backend=IptablesBackend.LEGACY)
    made = KernelProbe(IptablesBackend.LEGACY, startup.nftables_mode, "legacy", False)

    async def probe(config: FelixConfig) -> KernelProbe:
        probed.append(config)
        if fails:
            raise DataplaneWriteError("iptables-legacy-save", "no such table")
        return made

    async def open_kernel(config: FelixConfig, probe: KernelProbe | None) -> Kernel:
        opened.append(probe)
        return fake_kernel(node)

    driver = LinuxDriver(
        send,
        "node-a",
        open_kernel=open_kernel,
        probe_kernel=probe,
        early_readers=lambda config, probe: EarlyReaders(tables=fake_kernel(node).tables),
        startup_config=startup,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await trio.sleep(1)
        assert probed == [startup], "probed before any message arrived"
        assert not opened
        for message in messages_for(example_state()):
            await driver.apply(message)
        await trio.sleep(1)
        assert opened == [None if fails else made]
        assert driver.stats.failures == 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("backend_changed", [False, True])
async def test_a_restarted_nodes_tables_are_read_while_the_snapshot_loads(
    backend_changed: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Reading the tables takes a second here, and the snapshot arrives two seconds after the
    start: the tables are read with the probe, so the first apply plans at once from those
    readings and is done well within a second of InSync. Unless the snapshot's configuration
    chose another backend than the one probed: then the readings are not taken, and the
    first apply reads for itself."""
    node = FakeNode(table_read_seconds=1.0)
    send, receive = trio.open_memory_channel[Any](1000)
    startup = FelixConfig()
    made = KernelProbe(startup.iptables_backend, startup.nftables_mode, "nft", False)
    read_for: list[FelixConfig] = []

    async def probe(config: FelixConfig) -> KernelProbe:
        return made

    async def open_kernel(config: FelixConfig, probe: KernelProbe | None) -> Kernel:
        return fake_kernel(node)

    def readers(config: FelixConfig, probe: KernelProbe) -> EarlyReaders:
        read_for.append(config)
        return EarlyReaders(tables=fake_kernel(node).tables)

    driver = LinuxDriver(
        send,
        "node-a",
        open_kernel=open_kernel,
        probe_kernel=probe,
        early_readers=readers,
        startup_config=startup,
    )
    messages = messages_for(example_state())
    if backend_changed:
        messages = with_config(messages, IptablesBackend="Legacy")
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        await trio.sleep(2)
        assert read_for == [startup]
        r = Running(driver, node, receive)
        in_sync = trio.current_time()
        await _first_apply(r, messages)
        took = trio.current_time() - in_sync
        assert (took >= 1.0) == backend_changed, took
        assert node.plans_read_ahead == 2
        nursery.cancel_scope.cancel()


def test_a_probe_stands_only_for_the_settings_it_was_made_for() -> None:
    probe = KernelProbe(IptablesBackend.AUTO, NFTablesMode.DISABLED, "nft", False)
    assert probe.answers(FelixConfig(nftables_mode=NFTablesMode.DISABLED))
    assert not probe.answers(
        FelixConfig(iptables_backend=IptablesBackend.LEGACY, nftables_mode=NFTablesMode.DISABLED)
    )
    assert not probe.answers(FelixConfig(nftables_mode=NFTablesMode.ENABLED))


def test_the_node_state_notes_namespaces_and_accounts_without_their_labels() -> None:
    """No manager reads a namespace's or service account's labels: the state the driver and
    the dry-run keep notes which were sent, so that their removals are known, and holds no
    message; a change of labels changes nothing there."""
    state = NodeState()
    account = m.ServiceAccountID("prod", "web")
    state.apply(m.NamespaceUpdate("prod", FrozenMap({"team": "a"})))
    state.apply(m.ServiceAccountUpdate(account, FrozenMap({"role": "web"})))
    state.apply(m.NamespaceUpdate("prod", FrozenMap({"team": "b"})))
    assert state.namespaces == {"prod": None}
    assert state.service_accounts == {account: None}
    assert state.holds(m.NamespaceRemove("prod"))
    assert state.holds(m.ServiceAccountRemove(account))
    assert not state.holds(m.NamespaceRemove("dev"))
    state.apply(m.NamespaceRemove("prod"))
    state.apply(m.ServiceAccountRemove(account))
    assert not state.namespaces
    assert not state.service_accounts
