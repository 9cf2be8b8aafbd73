"""The MTU manager driven with the strict fake of the kernel's interfaces, as Felix's
``*_mgr_test.go`` drive a manager: detection waits for the first apply's devices, the tunnel
managers pull their figures from it, the pods' MTU file is written, and a changed host MTU
restarts the agent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix.errors import RestartRequired
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.managers.ipip import IpipManager
from pyfelix_dataplane.linux.managers.mtu import MtuManager
from pyfelix_dataplane.linux.managers.vxlan import VxlanManager
from pyfelix_dataplane.linux.managers.wireguard import WireguardManager
from pyfelix_dataplane.state import NodeState
from tests.fake_kernel import FakeInterfaces, FakeNode


def _state(**config: str) -> NodeState:
    state = NodeState()
    state.apply(m.ConfigUpdate(FrozenMap(config)))
    state.apply(m.Encapsulation(ipip_enabled=False, vxlan_enabled=True))
    return state


async def test_the_tunnels_pull_what_was_detected(tmp_path: Path) -> None:
    node = FakeNode(links=[("eth0", 9001, True), ("cali1234", 1500, True), ("eth1", 1400, False)])
    state = _state()
    mtus = MtuManager(state, FakeInterfaces(node=node), tmp_path)
    vxlan = VxlanManager(state, writer=None, hostname="n", mtus=mtus)  # type: ignore[arg-type]
    ipip = IpipManager(state, writer=None, mtus=mtus)  # type: ignore[arg-type]
    wireguard = WireguardManager(state, None, "n", None, mtus=mtus)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(mtus.run)
        await trio.testing.wait_all_tasks_blocked()
        assert not mtus.known.is_set()  # nothing read before the first apply's devices
        assert (vxlan.mtu, ipip.mtu, wireguard.mtu) == (0, 0, 0)
        mtus.start()
        await mtus.known.wait()
        assert (vxlan.mtu, vxlan.mtu_v6, ipip.mtu) == (8951, 8931, 8981)
        assert (wireguard.mtu, wireguard.mtu_v6) == (8941, 8921)
        assert (tmp_path / "mtu").read_text() == "8951"
        nursery.cancel_scope.cancel()


async def test_configured_mtus_win_over_detection(tmp_path: Path) -> None:
    node = FakeNode(links=[("eth0", 9001, True)])
    state = _state(VXLANMTU="1300", IpInIpMtu="1200")
    mtus = MtuManager(state, FakeInterfaces(node=node), tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(mtus.run)
        mtus.start()
        await mtus.known.wait()
        assert (mtus.vxlan, mtus.ipip) == (1300, 1200)
        assert (tmp_path / "mtu").read_text() == "1300"
        nursery.cancel_scope.cancel()


async def test_a_changed_host_mtu_restarts(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    node = FakeNode(links=[("eth0", 1500, True)])
    mtus = MtuManager(_state(), FakeInterfaces(node=node), tmp_path, interval=30)
    with pytest.RaisesGroup(
        pytest.RaisesExc(RestartRequired, match="1500 to 1450"), flatten_subgroups=True
    ):
        async with trio.open_nursery() as nursery:
            await nursery.start(mtus.run)
            mtus.start()
            await trio.sleep(45)  # one check: unchanged
            node.links = [("eth0", 1450, True)]
            await trio.sleep(60)
