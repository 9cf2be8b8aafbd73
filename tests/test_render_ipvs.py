"""kube-proxy's IPVS mode: Felix's endpoint marks and chains, rendered where the node runs it,
and nowhere else. The hash values are Go's ``hash/fnv.New32`` of the same names (Felix's
endpoint mark mapper hashes with it); the chains follow Felix's static_test.go and
dispatch_test.go."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from pyfelix.dryrun import compute
from pyfelix.resources.loader import load_paths
from pyfelix_dataplane.rules.ipvs import endpoint_marks, fnv1_32, number_to_mark
from pyfelix_dataplane.rules.marks import MarkMaskTooSmall, endpoint_mark_mask
from pyfelix_dataplane.rules.render import render
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.state import NodeState
from tests.rules_harness import REPO

#: Printed by Go: fnv.New32(), Write([]byte(name)), Sum32().
GO_FNV32 = {
    "cali1f0a2b3c4d5": 1807533499,
    "cali2e1b3c4d5e6": 1643572388,
    "eth1": 144957347,
    "calia": 477385905,
    "tap0": 2703419120,
}


def test_endpoint_ids_hash_as_felix_s_mapper() -> None:
    assert {name: fnv1_32(name) for name in GO_FNV32} == GO_FNV32
    # 1807533499 % 2048 = 1467: its bits spread over the mask's, lowest first.
    assert number_to_mark(1467, 0xFFE00000) == 1467 << 21
    marks = endpoint_marks(["cali1f0a2b3c4d5", "eth1"], 0xFFE00000)
    assert marks == {"cali1f0a2b3c4d5": 0xB7600000, "eth1": (144957347 % 2048) << 21}


def test_colliding_endpoints_probe_past_taken_and_reserved_ids() -> None:
    """With two ids' room (ids 0 and 1 reserved: none, and the non-Calico mark), names beyond
    the free ids get none; every id handed out is distinct."""
    mask = 0b111 << 8  # eight ids: 0 and 1 reserved, six to hand out
    names = [f"cali{i}" for i in range(8)]
    marks = endpoint_marks(names, mask)
    assert len(marks) == 6
    assert len(set(marks.values())) == 6
    assert all(mark & ~mask == 0 and mark not in (0, 1 << 8) for mark in marks.values())


def test_endpoint_bits_are_what_the_rules_and_wireguard_leave() -> None:
    assert endpoint_mark_mask(0xFFFF0000, wireguard=False) == 0xFFE00000
    assert endpoint_mark_mask(0xFFFF0000, wireguard=True) == 0xFFC00000
    state = NodeState(kube_ipvs=True)
    state.config = attrs.evolve(state.config, iptables_mark_mask=0x1F0000)
    with pytest.raises(MarkMaskTooSmall, match="IPVS"):
        Settings.for_node(state)
    settings = Settings.for_node(NodeState(kube_ipvs=True))
    assert (settings.endpoint_mark, settings.non_cali_endpoint_mark) == (0xFFE00000, 0x200000)
    assert Settings.for_node(NodeState()).endpoint_mark == 0


def _node_a(kube_ipvs: bool) -> NodeState:
    result = load_paths([REPO / "examples"])
    _, state = compute([item.resource for item in result.resources], "node-a")
    return attrs.evolve(state, kube_ipvs=kube_ipvs, host_ips=frozenset({"192.168.56.11"}))


def _rules(state: NodeState, chain: str) -> list[str]:
    text = render(state, versions=(4,)).iptables[4]["filter"]
    prefix = f"-A {chain} "
    return [line.split('" ', 1)[1] for line in text.splitlines() if line.startswith(prefix)]


def test_ipvs_chains_as_felix_renders_them() -> None:
    state = _node_a(kube_ipvs=True)
    assert _rules(state, "cali-forward-check") == [
        "-m conntrack --ctstate RELATED,ESTABLISHED --jump RETURN",
        '-m comment --comment "To kubernetes NodePort service" -p tcp -m multiport'
        " --destination-ports 30000:32767 -m set --match-set cali40this-host dst"
        " --goto cali-set-endpoint-mark",
        '-m comment --comment "To kubernetes NodePort service" -p udp -m multiport'
        " --destination-ports 30000:32767 -m set --match-set cali40this-host dst"
        " --goto cali-set-endpoint-mark",
        '-m comment --comment "To kubernetes service" -m set ! --match-set cali40this-host dst'
        " --jump cali-set-endpoint-mark",
    ]
    assert _rules(state, "cali-forward-endpoint-mark") == [
        "-m mark ! --mark 0x200000/0xffe00000 --jump cali-from-endpoint-mark",
        "--out-interface cali+ --jump cali-to-wl-dispatch",
        "--jump cali-to-hep-forward",
        "--jump MARK --set-mark 0/0xffe00000",
        '-m comment --comment "Policy explicitly accepted packet." -m mark --mark'
        " 0x10000/0x10000 --jump ACCEPT",
    ]
    workload = "cali1f0a2b3c4d5"
    assert _rules(state, f"cali-sm-{workload}") == ["--jump MARK --set-mark 0xb7600000/0xffe00000"]
    assert f"-m mark --mark 0xb7600000/0xffe00000 --goto cali-fw-{workload}" in _rules(
        state, "cali-from-endpoint-mark"
    )
    set_mark = _rules(state, "cali-set-endpoint-mark")
    assert f"--in-interface {workload} --goto cali-sm-{workload}" in set_mark
    assert set_mark[-2:] == [
        '-m comment --comment "Unknown endpoint" --in-interface cali+ --jump DROP',
        '-m comment --comment "Non-Cali endpoint mark" --jump MARK --set-mark 0x200000/0xffe00000',
    ]
    # INPUT hands what IPVS forwards over before the workloads' rules; OUTPUT diverts it.
    input_rules = _rules(state, "cali-INPUT")
    check = input_rules.index("--jump cali-forward-check")
    assert input_rules[check - 1 : check + 2] == [
        "--jump MARK --set-mark 0/0xffe00000",
        "--jump cali-forward-check",
        "-m mark ! --mark 0/0xffe00000 --jump RETURN",
    ]
    assert input_rules.index("--in-interface cali+ --goto cali-wl-to-host") == check + 2
    assert _rules(state, "cali-OUTPUT")[1] == (
        "-m mark ! --mark 0/0xffe00000 --goto cali-forward-endpoint-mark"
    )


def test_no_ipvs_chains_without_kube_proxy_in_ipvs_mode() -> None:
    text = render(_node_a(kube_ipvs=False), versions=(4,)).iptables[4]["filter"]
    assert "cali-forward-check" not in text
    assert "endpoint-mark" not in text
    assert "0xffe00000" not in text


def test_the_dry_run_renders_as_a_node_in_ipvs_mode_when_told() -> None:
    """``--kube-proxy-ipvs`` stands for kube-ipvs0 (the dry-run has no interfaces); the
    this-host set holds the node's own address, from its Node resource."""
    argv = [sys.executable, "-m", "pyfelix", "dry-run", "--hostname", "node-a"]
    plain, ipvs = (
        subprocess.run(
            [*argv, *flag, str(Path(REPO) / "examples")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for flag in ([], ["--kube-proxy-ipvs"])
    )
    assert "cali-forward-check" in ipvs
    assert "cali-forward-check" not in plain
    assert "add cali40this-host 192.168.56.11" in plain
