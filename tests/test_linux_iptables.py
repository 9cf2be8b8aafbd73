"""The iptables writer against the kernel, in a namespace, read back with iptables-nft-save:
a large first write (which opens with a listing of the table, to spare iptables-nft-restore
its per-command chain bookkeeping) leaves other programs' rules, base-chain policies and their
counters as they were, and works in a namespace where the table does not exist yet; later
small writes rewrite only what changed, without the listing."""

from __future__ import annotations

import fcntl
import re
import shlex

import pytest
import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.iptables import IptablesWriter, TableState
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule
from tests.netns import in_netns, run_in

Spec = list[tuple[str, list[tuple[mt.Match, mt.Action]]]]
XTABLES_LOCK = "/run/xtables.lock"
HOOKS = [("INPUT", "cali-INPUT"), ("FORWARD", "cali-FORWARD"), ("OUTPUT", "cali-OUTPUT")]


#: What Felix appends to FORWARD (static.kernel_appends with the default marks).
APPENDS = (
    Chain(
        "FORWARD",
        (
            Rule((mt.Mark(0x10000, 0x10000),), mt.ACCEPT, ("accepted",)),
            Rule(action=mt.SetMark(0x10000, 0x10000)),
        ),
    ),
)


def apply_filter(steps: list[Spec], insert_mode: str = "insert") -> list[str]:
    """Each step's filter chains (and Felix's FORWARD appends) written with the nft backend;
    the scripts used. Runs inside the namespace (tests.netns.in_netns)."""

    async def main() -> list[str]:
        writer = IptablesWriter(version=4, backend="nft", insert_mode=insert_mode)
        scripts = []
        for spec in steps:
            chains = [
                Chain(name, tuple(Rule(match=m, action=a) for m, a in rules))
                for name, rules in spec
            ]
            scripts.append(await writer.apply({"filter": (chains, HOOKS, APPENDS)}))
        return scripts

    return trio.run(main)


def policy_chains(count: int, rules: int, port: int = 80) -> Spec:
    """``count`` policy-like chains of ``rules`` rules each, and the top-level chains."""
    spec: Spec = [
        (
            f"cali-pi-p{i}",
            [((mt.Protocol("tcp"), mt.Port("dst", port + r)), mt.ACCEPT) for r in range(rules)],
        )
        for i in range(count)
    ]
    spec.append(("cali-INPUT", [((), mt.Jump(f"cali-pi-p{i}")) for i in range(count)]))
    spec.append(("cali-FORWARD", [((), mt.Jump("cali-pi-p0"))]))
    spec.append(("cali-OUTPUT", [((), mt.RETURN)]))
    return spec


def write(ns: str, steps: list[Spec], insert_mode: str = "insert") -> list[str]:
    return in_netns(ns, apply_filter, steps, insert_mode)


def saved(ns: str) -> str:
    result = run_in(ns, "iptables-nft-save", "-c", "-t", "filter")
    assert result.returncode == 0, result.stderr
    return result.stdout


def rules_in(text: str, chain: str) -> list[str]:
    return [line for line in text.splitlines() if f" -A {chain} " in f" {line} "]


@pytest.mark.netns
def test_large_first_write_keeps_other_programs_rules_policy_and_counters(netns: str) -> None:
    run_in(netns, "ip", "link", "set", "lo", "up")
    # Another program's firewall: a DROP policy that has counted packets, and a rule of its own.
    run_in(netns, "iptables-nft", "-P", "OUTPUT", "DROP")
    run_in(netns, "iptables-nft", "-A", "OUTPUT", "-o", "lo", "-p", "tcp", "-j", "ACCEPT")
    run_in(netns, "ping", "-c", "3", "-W", "0.2", "127.0.0.1")
    before = saved(netns)
    counted = re.search(r"^:OUTPUT DROP \[(\d+):(\d+)\]", before, re.MULTILINE)
    assert counted, before
    assert int(counted.group(1)) >= 3, before

    (script,) = write(netns, [policy_chains(150, 10)])

    assert script.startswith("*filter\n-S\n"), "a large write into a small table lists it first"
    after = saved(netns)
    kept = re.search(r"^:OUTPUT DROP \[(\d+):(\d+)\]", after, re.MULTILINE)
    assert kept, after
    assert int(kept.group(1)) >= int(counted.group(1)), "the policy's counters were reset"
    assert any("-o lo -p tcp -j ACCEPT" in line for line in rules_in(after, "OUTPUT"))
    assert len(rules_in(after, "cali-pi-p149")) == 10
    assert len(rules_in(after, "cali-INPUT")) == 150
    for kernel_chain, ours in (("INPUT", "cali-INPUT"), ("OUTPUT", "cali-OUTPUT")):
        assert f"-j {ours}" in rules_in(after, kernel_chain)[0], "hooks go at the top"
    assert ":INPUT ACCEPT" in after
    assert ":FORWARD ACCEPT" in after


