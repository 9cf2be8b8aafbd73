"""Rule ids, marks and IP set scripts: the pieces every chain is made of, checked against
values Felix itself produces."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyfelix import messages as m
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.ipsets import (
    ipset_name,
    member_version,
    members_of_version,
    restore_script,
)
from pyfelix_dataplane.rules.marks import MarkBits, MarkMaskTooSmall
from pyfelix_dataplane.rules.model import Chain, Rule, length_limited
from pyfelix_dataplane.rules.policy import (
    policy_chain_name,
    profile_chain_name,
)
from tests.rules_harness import (
    MARKS,
    REPO,
)


def test_felix_hash_vectors() -> None:
    """Rule ids and shortened chain names reproduce values Felix itself produces."""
    assert Chain("FORWARD", (Rule(action=mt.Jump("cali-FORWARD")),)).rule_hashes() == [
        "wUHhoiAYhphO9Mso"
    ]
    assert length_limited("cali-pi-", "gnp/long-policy-name-that-gets-hashed") == (
        "cali-pi-_PymyFHQQg3808jiz1OJ"
    )
    assert policy_chain_name(m.PolicyID("default", "allow-x"), True) == "cali-pi-gnp/allow-x"
    web = m.PolicyID("default", "web", "shop", "NetworkPolicy")
    assert policy_chain_name(web, False) == "cali-po-np/shop/web"
    assert profile_chain_name("kns.shop", True) == "cali-pri-kns.shop"
    assert all(len(length_limited("cali-tw-", "x" * n)) <= 28 for n in range(40))


def test_rule_ids_depend_on_everything_before() -> None:
    """Changing an earlier rule changes the ids of every rule after it."""
    a = Chain("c", (Rule(action=mt.Jump("ACCEPT")), Rule(action=mt.Jump("DROP"))))
    b = Chain("c", (Rule(action=mt.Jump("RETURN")), Rule(action=mt.Jump("DROP"))))
    assert a.rule_hashes()[1] != b.rule_hashes()[1]
    assert all(len(h) == 16 for h in a.rule_hashes())
    assert a.lines()[0] == f'-A c -m comment --comment "cali:{a.rule_hashes()[0]}" --jump ACCEPT'


def test_mark_bits() -> None:
    """Marks are carved from the mask's lowest bits; too small a mask is an error."""
    assert (MARKS.accept, MARKS.pass_, MARKS.drop, MARKS.scratch0, MARKS.scratch1) == (
        0x10000,
        0x20000,
        0x40000,
        0x80000,
        0x100000,
    )
    assert MarkBits.from_mask(0xF0F00000).accept == 0x100000
    with pytest.raises(MarkMaskTooSmall):
        MarkBits.from_mask(0xF0000000)


def test_ipset_script() -> None:
    """Sets per family, members sorted, maxelem Felix's MaxIpsetSize (default 1048576)."""
    sets = {"s:x": ("hash:net", {"10.0.0.2/32", "10.0.0.1/32", "fd00::1/128"})}
    assert restore_script(sets).splitlines() == [
        "create cali40s:x hash:net family inet maxelem 1048576",
        "add cali40s:x 10.0.0.1/32",
        "add cali40s:x 10.0.0.2/32",
        "create cali60s:x hash:net family inet6 maxelem 1048576",
        "add cali60s:x fd00::1/128",
    ]
    assert "maxelem 5000\n" in restore_script(sets, maxelem=5000)
    assert ipset_name("s:" + "a" * 40) == "cali40s:" + "a" * 23


_MEMBERS = st.sets(
    st.one_of(
        st.ip_addresses().map(str),
        st.builds("{}/{}".format, st.ip_addresses(v=4), st.integers(0, 32)),
        st.builds(
            "{},{}:{}".format,
            st.ip_addresses().map(str),
            st.sampled_from(["tcp", "udp", "sctp"]),
            st.integers(1, 65535),
        ),
    ),
    max_size=6,
)


@given(_MEMBERS)
def test_a_sets_members_split_by_version_as_each_members_own(members: set[str]) -> None:
    """A set's members of each version (IPv6 and IPv4 named-port members have colons) are
    those whose own version it is."""
    for version in (4, 6):
        got = members_of_version(members, version)
        assert sorted(got) == sorted(m for m in members if member_version(m) == version)


def test_only_the_iptables_spelling_writes_iptables_options() -> None:
    """Rules are typed data: every module of the rules package but the iptables spelling
    (model.py) builds criteria and actions, and the nft spelling reads them, never iptables
    text (a quoted ``--option`` or ``-m``/``-p`` anywhere else would be a step back)."""
    rules = REPO / "dataplane" / "pyfelix_dataplane" / "rules"
    option = re.compile(r"""f?["'](?:--[a-z]|-[mpjgsdio] )""")
    spelled = {
        path.name: [line for line in path.read_text().splitlines() if option.search(line)]
        for path in sorted(rules.glob("*.py"))
        if path.name != "model.py"
    }
    assert {name: lines for name, lines in spelled.items() if lines} == {}
    assert option.search((rules / "model.py").read_text())
