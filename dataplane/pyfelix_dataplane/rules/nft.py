"""nftables rendering (NFTablesMode): Felix's layout, from the same chains the iptables mode
renders, so both modes decide every packet by the same rules.

One table per IP family, ``ip calico`` and ``ip6 calico``. iptables' tables become layers of
it: each chain takes its table's name as a prefix (``cali-FORWARD`` in filter is
``filter-cali-FORWARD``), and the kernel chains become base chains of the table hooked at
Felix's priorities (``filter-FORWARD``: filter hook forward priority 0, ``nat-POSTROUTING``:
srcnat + 10, so kube-proxy's masquerade marks come first, ...) holding the jumps into ours
and the rules iptables keeps at the end of kernel chains. IP sets are sets of the table
(``cali40s:x`` is ``cali40s-x``; networks are interval sets, named ports concatenations),
and the workload dispatch is a verdict map keyed by interface name instead of a chain of
interface matches. Each rule is ``<match> counter <verdict>`` with ``comment "cali:<id>;
..."``, its id chained as the iptables mode chains them, over the nft text. The rules come to
this module as typed criteria and actions (matches.py), the same values the iptables mode
spells; nothing here reads iptables text.

An nft interval set refuses overlapping elements, so a member inside a wider member of the
same set is left out (the wider one matches it anyway), as Felix's IP set member index
suppresses them in this mode.

One departure from Felix's text: a rule matching several ports names a set of the table
holding them (``tcp dport @calipt-80_443``), shared by every rule with the same ports, where
Felix writes an anonymous set into each rule (``tcp dport { 80, 443 }``). The kernel names
each anonymous set by scanning every set of the table, so loading N of them costs O(N^2)
(1,000 rules 0.19 s, 4,000 rules 2.3 s: bench/RESULTS.md); the packets matched are the same.

Every criterion and action has its case here (the type checker holds the unions closed); an
``NftUnsupported`` error can only mean an IP set type or kernel target without an nft spelling,
caught by the tests that render every cluster.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import assert_never

import attrs

from pyfelix.errors import PyfelixError
from pyfelix_dataplane.rules import matches as mt
from pyfelix_dataplane.rules.model import Chain, Rule, rule_body, rule_ids
from pyfelix_dataplane.rules.render import HOOKS, TABLES, ip_versions, kernel_ipsets, render_chains
from pyfelix_dataplane.rules.settings import Settings
from pyfelix_dataplane.rules.static import kernel_appends
from pyfelix_dataplane.state import NodeState

TABLE = "calico"
MAX_COMMENT = 128
#: The sets of ports that rules match several of at once (``tcp dport @calipt-80_443``).
PORT_SET_PREFIX = "calipt-"
#: Felix's base chains: (layer, kernel chain, type, hook, priority).
BASE_CHAINS: tuple[tuple[str, str, str, str, int], ...] = (
    ("raw", "PREROUTING", "filter", "prerouting", -300),
    ("raw", "OUTPUT", "filter", "output", -300),
    ("mangle", "PREROUTING", "filter", "prerouting", -150),
    ("mangle", "INPUT", "filter", "input", -150),
    ("mangle", "FORWARD", "filter", "forward", -150),
    ("mangle", "OUTPUT", "route", "output", -150),
    ("mangle", "POSTROUTING", "filter", "postrouting", -150),
    ("nat", "PREROUTING", "nat", "prerouting", -100),
    ("nat", "INPUT", "nat", "input", -100),
    ("nat", "OUTPUT", "nat", "output", 110),
    ("nat", "POSTROUTING", "nat", "postrouting", 110),
    ("filter", "INPUT", "filter", "input", 0),
    ("filter", "FORWARD", "filter", "forward", 0),
    ("filter", "OUTPUT", "filter", "output", 0),
)
#: The workload dispatch chains that become verdict maps, and the interface they match.
DISPATCH_MAPS = {"cali-from-wl-dispatch": "iifname", "cali-to-wl-dispatch": "oifname"}
_SET_TYPES = {
    "hash:ip": ("{ip}_addr", False),
    "hash:net": ("{ip}_addr", True),
    "hash:ip,port": ("{ip}_addr . inet_proto . inet_service", False),
}
_PORT_PROTOCOLS = {"6": "tcp", "tcp": "tcp", "17": "udp", "udp": "udp", "132": "sctp"}
_PROTOCOLS = {"ipv6-icmp": "icmpv6", "icmp6": "icmpv6", "58": "icmpv6", "1": "icmp"}
_LOG_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
_RATE_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
_COMMENT_SAFE = re.compile(r"[^\w @%+=:,./-]")


class NftUnsupported(PyfelixError, ValueError):
    """A match or target the nftables rendering has no translation for."""


def layer_name(layer: str, name: str) -> str:
    """A chain's (or map's) name in the table: its layer's prefix unless it has it."""
    return name if name.startswith(layer) else f"{layer}-{name}"