@pytest.mark.netns
def test_first_write_into_a_namespace_without_the_table(netns: str) -> None:
    (script,) = write(netns, [policy_chains(120, 10)])

    assert "\n-S\n" in script
    after = saved(netns)
    assert len(rules_in(after, "cali-pi-p0")) == 10
    assert [r.split(" -j ")[-1] for r in rules_in(after, "FORWARD")] == [
        "cali-FORWARD",
        "ACCEPT",
        "MARK --set-xmark 0x10000/0x10000",
    ]


@pytest.mark.netns
def test_later_writes_rewrite_only_what_changed_without_listing(netns: str) -> None:
    first = policy_chains(120, 10)
    changed = policy_chains(120, 10)
    changed[5] = ("cali-pi-p5", [((mt.Protocol("tcp"), mt.Port("dst", 8080)), mt.ACCEPT)])
    _, second = write(netns, [first, changed])

    assert "\n-S\n" not in second
    assert second.splitlines()[1:2] == [":cali-pi-p5 - [0:0]"]
    after = saved(netns)
    assert [r.split("--dport ")[-1] for r in rules_in(after, "cali-pi-p5")] == ["8080 -j ACCEPT"]
    assert len(rules_in(after, "cali-pi-p6")) == 10


def differing_after(spec: Spec, tamper: list[str]) -> list[set[str]]:
    """Which tables differ from ``spec`` right after writing it, then after running
    ``tamper`` (an iptables-nft command); runs inside the namespace."""

    async def main() -> list[set[str]]:
        writer = IptablesWriter(version=4, backend="nft")
        chains = [
            Chain(name, tuple(Rule(match=m, action=a) for m, a in rules)) for name, rules in spec
        ]
        desired = {"filter": (chains, HOOKS, APPENDS)}
        await writer.apply(desired)
        found = [await writer.differing(desired)]
        await trio.run_process(["iptables-nft", *tamper])
        found.append(await writer.differing(desired))
        return found

    return trio.run(main)


@pytest.mark.netns
@pytest.mark.parametrize(
    "tamper",
    [["-F", "cali-pi-p3"], ["-D", "INPUT", "1"], ["-A", "FORWARD", "-j", "DROP"]],
    ids=["flushed chain", "removed hook", "rule after the appends"],
)
def test_a_check_finds_a_table_another_program_changed(netns: str, tamper: list[str]) -> None:
    """The refresh's and post-write checks' reading (run beside the applies): a table as
    written is not reported; one another program changed is."""
    assert in_netns(netns, differing_after, policy_chains(5, 3), tamper) == [set(), {"filter"}]


def test_the_listing_is_only_for_the_nft_backend_and_large_writes() -> None:
    chains = [Chain(f"cali-pi-p{i}", (Rule(action=mt.Jump("ACCEPT")),) * 20) for i in range(100)]
    hooks = [("INPUT", "cali-INPUT")]
    empty = TableState({}, frozenset())
    nft, legacy = IptablesWriter(backend="nft"), IptablesWriter(backend="legacy")

    assert nft.plan("filter", empty, chains, hooks).text().startswith("*filter\n-S\n:INPUT ACCEPT")
    assert "\n-S\n" not in legacy.plan("filter", empty, chains, hooks).text()
    assert "\n-S\n" not in nft.plan("filter", empty, chains[:10], hooks).text()
    full = TableState({f"other-{i}": ("",) * 100 for i in range(10)}, frozenset())
    assert "\n-S\n" not in nft.plan("filter", full, chains, hooks).text(), (
        "the kernel's table is large"
    )


