"""The host facts manager with a fake interface reader, as Felix's hostip_mgr_test.go drives
its manager: which addresses are the host's, when they are read again, and kube-proxy's mode
noted at the first apply."""

from __future__ import annotations

import pytest

from pyfelix import messages as m
from pyfelix.errors import RestartRequired
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.host_facts import HostFactsManager
from pyfelix_dataplane.rules.render import kernel_ipsets
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeInterfaces, FakeNode


def _manager(**addresses: frozenset[str]) -> tuple[HostFactsManager, FakeInterfaces]:
    interfaces = FakeInterfaces(addresses_by_name=dict(addresses))
    return HostFactsManager(NodeState(), interfaces), interfaces


async def test_the_host_s_addresses_leave_out_workloads_and_excluded_interfaces() -> None:
    """kube-ipvs0 (InterfaceExclude's default) holds the service addresses: they are not the
    host's, or the IPVS rules would take service traffic for the host's own."""
    manager, _ = _manager(
        eth0=frozenset({"192.0.2.10"}),
        lo=frozenset({"127.0.0.1"}),
        cali1234=frozenset({"169.254.1.1"}),
        **{"kube-ipvs0": frozenset({"10.96.0.10"})},
    )
    await manager.complete_deferred_work()
    assert manager.state.host_ips == {"192.0.2.10", "127.0.0.1"}
    sets = kernel_ipsets(manager.state, (4,))
    assert sets["cali40this-host"] == ("hash:ip", frozenset({"192.0.2.10", "127.0.0.1"}))


async def test_addresses_are_read_again_only_after_a_change_or_a_refresh() -> None:
    manager, interfaces = _manager(eth0=frozenset({"192.0.2.10"}))
    await manager.complete_deferred_work()
    generation = manager.state.rules_generation
    interfaces.addresses_by_name["eth0"] = frozenset({"192.0.2.11"})
    await manager.complete_deferred_work()
    assert manager.state.host_ips == {"192.0.2.10"}  # nothing said it changed
    assert manager.on_interface("cali99") is False  # a workload's: not the host's
    assert manager.on_interface("eth0") is True
    await manager.complete_deferred_work()
    assert manager.state.host_ips == {"192.0.2.11"}
    assert manager.state.rules_generation == generation + 1
    interfaces.addresses_by_name["eth1"] = frozenset({"198.51.100.1"})
    manager.invalidate()
    await manager.complete_deferred_work()
    assert manager.state.host_ips == {"192.0.2.11", "198.51.100.1"}
    manager.on_update(m.ConfigUpdate(FrozenMap({})))
    interfaces.addresses_by_name.pop("eth1")
    await manager.complete_deferred_work()
    assert manager.state.host_ips == {"192.0.2.11"}


async def test_kube_proxy_s_ipvs_mode_is_noted_at_start_and_a_change_restarts() -> None:
    node = FakeNode(links=[("eth0", 1500, True), ("kube-ipvs0", 1500, False)])
    interfaces = FakeInterfaces(node=node)
    manager = HostFactsManager(NodeState(), interfaces)
    await manager.complete_deferred_work()
    assert manager.state.kube_ipvs is True
    node.links.pop()
    with pytest.raises(RestartRequired, match="kube-ipvs0 went"):
        await manager.complete_deferred_work()
    plain = HostFactsManager(NodeState(), FakeInterfaces())
    await plain.complete_deferred_work()
    assert plain.state.kube_ipvs is False