def set_name(ipset: str) -> str:
    """An IP set's name in the table (nft names take no colon)."""
    return ipset.replace(":", "-")


@attrs.frozen
class NftRule:
    """A rule of a chain in nft syntax, without its comment, and the comments to add."""

    text: str
    comment: tuple[str, ...] = ()


@attrs.frozen
class NftChain:
    name: str
    rules: tuple[NftRule, ...]
    #: Base chains: "type <t> hook <h> priority <p>; policy accept;".
    hook: str = ""

    @functools.cached_property
    def hashes(self) -> tuple[str, ...]:
        """The rule ids, as the iptables mode chains them, over the nft text; once per chain
        value (the manager keeps its chains across applies)."""
        bodies = (rule_body(r.text, "", r.comment) for r in self.rules)
        return tuple(rule_ids(self.name, bodies))

    def rule_lines(self) -> list[str]:
        lines = []
        for rule, rule_hash in zip(self.rules, self.hashes, strict=True):
            comment = f"cali:{rule_hash};{_comment_text(rule.comment)}"
            lines.append(f'{rule.text} comment "{comment[:MAX_COMMENT]}"')
        return lines


@functools.lru_cache(maxsize=4096)
def _comment_text(comment: tuple[str, ...]) -> str:
    """A rule's comments as they follow its id (nft quotes them: unsafe characters become
    underscores); once per comment (most rules share a few)."""
    said = _COMMENT_SAFE.sub("_", " ".join(comment))
    return f" {said}" if said else ""


@attrs.frozen
class NftSet:
    type: str
    interval: bool
    elements: frozenset[str]

    def declaration(self) -> str:
        flags = " flags interval;" if self.interval else ""
        return f"{{ type {self.type};{flags} }}"


@attrs.frozen
class NftTable:
    """Everything of one family's ``calico`` table."""

    family: str
    chains: Mapping[str, NftChain]
    sets: Mapping[str, NftSet]
    #: Verdict maps: name -> {interface: "goto <chain>"}.
    maps: Mapping[str, Mapping[str, str]]

    def script(self) -> str:
        """The whole table as ``nft -f`` input (what the dry-run prints): the table is
        replaced in one transaction."""
        lines = [f"table {self.family} {TABLE}", f"delete table {self.family} {TABLE}"]
        lines.append(f"table {self.family} {TABLE} {{")
        for name, nft_set in sorted(self.sets.items()):
            flags = "\n\t\tflags interval" if nft_set.interval else ""
            elements = ""
            if nft_set.elements:
                elements = f"\n\t\telements = {{ {', '.join(sorted(nft_set.elements))} }}"
            lines.append(f"\tset {name} {{\n\t\ttype {nft_set.type}{flags}{elements}\n\t}}")
        for name, entries in sorted(self.maps.items()):
            body = ", ".join(f'"{iface}" : {verdict}' for iface, verdict in sorted(entries.items()))
            elements = f"\n\t\telements = {{ {body} }}" if entries else ""
            lines.append(f"\tmap {name} {{\n\t\ttype ifname : verdict{elements}\n\t}}")
        for name, chain in sorted(self.chains.items()):
            lines.append(f"\tchain {name} {{")
            if chain.hook:
                lines.append(f"\t\t{chain.hook}")
            lines.extend(f"\t\t{line}" for line in chain.rule_lines())
            lines.append("\t}")
        lines.append("}")
        return "\n".join(lines) + "\n"


