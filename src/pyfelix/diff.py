"""How a node's programmed rules differ from what pyfelix computes for it (``pyfelix diff``).

The node's side is a ruleset as the kernel prints it: ``iptables-save`` (a second dump of the
same tables, as ``ip6tables-save`` appended, is read as IPv6), with ``ipset save`` appended for
the sets; or ``nft list ruleset``. Only what Felix owns is compared: the ``cali-`` chains, the
rules put into the kernel's chains (they carry a ``cali:`` id) and the ``cali`` sets; in nft
mode the ``calico`` tables. Everything else on a node belongs to other tools.

Rules are paired by their ``cali:`` ids first. An id hashes its rule and every rule above it in
the chain, so a shared id is the same rule in the same place, and a rule someone inserted
(without an id) leaves the ids below it intact. Where ids part, the rest is paired by the
rules' text, spelling differences between a restore input and a save listing aside, so a rule
that only moved reads as moved, and a changed one as one line out and one in. What this leaves
to the caller: computing the node's state, and choosing the form (the ruleset's).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from pyfelix_dataplane.linux.ipsets import parse_save as parse_ipset_save
from pyfelix_dataplane.rules.nft import TABLE as NFT_TABLE
from pyfelix_dataplane.rules.nft import render_nftables
from pyfelix_dataplane.rules.render import render
from pyfelix_dataplane.state import NodeState

PREFIX = "cali-"
_ID = re.compile(r"cali:([A-Za-z0-9_-]{16})")
_COMMENT = re.compile(r'-m comment --comment (?:"[^"]*"|\S+) ?')
_NFT_COMMENT = re.compile(r' ?comment "[^"]*"$')
_COUNTER = re.compile(r"counter packets \d+ bytes \d+")
#: iptables-save's spelling of what a restore input may spell long.
_SHORT = {
    "--jump": "-j",
    "--goto": "-g",
    "--protocol": "-p",
    "--match": "-m",
    "--source": "-s",
    "--destination": "-d",
    "--in-interface": "-i",
    "--out-interface": "-o",
}
#: The protocol matches iptables-save adds after ``-p``.
_IMPLICIT = {"-m tcp", "-m udp", "-m sctp", "-m icmp", "-m icmp6", "-m udplite"}


class RulesetError(ValueError):
    """The ruleset is neither an iptables-save nor an nft listing."""


@attrs.frozen
class Ruleset:
    """One side: rule lines per chain (keyed ``ipv4/filter/cali-FORWARD``), the tables shown
    (``ipv4/filter``), and the sets, or None when the side did not show them."""

    form: str
    chains: Mapping[str, tuple[str, ...]]
    tables: frozenset[str]
    sets: Mapping[str, frozenset[str]] | None


def rule_id(line: str) -> str:
    match = _ID.search(line)
    return match.group(1) if match else ""


def parse_iptables(text: str, version: int = 4) -> Ruleset:
    """An ``iptables-save`` (or our restore input), perhaps two of them and ``ipset save``."""
    chains: dict[str, list[str]] = {}
    tables: set[str] = set()
    where = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = f"ipv{version}/{line[1:].strip()}"
            if table in tables and version == 4:
                version, table = 6, f"ipv6/{line[1:].strip()}"
            tables.add(table)
            where = table
        elif line.startswith(":") and where:
            name = line[1:].split()[0]
            if name.startswith(PREFIX):
                chains.setdefault(f"{where}/{name}", [])
        elif line.startswith(("-A ", "-I ")) and where:
            verb, chain, *rest = line.split(" ", 2)
            if not chain.startswith(PREFIX) and not _ID.search(line):
                continue
            body = " ".join(rest)
            if verb == "-I" and body.split(" ", 1)[0].isdigit():
                body = body.split(" ", 1)[1] if " " in body else ""
            rules = chains.setdefault(f"{where}/{chain}", [])
            rule = f"-A {chain} {body}".rstrip()
            if verb == "-I":
                rules.insert(0, rule)
            else:
                rules.append(rule)
    kernel_sets = parse_ipset_save(text)
    sets = {name: s.members for name, s in kernel_sets.items() if name.startswith("cali")}
    return Ruleset(
        "iptables",
        {k: tuple(v) for k, v in chains.items()},
        frozenset(tables),
        sets if kernel_sets else None,
    )


def _nft_tables(text: str) -> Iterator[tuple[int, list[str]]]:
    """The ``calico`` tables of a listing: (IP version, their lines)."""
    lines = iter(text.splitlines())
    for line in lines:
        words = line.split()
        if len(words) == 4 and words[0] == "table" and words[2] == NFT_TABLE and words[3] == "{":
            if words[1] not in ("ip", "ip6"):
                continue
            body = []
            for inner in lines:
                if inner.rstrip() == "}":
                    break
                body.append(inner)
            yield (6 if words[1] == "ip6" else 4), body


def parse_nft(text: str) -> Ruleset:
    """``nft list ruleset`` (or our ``nft -f`` input): the ``calico`` tables' chains and sets."""
    chains: dict[str, tuple[str, ...]] = {}
    sets: dict[str, frozenset[str]] = {}
    tables: set[str] = set()
    for version, body in _nft_tables(text):
        tables.add(f"ipv{version}/{NFT_TABLE}")
        lines = iter(body)
        for line in lines:
            words = line.split()
            if len(words) != 3 or words[2] != "{" or words[0] not in ("chain", "set", "map"):
                continue
            kind, name = words[0], words[1].strip('"')
            block = []
            for inner in lines:
                stripped = inner.strip()
                if stripped == "}":
                    break
                block.append(stripped)
            if kind == "chain":
                rules = tuple(b for b in block if not (b.startswith("type ") and " hook " in b))
                chains[f"ipv{version}/{NFT_TABLE}/{name}"] = rules
            else:
                sets[f"ipv{version}/{name}"] = frozenset(_nft_elements(block))
    return Ruleset("nft", chains, frozenset(tables), sets if tables else None)