def forward_targets(ns: str) -> list[str]:
    return [r.split(" -j ")[-1] for r in rules_in(saved(ns), "FORWARD")]


@pytest.mark.netns
@pytest.mark.parametrize("insert_mode", ["insert", "append"])
def test_felix_forward_rules_stay_behind_other_programs_rules(netns: str, insert_mode: str) -> None:
    """The jump into cali-FORWARD goes at the top (or, in append mode, after the rules there);
    Felix's accept of what policy accepted, and its mark, stay the last rules of FORWARD: a
    rule another program appends later is moved in front of them on the next write, and a
    write with nothing to change writes nothing."""
    spec = policy_chains(2, 1)
    run_in(netns, "iptables-nft", "-A", "FORWARD", "-s", "192.0.2.1", "-j", "DROP")
    first, steady = write(netns, [spec, spec], insert_mode)
    assert first
    assert steady == ""
    hook_first = ["cali-FORWARD", "DROP"] if insert_mode == "insert" else ["DROP", "cali-FORWARD"]
    ours = ["ACCEPT", "MARK --set-xmark 0x10000/0x10000"]
    assert forward_targets(netns) == [*hook_first, *ours]

    run_in(netns, "iptables-nft", "-A", "FORWARD", "-s", "192.0.2.2", "-j", "REJECT")
    (moved,) = write(netns, [spec], insert_mode)
    assert "-D FORWARD" in moved
    reject = "REJECT --reject-with icmp-port-unreachable"
    if insert_mode == "insert":
        assert forward_targets(netns) == ["cali-FORWARD", "DROP", reject, *ours]
    else:  # As Felix: in append mode the hook follows every rule of another program's.
        assert forward_targets(netns) == ["DROP", reject, "cali-FORWARD", *ours]

    # The hook removed: put back at the top, or appended and then followed by ours again.
    hook = next(r for r in rules_in(saved(netns), "FORWARD") if "-j cali-FORWARD" in r)
    assert (
        run_in(
            netns, "iptables-nft", *shlex.split(hook[hook.index("-A ") :].replace("-A ", "-D ", 1))
        ).returncode
        == 0
    )
    write(netns, [spec], insert_mode)
    if insert_mode == "insert":
        assert forward_targets(netns) == ["cali-FORWARD", "DROP", reject, *ours]
    else:
        assert forward_targets(netns) == ["DROP", reject, "cali-FORWARD", *ours]


@pytest.mark.netns
def test_switching_to_append_mode_moves_the_hooks_below_other_programs_rules(netns: str) -> None:
    """ChainInsertMode Insert then Append: the jump into cali-FORWARD, inserted at the top,
    moves below the rules another program has in FORWARD (it stayed above them); back to
    Insert, it returns to the top. A rule inserted above our hook in insert mode is put
    below it again on the next write, as Felix does."""
    spec = policy_chains(2, 1)
    run_in(netns, "iptables-nft", "-A", "FORWARD", "-s", "192.0.2.1", "-j", "DROP")
    write(netns, [spec], "insert")
    ours = ["ACCEPT", "MARK --set-xmark 0x10000/0x10000"]
    assert forward_targets(netns) == ["cali-FORWARD", "DROP", *ours]
    (moved, steady) = write(netns, [spec, spec], "append")
    assert moved
    assert steady == ""
    assert forward_targets(netns) == ["DROP", "cali-FORWARD", *ours]
    write(netns, [spec], "insert")
    assert forward_targets(netns) == ["cali-FORWARD", "DROP", *ours]
    run_in(netns, "iptables-nft", "-I", "FORWARD", "1", "-s", "192.0.2.3", "-j", "DROP")
    write(netns, [spec], "insert")
    assert forward_targets(netns) == ["cali-FORWARD", "DROP", "DROP", *ours]