def render_nftables(dp: NodeState, versions: Iterable[int] | None = None) -> dict[int, NftTable]:
    """Each IP version's table for the state, with the Nftables* settings."""
    settings = Settings.for_node(dp, nftables=True)
    versions = tuple(versions) if versions is not None else ip_versions(dp.config)
    sets = kernel_ipsets(dp, versions)
    appends = kernel_appends(settings)
    return {
        version: nft_table(version, render_chains(dp, version, settings), appends, sets)
        for version in versions
    }


def family(version: int) -> str:
    return "ip6" if version == 6 else "ip"


def nft_table(
    version: int,
    chains: Mapping[str, Sequence[Chain]],
    appends: Mapping[str, Sequence[Chain]],
    ipsets: Mapping[str, tuple[str, frozenset[str]]],
) -> NftTable:
    """The ``calico`` table of IP ``version`` for the chains (per iptables table) the rules
    rendered, the rules kept at the end of kernel chains, and the kernel's IP sets (named as
    in the iptables mode)."""
    out, maps = nft_chains(version, chains, appends)
    return NftTable(family(version), out, {**nft_sets(ipsets, version), **port_sets(out)}, maps)


def nft_chains(
    version: int, chains: Mapping[str, Sequence[Chain]], appends: Mapping[str, Sequence[Chain]]
) -> tuple[dict[str, NftChain], dict[str, dict[str, str]]]:
    """The table's chains (base chains too) and verdict maps."""
    out: dict[str, NftChain] = {}
    maps: dict[str, dict[str, str]] = {}
    for layer in TABLES:
        for chain in chains[layer]:
            base = _dispatch_base(chain.name)
            if layer == "filter" and base is not None:
                mapped = _dispatch_entries(chain, layer)
                maps.setdefault(layer_name(layer, base), {}).update(mapped)
                if chain.name == base:
                    out[layer_name(layer, base)] = _dispatch_chain(layer, base)
                continue
            rules = tuple(translate(rule, layer, version) for rule in chain.rules)
            out[layer_name(layer, chain.name)] = NftChain(layer_name(layer, chain.name), rules)
    for layer, kernel_chain, chain_type, hook, priority in BASE_CHAINS:
        name = layer_name(layer, kernel_chain)
        jumps = [
            Rule(action=mt.Jump(ours)) for hooked, ours in HOOKS[layer] if hooked == kernel_chain
        ]
        kept = [
            rule
            for chain in appends.get(layer, ())
            if chain.name == kernel_chain
            for rule in chain.rules
        ]
        rules = tuple(translate(rule, layer, version) for rule in (*jumps, *kept))
        spec = f"type {chain_type} hook {hook} priority {priority}; policy accept;"
        out[name] = NftChain(name, rules, spec)
    return out, maps


def nft_sets(ipsets: Mapping[str, tuple[str, frozenset[str]]], version: int) -> dict[str, NftSet]:
    """The table's sets for the kernel's IP sets of ``version`` (named as iptables names
    them)."""
    prefix = f"cali{version}0"
    return {
        set_name(name): _nft_set(set_type, members, version)
        for name, (set_type, members) in ipsets.items()
        if name.startswith(prefix)
    }


def _dispatch_base(name: str) -> str | None:
    for base in DISPATCH_MAPS:
        if name == base or name.startswith(f"{base}-"):
            return base
    return None


def _dispatch_entries(chain: Chain, layer: str) -> dict[str, str]:
    """The interface -> goto entries of one chain of the iptables dispatch tree."""
    entries = {}
    for rule in chain.rules:
        match rule.match, rule.action:
            case (mt.Interface(name=name),), mt.Goto(target) if not name.endswith("+"):
                if not _dispatch_base(target):
                    entries[name] = f"goto {layer_name(layer, target)}"
    return entries


def _dispatch_chain(layer: str, base: str) -> NftChain:
    name = layer_name(layer, base)
    lookup = NftRule(f"{DISPATCH_MAPS[base]} vmap @{name}")
    return NftChain(name, (lookup, NftRule("counter drop", ("Unknown interface",))))


def _nft_set(set_type: str, members: Iterable[str], version: int) -> NftSet:
    ip = "ipv4" if version == 4 else "ipv6"
    if set_type not in _SET_TYPES:
        raise NftUnsupported(f"IP set type {set_type}")
    pattern, interval = _SET_TYPES[set_type]
    if set_type == "hash:ip,port":
        elements = frozenset(_ip_port_element(m) for m in members)
    elif interval:
        elements = frozenset(_uncovered(members))
    else:
        elements = frozenset(members)
    return NftSet(pattern.format(ip=ip), interval, elements)


