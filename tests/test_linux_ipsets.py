"""The ipset writer against the kernel, in a namespace: maxelem always set, growth past it by a
temporary set swapped in (the set's name never disappears), deltas only in steady state, and
stale sets destroyed; read back with `ipset list`, independently of the writer."""

from __future__ import annotations

import json
import sys

import pytest

from tests.netns import run_in

pytestmark = pytest.mark.netns

SET = "cali40s:test-set"
SCRIPT = """
import json, sys, trio
from pyfelix_dataplane.linux.ipsets import IpsetWriter

async def main():
    writer = IpsetWriter()
    scripts = []
    for step in json.loads(sys.stdin.read()):
        desired = {name: (kind, frozenset(members)) for name, (kind, members) in step.items()}
        scripts.append(await writer.apply_updates(desired))
        await writer.apply_deletions(desired)
    print(json.dumps(scripts))

trio.run(main)
"""


def members(count: int, start: int = 0) -> list[str]:
    return [f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}" for i in range(start, count)]


def header(ns: str, name: str) -> str:
    listing = run_in(ns, "ipset", "list", "-t", name)
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


def test_growth_deltas_and_deletion(netns: str) -> None:
    run_in(netns, "ipset", "create", "cali40s:stale", "hash:net")
    steps = [
        {SET: ["hash:net", members(10)]},
        {SET: ["hash:net", members(70_000)]},
        {SET: ["hash:net", [*members(70_000)[1:], "192.0.2.1"]]},
    ]
    result = run_in(netns, sys.executable, "-c", SCRIPT, input_text=json.dumps(steps))
    assert result.returncode == 0, result.stderr
    first, grown, delta = json.loads(result.stdout)

    assert "maxelem 65536" in first
    assert f"swap {SET} " in grown, "growing past maxelem goes through a temporary set"
    assert delta.splitlines() == [f"del {SET} 10.0.0.0 -exist", f"add {SET} 192.0.2.1 -exist"]

    described = header(netns, SET)
    assert "maxelem 131072" in described
    assert "Number of entries: 70000" in described
    sets = run_in(netns, "ipset", "list", "-n").stdout.split()
    assert sets == [SET], "the temporary set and the stale one are gone"


def test_a_member_the_kernel_refuses_is_isolated(netns: str) -> None:
    """A member ipset refuses (validation would have caught this one; the writer must not
    depend on that) is left out and logged; every other member and set is written in the same
    apply, and a later change still reaches the kernel."""
    v6 = "cali60s:v6-set"
    steps = [
        {SET: ["hash:net", ["10.0.0.1", "10.0.0.0/33", "10.0.0.2"]], v6: ["hash:net", ["::1"]]},
        {SET: ["hash:net", ["10.0.0.0/33", "10.0.0.3"]], v6: ["hash:net", ["::1", "::2"]]},
    ]
    result = run_in(netns, sys.executable, "-c", SCRIPT, input_text=json.dumps(steps))
    assert result.returncode == 0, result.stderr
    assert "refused member '10.0.0.0/33' of IP set cali40s:test-set" in result.stderr
    listing = run_in(netns, "ipset", "list", SET).stdout
    assert listing.split("Members:\n")[1].split() == ["10.0.0.3"]
    v6_listing = run_in(netns, "ipset", "list", v6).stdout
    assert sorted(v6_listing.split("Members:\n")[1].split()) == ["::1", "::2"]