def _nft_elements(block: Sequence[str]) -> Iterator[str]:
    text = " ".join(block)
    if "elements = {" not in text:
        return
    inner = text[text.index("elements = {") + len("elements = {") :]
    inner = inner[: inner.rfind("}")]
    for item in inner.split(","):
        if item.strip():
            yield item.strip().strip('"')


def parse_ruleset(text: str, version: int = 4) -> Ruleset:
    """Either form, told apart by its first word that means something."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("table "):
            return parse_nft(text)
        if stripped.startswith(("*", "create ", "add ")):
            return parse_iptables(text, version)
    raise RulesetError("neither iptables-save (*filter ...) nor nft list ruleset (table ...)")


def expected(state: NodeState, form: str) -> Ruleset:
    """What pyfelix would program on the node, in the ruleset's form."""
    if form == "nft":
        scripts = render_nftables(state).values()
        return parse_nft("\n".join(table.script() for table in scripts))
    rendered = render(state)
    texts = []
    for version, tables in rendered.iptables.items():
        parsed = parse_iptables("".join(tables.values()), version)
        texts.append(parsed)
    sets = parse_ipset_save(rendered.ipset_restore)
    return Ruleset(
        "iptables",
        {k: v for parsed in texts for k, v in parsed.chains.items()},
        frozenset(t for parsed in texts for t in parsed.tables),
        {name: s.members for name, s in sets.items()},
    )


def normal(line: str) -> str:
    """A rule's text without its comments, in iptables-save's or nft's spelling: what a rule
    looks like whoever wrote it."""
    text = _COUNTER.sub("counter", _NFT_COMMENT.sub("", _COMMENT.sub("", line)))
    words = [_SHORT.get(word, word) for word in text.split()]
    joined = " ".join(words)
    for implicit in _IMPLICIT:
        joined = joined.replace(f" {implicit} ", " ")
    return " ".join(w.removesuffix("/32") for w in joined.split())


@attrs.frozen
class ChainDiff:
    """One chain's difference: the expected lines the node lacks, the node's we did not expect,
    and how many rules sit in the same place but with another id (a rule above changed)."""

    chain: str
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    moved: int = 0


@attrs.frozen
class Diff:
    node: str
    form: str
    same_chains: int
    chains_missing: tuple[str, ...]
    chains_extra: tuple[str, ...]
    chains_changed: tuple[ChainDiff, ...]
    tables_not_shown: tuple[str, ...]
    #: None when the ruleset held no sets.
    sets_missing: tuple[str, ...] | None
    sets_extra: tuple[str, ...] | None
    #: name -> (members missing on the node, members the node has extra)
    members: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]

    @property
    def same(self) -> bool:
        return not (
            self.chains_missing
            or self.chains_extra
            or self.chains_changed
            or self.sets_missing
            or self.sets_extra
            or self.members
        )


def _chain_diff(chain: str, want: Sequence[str], have: Sequence[str]) -> ChainDiff | None:
    keys = [rule_id(line) or normal(line) for line in want]
    node_keys = [rule_id(line) or normal(line) for line in have]
    if keys == node_keys:
        return None
    missing: list[str] = []
    extra: list[str] = []
    moved = 0
    by_id = difflib.SequenceMatcher(None, keys, node_keys, autojunk=False)
    for op, i1, i2, j1, j2 in by_id.get_opcodes():
        if op == "equal":
            continue
        ours, theirs = want[i1:i2], have[j1:j2]
        by_text = difflib.SequenceMatcher(
            None, [normal(x) for x in ours], [normal(x) for x in theirs], autojunk=False
        )
        for text_op, a1, a2, b1, b2 in by_text.get_opcodes():
            if text_op == "equal":
                moved += a2 - a1
            else:
                missing.extend(ours[a1:a2])
                extra.extend(theirs[b1:b2])
    return ChainDiff(chain, tuple(missing), tuple(extra), moved)