def _ip_port_element(member: str) -> str:
    """``10.0.0.1,tcp:8080`` -> ``10.0.0.1 . tcp . 8080``."""
    address, _, port = member.partition(",")
    protocol, _, number = port.partition(":")
    return f"{address} . {protocol} . {number}"


def _uncovered(members: Iterable[str]) -> list[str]:
    """The members no other member of the set contains (an interval set refuses overlaps)."""
    networks = sorted(
        {ipaddress.ip_network(m, strict=False) for m in members},
        key=lambda n: (n.version, int(n.network_address), -int(n.num_addresses)),
    )
    kept: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for network in networks:
        last = kept[-1] if kept else None
        if (
            last is not None
            and last.version == network.version
            and int(network.network_address) <= int(last.broadcast_address)
        ):
            continue  # sorted by start, widest first: inside the last kept one
        kept.append(network)
    return [str(n) if n.prefixlen != n.max_prefixlen else str(n.network_address) for n in kept]


def translate(rule: Rule, layer: str, version: int) -> NftRule:
    """One rule as nft text: ``<match> counter <verdict>``; once per rule value (every
    workload's chains repeat most of their rules), and once for both IP versions where
    nothing in it names one (most rules: in the benchmark 7,470 of 8,470)."""
    versioned = any(isinstance(c, (mt.Net, mt.InSet)) for c in rule.match)
    return _translate(rule, layer, version if versioned else 0)


@functools.lru_cache(maxsize=65536)
def _translate(rule: Rule, layer: str, version: int) -> NftRule:
    try:
        parts = _match(rule.match, version)
        if rule.action is not None:
            parts += ["counter", _action(rule.action, layer)]
    except NftUnsupported as exc:
        raise NftUnsupported(f"{rule.body}: {exc}") from exc
    # As Felix: a rule of only a comment is a "continue" (nft keeps no empty rule).
    return NftRule(" ".join(parts) or "continue", rule.comment)


def _ports(spec: str) -> str:
    """One port (or range) as it is; several as the table's set of them (``@calipt-...``),
    or an anonymous set where ranges overlap (a named interval set refuses that)."""
    ports = [p.replace(":", "-") for p in spec.split(",")]
    if len(ports) == 1:
        return ports[0]
    if _overlapping(ports):
        return "{ " + ", ".join(ports) + " }"
    return f"@{PORT_SET_PREFIX}{'_'.join(ports)}"


def _port_range(port: str) -> tuple[int, int]:
    low, _, high = port.partition("-")
    return int(low), int(high or low)


def _overlapping(ports: Sequence[str]) -> bool:
    ranges = sorted(_port_range(port) for port in ports)
    return any(later[0] <= earlier[1] for earlier, later in itertools.pairwise(ranges))


_PORT_SET_REFERENCE = re.compile(rf"@({PORT_SET_PREFIX}[0-9_-]+)")


def port_sets(chains: Mapping[str, NftChain]) -> dict[str, NftSet]:
    """The port sets the chains' rules name: each holds its ports (ranges make it an
    interval set), and its name says which."""
    found: dict[str, NftSet] = {}
    for chain in chains.values():
        for rule in chain.rules:
            if PORT_SET_PREFIX not in rule.text:
                continue
            for name in _PORT_SET_REFERENCE.findall(rule.text):
                ports = name.removeprefix(PORT_SET_PREFIX).split("_")
                interval = any("-" in port for port in ports)
                found[name] = NftSet("inet_service", interval, frozenset(ports))
    return found


