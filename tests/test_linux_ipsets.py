"""The ipset writer against the kernel, in a namespace: maxelem MaxIpsetSize, a set of another
maxelem rebuilt through a temporary set swapped in (the set's name never disappears), deltas
only in steady state, and stale sets destroyed; read back with `ipset list`, independently of
the writer."""

from __future__ import annotations

import pytest
import trio

from pyfelix_dataplane.linux.ipsets import IpsetWriter
from tests.netns import in_netns, run_in

pytestmark = pytest.mark.netns

SET = "cali40s:test-set"
Steps = list[dict[str, tuple[str, list[str]]]]


def apply_steps(steps: Steps, maxelem: int | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """Each step's desired sets written (then the unwanted ones destroyed); the scripts used
    and the members the kernel refused. Runs inside the namespace (tests.netns.in_netns)."""

    async def main() -> tuple[list[str], dict[str, list[str]]]:
        writer = IpsetWriter() if maxelem is None else IpsetWriter(maxelem)
        scripts = []
        for step in steps:
            desired = {name: (kind, frozenset(members)) for name, (kind, members) in step.items()}
            scripts.append(await writer.apply_updates(desired))
            await writer.apply_deletions(desired)
        return scripts, {name: sorted(refused) for name, refused in writer.refused.items()}

    return trio.run(main)


def members(count: int, start: int = 0) -> list[str]:
    return [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" for i in range(start, count)]


def header(ns: str, name: str) -> str:
    listing = run_in(ns, "ipset", "list", "-t", name)
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


def test_maxelem_deltas_and_deletion(netns: str) -> None:
    run_in(netns, "ipset", "create", "cali40s:stale", "hash:net")
    # Made by an earlier version with a maxelem sized to its members.
    run_in(netns, "ipset", "create", SET, "hash:net", "maxelem", "65536")
    steps: Steps = [
        {SET: ("hash:net", members(10))},
        {SET: ("hash:net", members(70_000))},
        {SET: ("hash:net", [*members(70_000)[1:], "192.0.2.1"])},
    ]
    (first, grown, delta), _ = in_netns(netns, apply_steps, steps)

    assert f"swap {SET} " in first, "another maxelem is rebuilt through a temporary set"
    assert "maxelem 1048576" in first
    assert "swap" not in grown, "growth is only adds"
    assert "create" not in grown
    assert delta.splitlines() == [f"del {SET} 10.0.0.0 -exist", f"add {SET} 192.0.2.1 -exist"]

    described = header(netns, SET)
    assert "maxelem 1048576" in described
    assert "Number of entries: 70000" in described
    sets = run_in(netns, "ipset", "list", "-n").stdout.split()
    assert sets == [SET], "the temporary set and the stale one are gone"


def test_a_member_the_kernel_refuses_is_isolated(netns: str) -> None:
    """A member ipset refuses (validation would have caught this one; the writer must not
    depend on that) is left out and logged; every other member and set is written in the same
    apply, and a later change still reaches the kernel."""
    v6 = "cali60s:v6-set"
    steps: Steps = [
        {SET: ("hash:net", ["10.0.0.1", "10.0.0.0/33", "10.0.0.2"]), v6: ("hash:net", ["::1"])},
        {SET: ("hash:net", ["10.0.0.0/33", "10.0.0.3"]), v6: ("hash:net", ["::1", "::2"])},
    ]
    _, refused = in_netns(netns, apply_steps, steps)
    assert refused == {SET: ["10.0.0.0/33"]}
    listing = run_in(netns, "ipset", "list", SET).stdout
    assert listing.split("Members:\n")[1].split() == ["10.0.0.3"]
    v6_listing = run_in(netns, "ipset", "list", v6).stdout
    assert sorted(v6_listing.split("Members:\n")[1].split()) == ["::1", "::2"]


def _sizes(steps: Steps, maxelem: int) -> list[dict[str, int]]:
    """Each step's sets written by a writer of ``maxelem``: what it reported oversized."""

    async def main() -> list[dict[str, int]]:
        writer = IpsetWriter(maxelem)
        reported = []
        for step in steps:
            desired = {name: (kind, frozenset(members)) for name, (kind, members) in step.items()}
            await writer.apply_updates(desired)
            await writer.apply_deletions(desired)
            reported.append(dict(writer.oversized))
        return reported

    return trio.run(main)


def test_a_set_over_maxipsetsize_is_cut_and_named_and_the_rest_programmed(netns: str) -> None:
    """MaxIpsetSize lowered below a set's size: the set is rebuilt with the first MaxIpsetSize
    members and reported, the other sets are programmed in the same apply, a temporary set an
    earlier failed rebuild left behind is no obstacle, and once the big set goes nothing of
    it (nor of its temporary set) stays in the kernel."""
    small = "cali40s:small-set"
    run_in(netns, "ipset", "create", SET, "hash:net", "maxelem", "1048576")
    for member in members(10):
        run_in(netns, "ipset", "add", SET, member)
    run_in(netns, "ipset", "create", "cali4ts:test-set", "hash:net", "maxelem", "8")
    steps: Steps = [
        {SET: ("hash:net", members(10)), small: ("hash:net", members(102, 100))},
        {SET: ("hash:net", members(12)), small: ("hash:net", members(103, 100))},
        {small: ("hash:net", members(103, 100))},
    ]
    first, second, third = in_netns(netns, _sizes, steps, 8)
    assert first == {SET: 10}
    assert second == {SET: 12}
    assert third == {}
    sets = run_in(netns, "ipset", "list", "-n").stdout.split()
    assert sets == [small]
    listing = run_in(netns, "ipset", "list", small).stdout
    assert len(listing.split("Members:\n")[1].split()) == 3


def test_a_set_over_maxelem_is_written_cut_in_one_apply(netns: str) -> None:
    """A fresh set wanted with more members than its maxelem: the first maxelem are written
    in one restore (the kernel is never asked for more, so no member is refused one by one)."""
    steps: Steps = [{SET: ("hash:net", members(40))}]
    (script,), refused = in_netns(netns, apply_steps, steps, 32)
    assert refused == {}
    assert script.count(f"add {SET} ") == 32
    described = header(netns, SET)
    assert "Number of entries: 32" in described