def compare(node: str, want: Ruleset, have: Ruleset) -> Diff:
    """The node's ruleset against the expected one, over the tables the node's side shows."""
    shown = have.tables
    ours = {k: v for k, v in want.chains.items() if _table(k) in shown}
    changed = []
    same = 0
    missing, extra = [], []
    for chain in sorted(ours.keys() | have.chains.keys()):
        if not _own(chain) or (chain in ours and chain in have.chains):
            # A kernel chain is compared by the rules of ours it holds, even none.
            difference = _chain_diff(chain, ours.get(chain, ()), have.chains.get(chain, ()))
            if difference is None:
                same += 1
            else:
                changed.append(difference)
        elif chain in ours:
            missing.append(chain)
        else:
            extra.append(chain)
    sets_missing = sets_extra = None
    members: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    if have.sets is not None and want.sets is not None:
        sets_missing = tuple(sorted(want.sets.keys() - have.sets.keys()))
        sets_extra = tuple(sorted(have.sets.keys() - want.sets.keys()))
        for name in sorted(want.sets.keys() & have.sets.keys()):
            lacking = want.sets[name] - have.sets[name]
            surplus = have.sets[name] - want.sets[name]
            if lacking or surplus:
                members[name] = (tuple(sorted(lacking)), tuple(sorted(surplus)))
    not_shown = {_table(k) for k in want.chains} - shown
    return Diff(
        node,
        have.form,
        same,
        tuple(missing),
        tuple(extra),
        tuple(changed),
        tuple(sorted(not_shown)),
        sets_missing,
        sets_extra,
        members,
    )


def _table(key: str) -> str:
    """``ipv4/filter`` of ``ipv4/filter/cali-pi-gnp/web`` (chain names hold slashes)."""
    version, table, _ = key.split("/", 2)
    return f"{version}/{table}"


def _own(key: str) -> bool:
    _, table, chain = key.split("/", 2)
    return chain.startswith(PREFIX) or table == NFT_TABLE


def _lines(title: str, items: Iterable[str], mark: str) -> list[str]:
    listed = [f"  {mark} {item}" for item in items]
    return [title, *listed] if listed else []


def report_text(diff: Diff, source: str) -> str:
    verdict = "matches" if diff.same else "differs from"
    out = [f"node {diff.node}: {source} ({diff.form}) {verdict} what pyfelix computes"]
    out.append(
        f"chains: {diff.same_chains} identical, {len(diff.chains_changed)} differ,"
        f" {len(diff.chains_missing)} missing on the node, {len(diff.chains_extra)} extra"
    )
    out += _lines("missing on the node:", diff.chains_missing, "-")
    out += _lines("extra on the node:", diff.chains_extra, "+")
    for chain in diff.chains_changed:
        moved = f" ({chain.moved} rules below a change, same text)" if chain.moved else ""
        out.append(f"chain {chain.chain}{moved}:")
        out += [f"  - {line}" for line in chain.missing]
        out += [f"  + {line}" for line in chain.extra]
    for table in diff.tables_not_shown:
        out.append(f"table {table}: not in the ruleset, not compared")
    if diff.sets_missing is None:
        hint = " (append `ipset save`)" if diff.form == "iptables" else ""
        out.append(f"sets: not in the ruleset, not compared{hint}")
    else:
        out.append(
            f"sets: {len(diff.sets_missing)} missing on the node, {len(diff.sets_extra or ())}"
            f" extra, {len(diff.members)} with other members"
        )
        out += _lines("missing sets:", diff.sets_missing, "-")
        out += _lines("extra sets:", diff.sets_extra or (), "+")
        for name, (lacking, surplus) in diff.members.items():
            out.append(f"set {name}:")
            out += [f"  - {member}" for member in lacking]
            out += [f"  + {member}" for member in surplus]
    return "\n".join(out) + "\n"


def report_json(diff: Diff) -> dict[str, Any]:
    return {
        "node": diff.node,
        "form": diff.form,
        "same": diff.same,
        "chains": {
            "identical": diff.same_chains,
            "missing": list(diff.chains_missing),
            "extra": list(diff.chains_extra),
            "changed": [
                {
                    "chain": c.chain,
                    "missing": list(c.missing),
                    "extra": list(c.extra),
                    "moved": c.moved,
                }
                for c in diff.chains_changed
            ],
        },
        "tables_not_compared": list(diff.tables_not_shown),
        "sets": None
        if diff.sets_missing is None
        else {
            "missing": list(diff.sets_missing),
            "extra": list(diff.sets_extra or ()),
            "members": {
                name: {"missing": list(lacking), "extra": list(surplus)}
                for name, (lacking, surplus) in diff.members.items()
            },
        },
    }