def _match(match: mt.Match, version: int) -> list[str]:
    """The criteria in nft's words; a port match takes its protocol from the criteria before
    it, as iptables' does."""
    ip = "ip" if version == 4 else "ip6"
    out: list[str] = []
    protocol = ""
    for c in match:
        match c:
            case mt.Protocol(name, negate):
                protocol = name.lower()
                out.append(f"meta l4proto {_op(negate)}{_PROTOCOLS.get(protocol, protocol)}")
            case mt.Net(end, cidr, negate):
                out.append(f"{ip} {end[0]}addr {_op(negate)}{cidr}")
            case mt.InSet(name, flags, negate):
                out.append(_set_match(ip, set_name(name), flags, _op(negate)))
            case mt.Ports(end, ports, negate):
                which = _PORT_PROTOCOLS.get(protocol, "th")
                out.append(f"{which} {end[0]}port {_op(negate)}{_ports(ports)}")
            case mt.Port(end, port):
                out.append(f"{_PORT_PROTOCOLS.get(protocol, 'th')} {end[0]}port {port}")
            case mt.Interface(direction, name, negate):
                which = "iifname" if direction == "in" else "oifname"
                out.append(f'{which} {_op(negate)}"{name.replace("+", "*")}"')
            case mt.Mark(value, mask, negate):
                out.append(f"meta mark & {mask:#x} {'!=' if negate else '=='} {value:#x}")
            case mt.ConnState(states, negate):
                states = states.lower()
                # iptables' DNAT and SNAT "states" are nft's conntrack status bits.
                kind = "status" if states in ("dnat", "snat") else "state"
                out.append(f"ct {kind} {_op(negate)}{states}")
            case mt.AddrType(end, kind, negate, limit_iface_out):
                oif = " . oif" if limit_iface_out else ""
                out.append(f"fib {end[0]}addr{oif} type {_op(negate)}{kind.lower()}")
            case mt.Icmp(icmp_version, icmp_type, code, negate):
                name = "icmp" if icmp_version == 4 else "icmpv6"
                detail = f" {name} code {code}" if code is not None else ""
                out.append(f"{name} type {_op(negate)}{icmp_type}{detail}")
            case mt.Limit(rate, burst):
                number, _, unit = rate.partition("/")
                text = f"limit rate {number}/{_RATE_UNITS.get(unit[:1], unit)}"
                out.append(text + (f" burst {burst} packets" if burst else ""))
            case mt.ReversePath(invert):
                # No route back out of the interface the packet came in on.
                out.append("fib saddr . mark . iif oif " + ("0" if invert else "!= 0"))
            case _:
                assert_never(c)
    return out


def _op(negate: bool) -> str:
    return "!= " if negate else ""


def _set_match(ip: str, name: str, flags: str, op: str) -> str:
    if flags == "src":
        return f"{ip} saddr {op}@{name}"
    if flags == "dst":
        return f"{ip} daddr {op}@{name}"
    if flags in ("dst,dst", "src,src"):
        end, port = ("daddr", "dport") if flags == "dst,dst" else ("saddr", "sport")
        return f"{ip} {end} . meta l4proto . th {port} {op}@{name}"
    raise NftUnsupported(f"set flags {flags}")


#: The kernel's verdicts that nft spells as words.
_VERDICTS = {"ACCEPT": "accept", "DROP": "drop", "RETURN": "return", "NOTRACK": "notrack"}


def _action(action: mt.Action, layer: str) -> str:
    match action:
        case mt.Jump(target) | mt.Goto(target) if target in _VERDICTS:
            return _VERDICTS[target]
        case mt.Jump("REJECT"):
            return "reject"
        case mt.Jump(target) | mt.Goto(target) if target.isupper():
            raise NftUnsupported(f"target {target}")
        case mt.Jump(target):
            return f"jump {layer_name(layer, target)}"
        case mt.Goto(target):
            return f"goto {layer_name(layer, target)}"
        case mt.SetMark(bits, keep):
            if bits == keep:
                return f"meta mark set mark or {bits:#x}"
            if bits == 0:
                return f"meta mark set mark & {~keep & 0xFFFFFFFF:#x}"
            return f"meta mark set mark & {~keep & 0xFFFFFFFF:#x} ^ {bits:#x}"
        case mt.Masquerade(to_ports, random_fully):
            ports = f" to :{to_ports}" if to_ports else ""
            return f"masquerade{ports}{' fully-random' if random_fully else ''}"
        case mt.Snat(to, random_fully):
            return f"snat to {to}{' fully-random' if random_fully else ''}"
        case mt.Dnat(to):
            return f"dnat to {to}"
        case mt.Log(prefix, level):
            return f'log prefix "{prefix}" level {_LOG_LEVELS[level]}'
        case _:
            assert_never(action)
