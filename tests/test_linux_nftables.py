"""The nftables writer against the kernel, in a namespace: a whole table from nothing, then only
what changed, repair of what was tampered with (read back with `nft`, independently of the
writer), and another tool's table left alone."""

from __future__ import annotations

import threading

import attrs
import pytest
import trio
import trio.testing

from pyfelix.dryrun import compute
from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.libnftables import LISTING_OPTIONS, Nft
from pyfelix_dataplane.linux.managers import CHECK_ATTEMPTS
from pyfelix_dataplane.linux.nft_elements import ElementChange, ElementWriter
from pyfelix_dataplane.linux.nftables import KernelTable, NftablesWriter, delta, parse_listing
from pyfelix_dataplane.rules.nft import NftRule, NftSet, NftTable, render_nftables
from tests.netns import in_netns, run_in
from tests.test_render_kernel import example_resources

pytestmark = pytest.mark.netns


def example_table() -> NftTable:
    _, dataplane = compute(example_resources(), "node-a")
    return render_nftables(dataplane, (4,))[4]


def _apply(tables: list[NftTable], invalidate_before: int = -1) -> list[bool]:
    """Apply each table in turn with one writer (in the namespace); whether each wrote."""

    async def main() -> list[bool]:
        writer = NftablesWriter("ip")
        wrote = []
        for index, table in enumerate(tables):
            if index == invalidate_before:
                writer.invalidate()
            wrote.append(await writer.apply(table))
        return wrote

    return trio.run(main)


