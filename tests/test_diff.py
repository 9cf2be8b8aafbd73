"""``pyfelix diff``: a node's saved ruleset against what pyfelix computes for it.

The rulesets are real: node-a's computed tables are written into a namespace with the kernel's
own tools (iptables-restore and ipset restore, or nft -f), read back with iptables-save, ipset
save or nft list ruleset, then changed behind the agent's back the way an operator or another
tool would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyfelix.diff import compare, expected, parse_iptables, parse_nft, parse_ruleset
from pyfelix.dryrun import compute
from pyfelix.resources import load_paths
from pyfelix_dataplane.rules.nft import render_nftables
from pyfelix_dataplane.rules.render import render
from pyfelix_dataplane.state import NodeState
from tests.netns import run_in
from tests.rules_harness import REPO

EXAMPLES = str(REPO / "examples")


def _state(node: str = "node-a") -> NodeState:
    resources = [item.resource for item in load_paths([REPO / "examples"]).resources]
    return compute(resources, node)[1]


def _restore_text(state: NodeState) -> str:
    rendered = render(state)
    return "".join(rendered.iptables[4].values()) + rendered.ipset_restore


def pyfelix(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", *argv],
        capture_output=True,
        text=True,
        check=False,
        input=stdin,
    )


def test_a_ruleset_matches_itself_and_names_what_was_changed() -> None:
    state = _state()
    text = _restore_text(state)
    want = expected(state, "iptables")
    assert compare("node-a", want, parse_ruleset(text)).same
    lines = text.splitlines()
    dropped = next(line for line in lines if line.startswith("-A cali-FORWARD "))
    edited = [line for line in lines if line != dropped]
    at = edited.index(next(line for line in edited if line.startswith("-A cali-FORWARD ")))
    edited.insert(at, "-A cali-FORWARD -s 10.9.9.9/32 -j ACCEPT")
    edited.append("add cali40this-host 192.0.2.99")
    diff = compare("node-a", want, parse_iptables("\n".join(edited)))
    assert not diff.same
    (chain,) = diff.chains_changed
    assert chain.chain == "ipv4/filter/cali-FORWARD"
    assert chain.missing == (dropped,)
    assert chain.extra == ("-A cali-FORWARD -s 10.9.9.9/32 -j ACCEPT",)
    assert diff.members == {"cali40this-host": ((), ("192.0.2.99",))}
    # Only IPv4 was shown: the IPv6 tables are named, not called missing.
    assert "ipv6/filter" in diff.tables_not_shown
    assert not diff.chains_missing


def test_rules_below_a_change_keep_their_text_though_their_ids_change() -> None:
    """Felix's ids chain through a chain, so every rule below a changed one gets a new id:
    those are counted as the same rule, not listed as changed."""
    state = _state()
    text = _restore_text(state)
    chain = "cali-FORWARD"
    first = next(line for line in text.splitlines() if line.startswith(f"-A {chain} "))
    renamed = text.replace(first, first.replace('"cali:', '"cali:X', 1)[:-1] + " -j ACCEPT")
    relabelled = []
    seen = False
    for line in renamed.splitlines():
        ours = line.startswith(f"-A {chain} ")
        # A node whose ids were computed over another first rule.
        relabelled.append(line.replace('"cali:', '"cali:Z', 1) if ours and seen else line)
        seen = seen or ours
    diff = compare("node-a", expected(state, "iptables"), parse_iptables("\n".join(relabelled)))
    (changed,) = diff.chains_changed
    assert changed.missing == (first,)
    assert len(changed.extra) == 1
    assert changed.moved == sum(1 for x in text.splitlines() if x.startswith(f"-A {chain} ")) - 1


def test_the_nft_form_is_read_from_a_listing() -> None:
    state = _state()
    script = "\n".join(table.script() for table in render_nftables(state).values())
    have = parse_ruleset(script)
    assert have.form == "nft"
    assert compare("node-a", expected(state, "nft"), have).same
    other = compare("node-b", expected(_state("node-b"), "nft"), parse_nft(script))
    assert other.chains_missing
    assert other.chains_extra
    assert any(name.endswith("this-host") for name in other.members)


def test_a_file_of_neither_form_is_an_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_text("hello\n")
    result = pyfelix("diff", EXAMPLES, "--node", "node-a", "--ruleset", str(junk))
    assert result.returncode == 2
    assert "neither iptables-save" in result.stderr


def _ns(netns: str, *argv: str, stdin: str | None = None) -> str:
    done = run_in(netns, *argv, input_text=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.netns
def test_a_programmed_iptables_node_matches_then_shows_what_was_changed(
    netns: str, tmp_path: Path
) -> None:
    rendered = render(_state())
    _ns(netns, "ipset", "restore", stdin=rendered.ipset_restore)
    for version, tool in ((4, "iptables-restore"), (6, "ip6tables-restore")):
        for script in rendered.iptables[version].values():
            _ns(netns, tool, "--noflush", stdin=script)

    def save() -> Path:
        path = tmp_path / "node-a.rules"
        text = "".join(_ns(netns, tool) for tool in ("iptables-save", "ip6tables-save")) + _ns(
            netns, "ipset", "save"
        )
        path.write_text(text)
        return path

    result = pyfelix("diff", EXAMPLES, "--node", "node-a", "--ruleset", str(save()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matches what pyfelix computes" in result.stdout
    third = _ns(netns, "iptables", "-S", "cali-FORWARD").splitlines()[3]
    _ns(netns, "iptables", "-D", "cali-FORWARD", "3")
    _ns(netns, "iptables", "-I", "cali-FORWARD", "1", "-s", "10.9.9.9", "-j", "ACCEPT")
    _ns(netns, "ipset", "add", "cali40this-host", "192.0.2.99")
    _ns(netns, "iptables", "-E", "cali-to-host-endpoint", "cali-renamed")
    path = save()
    result = pyfelix("diff", EXAMPLES, "--node", "node-a", "--ruleset", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    rule_id = third.split('"cali:')[1][:16]
    assert f'  - -A cali-FORWARD -m comment --comment "cali:{rule_id}"' in result.stdout
    assert "  + -A cali-FORWARD -s 10.9.9.9/32 -j ACCEPT" in result.stdout
    assert "  - ipv4/filter/cali-to-host-endpoint" in result.stdout
    assert "  + ipv4/filter/cali-renamed" in result.stdout
    assert "set cali40this-host:\n  + 192.0.2.99" in result.stdout
    as_json = pyfelix(
        "diff",
        EXAMPLES,
        "--node",
        "node-a",
        "--ruleset",
        "-",
        "--format",
        "json",
        stdin=path.read_text(),
    )
    document = json.loads(as_json.stdout)
    assert document["same"] is False
    assert document["chains"]["missing"] == ["ipv4/filter/cali-to-host-endpoint"]
    assert document["chains"]["extra"] == ["ipv4/filter/cali-renamed"]
    assert document["sets"]["members"] == {
        "cali40this-host": {"missing": [], "extra": ["192.0.2.99"]}
    }


@pytest.mark.netns
def test_a_programmed_nft_node_matches_then_shows_what_was_changed(
    netns: str, tmp_path: Path
) -> None:
    for table in render_nftables(_state()).values():
        script = "\n".join(
            line for line in table.script().splitlines() if not line.startswith("delete table")
        )
        _ns(netns, "nft", "-f", "-", stdin=script)
    path = tmp_path / "node-a.nft"
    path.write_text(_ns(netns, "nft", "list", "ruleset"))
    result = pyfelix("diff", EXAMPLES, "--node", "node-a", "--ruleset", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    _ns(netns, "nft", "add", "element", "ip", "calico", "cali40this-host", "{ 192.0.2.99 }")
    _ns(
        netns,
        "nft",
        "insert",
        "rule",
        "ip",
        "calico",
        "filter-cali-FORWARD",
        "ip",
        "saddr",
        "10.9.9.9",
        "accept",
    )
    path.write_text(_ns(netns, "nft", "list", "ruleset"))
    result = pyfelix("diff", EXAMPLES, "--node", "node-a", "--ruleset", str(path))
    assert result.returncode == 1
    assert "chain ipv4/calico/filter-cali-FORWARD:\n  + ip saddr 10.9.9.9 accept" in result.stdout
    assert "set ipv4/cali40this-host:\n  + 192.0.2.99" in result.stdout