def test_a_hook_nobody_wants_is_deleted() -> None:
    """A kernel chain holding a rule of ours that no hook or appended rule wants any more (a
    feature turned off) loses it; the other programs' rules there stay."""
    old_hook = Chain("INPUT", (Rule(action=mt.Jump("cali-gone")),))
    chains = [Chain("cali-INPUT", (Rule(action=mt.Jump("RETURN")),))]
    state = TableState(
        {"cali-INPUT": chains[0].hashes, "INPUT": ("", old_hook.hashes[0])}, frozenset()
    )
    script = IptablesWriter(backend="nft").plan("filter", state, chains, [], []).text()
    assert script.splitlines()[1:] == ["-D INPUT 2", "COMMIT"]


def test_a_jump_inserted_by_an_older_version_moves_to_the_end() -> None:
    """nat POSTROUTING's jump into cali-POSTROUTING is appended (Felix's AppendRules): where an
    older version inserted it at the top, in front of kube-proxy's rules, it is deleted there
    and appended; at the end already, nothing is written."""
    jump = Chain("POSTROUTING", (Rule(action=mt.Jump("cali-POSTROUTING")),))
    chains = [Chain("cali-POSTROUTING", (Rule(action=mt.Jump("RETURN")),))]
    ours = {"cali-POSTROUTING": chains[0].hashes}
    old = TableState({**ours, "POSTROUTING": (jump.hashes[0], "")}, frozenset())
    script = IptablesWriter(backend="nft").plan("nat", old, chains, [], [jump]).text()
    assert script.splitlines()[1:] == ["-D POSTROUTING 1", *jump.lines(), "COMMIT"]
    settled = TableState({**ours, "POSTROUTING": ("", jump.hashes[0])}, frozenset())
    assert not IptablesWriter(backend="nft").plan("nat", settled, chains, [], [jump])


def _write_legacy_while_locked(hold: float, action: mt.Action) -> tuple[float, str]:
    """A legacy write (cali-INPUT with one rule of ``action``) while another program holds the
    xtables lock for ``hold`` seconds: how long the write took, and its error ("" if it
    wrote). Runs inside the namespace (the lock file is the machine's, /run/xtables.lock)."""

    async def main() -> tuple[float, str]:
        writer = IptablesWriter(version=4, backend="legacy", lock_probe_interval=0.01)
        chains = [Chain("cali-INPUT", (Rule(action=action),))]
        error = ""

        async def attempt() -> None:
            nonlocal error
            try:
                await writer.apply({"filter": (chains, HOOKS[:1], ())})
            except DataplaneWriteError as exc:
                error = str(exc)

        with open(XTABLES_LOCK, "a") as lock:  # noqa: ASYNC230 (a lock file, held briefly)
            fcntl.flock(lock, fcntl.LOCK_EX)
            started = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attempt)
                await trio.sleep(hold)
                fcntl.flock(lock, fcntl.LOCK_UN)
            return trio.current_time() - started, error

    return trio.run(main)


@pytest.mark.netns
def test_a_write_waits_for_another_programs_xtables_lock_for_ten_seconds(netns: str) -> None:
    """As Felix (--wait 10): a legacy restore while another program holds the lock waits
    for it and then writes; after 10 s it gives up with the tool's reason (without the
    option the tool would wait for ever). iptables 1.8.8 and later ignore the probe
    interval (IptablesLockProbeIntervalMillis), which is passed as Felix passes it."""
    took, error = in_netns(netns, _write_legacy_while_locked, 0.5, mt.RETURN)
    assert (took >= 0.5, error) == (True, "")
    listed = run_in(netns, "iptables-legacy-save", "-t", "filter").stdout
    assert rules_in(listed, "cali-INPUT")[0].endswith("-j RETURN")
    took, error = in_netns(netns, _write_legacy_while_locked, 12.0, mt.ACCEPT)
    assert "xtables lock" in error
    assert took >= 12.0