def nft(ns: str, *argv: str) -> str:
    done = run_in(ns, "nft", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed(ns: str, family: str) -> KernelTable:
    """The table as the nft program lists it, read as the writer reads its own listings."""
    return parse_listing(nft(ns, *LISTING_OPTIONS, "list", "table", family, "calico"))


def test_the_table_its_deltas_and_nothing_when_nothing_changed(netns: str) -> None:
    table = example_table()
    forward = table.chains["filter-cali-FORWARD"]
    changed_chain = attrs.evolve(forward, rules=(*forward.rules, NftRule("counter accept")))
    some_set = sorted(table.sets)[0]
    grown = attrs.evolve(
        table.sets[some_set], elements=table.sets[some_set].elements | {"198.18.0.0/24"}
    )
    changed = attrs.evolve(
        table,
        chains={**table.chains, "filter-cali-FORWARD": changed_chain},
        sets={**table.sets, some_set: grown},
    )
    assert in_netns(netns, _apply, [table, table, changed]) == [True, False, True]
    text = nft(netns, "list", "table", "ip", "calico")
    assert "198.18.0.0/24" in text
    assert text.count("chain filter-cali-FORWARD {") == 1
    kernel = listed(netns, "ip")
    assert kernel.chains["filter-cali-FORWARD"][0] == changed_chain.hashes
    assert kernel.sets[some_set].elements == grown.elements
    assert delta(kernel, changed) == "", "what the kernel holds is what was written"


def _tamper_and_repair(table: NftTable, tampering: list[list[str]]) -> list[bool]:
    """In the namespace: write ``table``, run the ``nft`` commands of ``tampering``, apply
    again (the writer trusts what it wrote), then after a read-back; whether each wrote."""

    async def main() -> list[bool]:
        writer = NftablesWriter("ip")
        await writer.apply(table)
        for argv in tampering:
            await trio.run_process(["nft", *argv])
        trusted = await writer.apply(table)
        writer.invalidate()
        return [trusted, await writer.apply(table)]

    return trio.run(main)


def test_tampering_is_repaired_after_a_read_back_and_foreign_tables_stay(netns: str) -> None:
    """A deleted set element, a flushed chain, a flushed base chain and a chain another tool
    put in our table: all put right by the first apply after a read-back (the refresh's);
    another tool's table is never touched."""
    table = example_table()
    nft(netns, "add", "table", "inet", "other")
    nft(netns, "add", "chain", "inet", "other", "keep", "{ type filter hook input priority 5; }")
    nft(netns, "add", "rule", "inet", "other", "keep", "counter")
    some_set = next(name for name, s in table.sets.items() if s.elements)
    element = sorted(table.sets[some_set].elements)[0]
    tampering = [
        ["delete", "element", "ip", "calico", some_set, f"{{ {element} }}"],
        ["flush", "chain", "ip", "calico", "filter-cali-INPUT"],
        ["flush", "chain", "ip", "calico", "filter-FORWARD"],
        ["add", "chain", "ip", "calico", "ufw-intruder"],
    ]
    assert in_netns(netns, _tamper_and_repair, table, tampering) == [False, True]
    kernel = listed(netns, "ip")
    assert element in kernel.sets[some_set].elements
    assert kernel.chains["filter-cali-INPUT"][0] == table.chains["filter-cali-INPUT"].hashes
    assert kernel.chains["filter-FORWARD"][0] == table.chains["filter-FORWARD"].hashes
    assert "ufw-intruder" not in kernel.chains
    assert "chain keep" in nft(netns, "list", "table", "inet", "other")


def _check_tampering(table: NftTable, tampering: list[str]) -> list[bool]:
    """In the namespace: write ``table``, check; run the ``nft`` command ``tampering``,
    check; apply (the check made it read back first), check: each check's finding."""

    async def main() -> list[bool]:
        writer = NftablesWriter("ip")
        await writer.apply(table)
        found = [await writer.check(CHECK_ATTEMPTS)]
        await trio.run_process(["nft", *tampering])
        found.append(await writer.check(CHECK_ATTEMPTS))
        await writer.apply(table)
        found.append(await writer.check(CHECK_ATTEMPTS))
        return found

    return trio.run(main)


@pytest.mark.parametrize(
    "tampering",
    [["flush", "chain", "ip", "calico", "filter-cali-INPUT"], ["delete", "table", "ip", "calico"]],
    ids=["flushed chain", "deleted table"],
)
def test_a_check_finds_what_another_program_changed_and_the_next_apply_repairs_it(
    netns: str, tampering: list[str]
) -> None:
    """The refresh's reading, beside the applies: the table as written is not reported, one
    another program changed is, and the apply after it puts it right."""
    table = example_table()
    assert in_netns(netns, _check_tampering, table, tampering) == [False, True, False]
    kernel = listed(netns, "ip")
    assert kernel.chains["filter-cali-INPUT"][0] == table.chains["filter-cali-INPUT"].hashes


def _check_beside_a_no_op_apply(table: NftTable, tampering: list[str]) -> bool:
    """In the namespace: write ``table``, tamper with it, then check while an apply that
    finds nothing to write (it trusts what it wrote) runs meanwhile; the check's finding."""

    async def main() -> bool:
        writer = NftablesWriter("ip")
        await writer.apply(table)
        await trio.run_process(["nft", *tampering])
        found: list[bool] = []

        async def check() -> None:
            found.append(await writer.check(CHECK_ATTEMPTS))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(check)
            await trio.testing.wait_all_tasks_blocked()  # the check is reading (a thread)
            assert not await writer.apply(attrs.evolve(table))
        return found[0]

    return trio.run(main)


def test_a_check_is_not_dropped_for_an_apply_that_wrote_nothing(netns: str) -> None:
    """Another area's refresh (every second in some configurations) makes an apply that
    writes nothing; a check reading at the same time still reports what it found."""
    tampering = ["flush", "chain", "ip", "calico", "filter-cali-INPUT"]
    assert in_netns(netns, _check_beside_a_no_op_apply, example_table(), tampering)


def _fail_then_replace(table: NftTable, broken: NftTable) -> str:
    """In the namespace: write ``table``, fail to write ``broken``, write ``table`` again;
    the failure's text."""

    async def main() -> str:
        writer = NftablesWriter("ip")
        await writer.apply(table)
        try:
            await writer.apply(broken)
        except DataplaneWriteError as exc:
            error = str(exc)
        else:
            error = ""
        await writer.apply(table)
        return error

    return trio.run(main)


def test_a_failed_write_is_followed_by_a_whole_replacement(netns: str) -> None:
    """A write the kernel refuses (a set element of the wrong family) raises, naming nft;
    the next write replaces the table whole and succeeds."""
    table = example_table()
    some_set = next(name for name, s in table.sets.items() if s.interval)
    broken = attrs.evolve(
        table,
        sets={**table.sets, some_set: NftSet("ipv4_addr", True, frozenset({"fd00::1"}))},
    )
    assert "nft" in in_netns(netns, _fail_then_replace, table, broken)
    kernel = listed(netns, "ip")
    assert kernel.sets[some_set].elements == table.sets[some_set].elements


def _element_steps(tables: list[NftTable], family: str) -> list[bool]:
    async def main() -> list[bool]:
        writer = NftablesWriter(family)
        return [await writer.apply(table) for table in tables]

    return trio.run(main)


@pytest.mark.parametrize("version", [4, 6])
def test_member_changes_alone_go_as_set_elements(netns: str, version: int) -> None:
    """An apply that only adds and removes members (the nfnetlink fast path): networks and
    single addresses of an interval set and named-port members land and go as nft lists
    them, and a later whole write agrees with what the kernel holds."""
    _, dataplane = compute(example_resources(), "node-a")
    table = render_nftables(dataplane, (version,))[version]
    interval = next(name for name, s in table.sets.items() if s.interval)
    named = next(name for name, s in table.sets.items() if " . " in s.type)
    if version == 4:
        extra, ports = frozenset({"198.18.0.0/24", "198.19.0.7"}), "10.65.9.9 . tcp . 8443"
    else:
        extra, ports = frozenset({"fd18::/64", "fd19::7"}), "fd65::99 . tcp . 8443"

    def with_members(nets: frozenset[str], port_members: frozenset[str]) -> NftTable:
        sets = dict(table.sets)
        sets[interval] = attrs.evolve(sets[interval], elements=sets[interval].elements | nets)
        sets[named] = attrs.evolve(sets[named], elements=sets[named].elements | port_members)
        return attrs.evolve(table, sets=sets)

    grown = with_members(extra, frozenset({ports}))
    family = "ip" if version == 4 else "ip6"
    assert in_netns(netns, _element_steps, [table, grown], family) == [True, True]
    kernel = listed(netns, family)
    assert kernel.sets[interval].elements >= extra
    assert ports in kernel.sets[named].elements
    assert in_netns(netns, _element_steps, [grown, table], family) == [False, True]
    kernel = listed(netns, family)
    assert not kernel.sets[interval].elements & extra
    assert kernel.sets[named].elements == table.sets[named].elements
    assert delta(kernel, table) == ""


def _refused_then_written(family: str) -> list[str]:
    """A batch the kernel refuses, then one it takes, through one element writer."""
    writer = ElementWriter(family)
    address = "10.0.0.9" if family == "ip" else "fd00::9"
    plain = NftSet(f"{'ipv4' if family == 'ip' else 'ipv6'}_addr", False, frozenset())
    outcomes = []
    for name in ("no-such-set", "probe"):
        try:
            writer.write([ElementChange(True, name, plain, (address,))])
            outcomes.append("written")
        except OSError as exc:
            outcomes.append(exc.strerror or "")
    writer.close()
    return outcomes


@pytest.mark.parametrize("family", ["ip", "ip6"])
def test_a_refused_element_batch_is_raised_and_the_next_one_written(
    netns: str, family: str
) -> None:
    """The element writer keeps its socket between batches; a refusal is an error naming
    the kernel's reason, and the writer carries on with a fresh socket."""
    kind = "ipv4_addr" if family == "ip" else "ipv6_addr"
    nft(netns, "add", "table", family, "calico")
    nft(netns, "add", "set", family, "calico", "probe", f"{{ type {kind}; }}")
    refused, written = in_netns(netns, _refused_then_written, family)
    assert "No such file or directory" in refused
    assert written == "written"
    listed = nft(netns, "list", "set", family, "calico", "probe")
    assert ("10.0.0.9" if family == "ip" else "fd00::9") in listed


def test_a_rule_on_new_ports_brings_its_port_set_and_takes_it_away(netns: str) -> None:
    """A chain rewritten to match several new ports gets the set it names in the same
    transaction; once no rule names it, the set goes."""
    table = example_table()
    forward = table.chains["filter-cali-FORWARD"]
    rule = NftRule("meta l4proto tcp tcp dport @calipt-81_8000-8080 counter accept")
    ports = NftSet("inet_service", True, frozenset({"81", "8000-8080"}))
    grown = attrs.evolve(
        table,
        chains={**table.chains, forward.name: attrs.evolve(forward, rules=(*forward.rules, rule))},
        sets={**table.sets, "calipt-81_8000-8080": ports},
    )
    assert in_netns(netns, _element_steps, [table, grown], "ip") == [True, True]
    assert "tcp dport @calipt-81_8000-8080" in nft(netns, "list", "table", "ip", "calico")
    assert listed(netns, "ip").sets["calipt-81_8000-8080"] == ports
    assert in_netns(netns, _element_steps, [grown, table], "ip") == [False, True]
    assert "calipt-81_8000-8080" not in nft(netns, "list", "table", "ip", "calico")


def _listings_at_once(threads: int, listings: int) -> int:
    """In the namespace: a table of sets with concatenated types, listed by ``threads``
    libnftables contexts at once, ``listings`` times each; how many were read."""
    sets = "".join(
        f"  set s{n} {{ type ipv4_addr . inet_service . ipv4_addr; }}\n" for n in range(200)
    )
    trio.run(Nft().transaction, f"table ip race {{\n{sets}}}\n")
    read: list[int] = []

    def lister() -> None:
        nft = Nft()
        for _ in range(listings):
            read.append(len(trio.run(nft.listing, "list table ip race")))

    workers = [threading.Thread(target=lister) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(1 for size in read if size > 10_000)


def test_listings_from_several_threads_at_once_leave_the_agent_alive(netns: str) -> None:
    """Each version's read-back runs in its thread, at the same time as the other's.
    libnftables' JSON output splits set type names with strtok, the process's, and two JSON
    listings at once aborted the agent; its text output, read now, does not."""
    assert in_netns(netns, _listings_at_once, 4, 150) == 600


def _interface_listings_at_once(threads: int, listings: int) -> int:
    """In the namespace: a chain with a rule naming an interface index (the ``fib`` rule our
    tables hold), listed by ``threads`` contexts at once, ``listings`` times each; how many
    listings showed the rule."""
    trio.run(
        Nft().transaction,
        "table ip race {\n chain c {\n  fib saddr . mark . iif oif 0 drop\n }\n}\n",
    )
    read: list[bool] = []

    def lister() -> None:
        nft = Nft()
        for _ in range(listings):
            read.append("oif 0" in trio.run(nft.listing, "list chain ip race c"))

    workers = [threading.Thread(target=lister) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(read)


def test_commands_naming_interfaces_from_several_threads_leave_the_agent_alive(
    netns: str,
) -> None:
    """libnftables frees a process-wide cache of interface names at the end of every command
    that filled it: the two families' writers and read-backs, each in its thread, aborted the
    agent ("double free or corruption") until every call took one lock. Without it this
    crashed two runs in three here."""
    assert in_netns(netns, _interface_listings_at_once, 8, 800) == 8 * 800
