"""Members nested in a wider member of their IP set are left out, as Felix's member
deduplicator leaves them out unless NFTablesMode is Disabled (felix/calc/states_for_test.go's
"overlap netset" states), in every order of adds and removes."""

from __future__ import annotations

import itertools

import pytest

from pyfelix.calc import nested_members
from pyfelix.calc.nested_members import NestedMembers


class Dedupe:
    """The deduplicator over a member count as the index keeps it."""

    def __init__(self) -> None:
        self.counts: dict[str, set[str]] = {}
        self.sent: dict[str, set[str]] = {}
        self.nested = NestedMembers(self._sent, self._unsent, lambda s: self.counts.get(s, set()))

    def _sent(self, set_id: str, member: str) -> None:
        assert member not in self.sent.setdefault(set_id, set()), f"{member} sent twice"
        self.sent[set_id].add(member)

    def _unsent(self, set_id: str, member: str) -> None:
        assert member in self.sent.get(set_id, set()), f"{member} removed unsent"
        self.sent[set_id].discard(member)

    def add(self, member: str, set_id: str = "s", *, flush: bool = True) -> None:
        self.counts.setdefault(set_id, set()).add(member)
        self.nested.added(set_id, member)
        if flush:
            self.nested.flush()

    def remove(self, member: str, set_id: str = "s", *, flush: bool = True) -> None:
        self.counts[set_id].discard(member)
        self.nested.removed(set_id, member)
        if flush:
            self.nested.flush()


def expected(members: set[str]) -> set[str]:
    """The members no other member of the set covers (named ports always)."""
    import ipaddress  # noqa: PLC0415

    nets = {m: ipaddress.ip_network(m) for m in members if "," not in m}
    return {m for m in members if "," in m} | {
        m
        for m, net in nets.items()
        if not any(
            other != net and other.version == net.version and net.subnet_of(other)  # type: ignore[arg-type]
            for other in nets.values()
        )
    }


MEMBERS = [
    "10.65.0.0/16",
    "10.65.1.0/24",
    "10.65.1.5/32",
    "10.66.0.1/32",
    "fd00::/64",
    "fd00::1/128",
]


def test_felix_overlap_netset_states() -> None:
    d = Dedupe()
    d.add("10.65.0.0/16")
    assert d.sent["s"] == {"10.65.0.0/16"}, "ancestor only"
    d.add("10.65.1.0/24")
    d.add("10.65.1.5/32")
    assert d.sent["s"] == {"10.65.0.0/16"}, "ancestor + nested (suppressed)"
    d.remove("10.65.1.0/24")
    assert d.sent["s"] == {"10.65.0.0/16"}, "middle removed under live ancestor"
    d.add("10.65.1.0/24")
    d.remove("10.65.0.0/16")
    assert d.sent["s"] == {"10.65.1.0/24"}, "the ancestor gone: the closest one is sent again"
    d.remove("10.65.1.0/24")
    assert d.sent["s"] == {"10.65.1.5/32"}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("flush_every", [1, 3, 50])
def test_every_order_sends_exactly_the_uncovered_members(seed: int, flush_every: int) -> None:
    """After each flush (every change, or every few), whatever came and went between."""
    import random  # noqa: PLC0415

    rng = random.Random(seed)
    d = Dedupe()
    present: set[str] = set()
    for step in range(1, 201):
        member = rng.choice([*MEMBERS, "10.65.1.5,tcp:80"])
        if member in present:
            d.remove(member, flush=False)
            present.discard(member)
        else:
            d.add(member, flush=False)
            present.add(member)
        if step % flush_every == 0:
            d.nested.flush()
            assert d.sent.get("s", set()) == expected(present)


def test_wide_changes_are_settled_once_at_the_flush() -> None:
    """Thousands of CIDRs beside thousands of pods in one set: each pod is parsed once at the
    flush, not once for each CIDR that comes (which took hours at 7,500 x 50,000)."""
    d = Dedupe()
    pods = [f"10.{i >> 8}.{i & 255}.1/32" for i in range(800)]
    cidrs = [f"172.{16 + (i >> 8) % 16}.{i & 255}.0/24" for i in range(800)]
    for member in [*pods, *cidrs, "10.0.0.0/16"]:
        d.add(member, flush=False)
    calls = 0
    parse = nested_members._parse

    def counted(member: str) -> tuple[int, int, int]:
        nonlocal calls
        calls += 1
        return parse(member)

    nested_members._parse = counted
    try:
        d.nested.flush()
    finally:
        nested_members._parse = parse
    assert calls <= len(pods) + len(cidrs) + 1
    assert d.sent["s"] == expected(set(pods) | set(cidrs) | {"10.0.0.0/16"})


def test_a_set_without_wide_members_costs_its_hosts_nothing() -> None:
    """Host members of a set with no wider member pass straight through (not parsed)."""
    d = Dedupe()
    for member in ("10.0.0.1/32", "10.0.0.2/32", "not-parsed/32"):
        d.add(member)
    assert d.sent["s"] == {"10.0.0.1/32", "10.0.0.2/32", "not-parsed/32"}


def test_orders_of_three_nested() -> None:
    for order in itertools.permutations(["10.0.0.0/8", "10.1.0.0/16", "10.1.2.3/32"]):
        d = Dedupe()
        for member in order:
            d.add(member)
        assert d.sent["s"] == {"10.0.0.0/8"}, order


CLUSTER = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: office, labels: {zone: office}}
spec: {nets: [10.65.0.0/16, 10.65.1.0/24, 10.65.1.5/32]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: h, labels: {role: host}}
spec: {node: node-a, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: from-office}
spec:
  selector: role == "host"
  types: [Ingress]
  ingress: [{action: Allow, source: {selector: zone == "office"}}]
"""


@pytest.mark.parametrize(
    ("mode", "members"),
    [
        ("Auto", ["10.65.0.0/16"]),
        ("Disabled", ["10.65.0.0/16", "10.65.1.0/24", "10.65.1.5/32"]),
    ],
)
def test_the_dry_run_leaves_nested_members_out_unless_nftables_mode_is_disabled(
    mode: str, members: list[str]
) -> None:
    from pyfelix.dryrun import compute  # noqa: PLC0415
    from pyfelix.resources import load_text  # noqa: PLC0415

    config = "---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\n"
    config += f"metadata: {{name: default}}\nspec: {{nftablesMode: {mode}}}\n"
    loaded = load_text(CLUSTER + config, "c.yaml")
    assert loaded.ok, loaded.problems
    view, _ = compute([item.resource for item in loaded.resources], "node-a")
    (office,) = [s for s in view["ipsets"] if "zone" in str(s["source"])]
    assert office["members"] == members
