"""A fake kernel for the Linux driver: each writer checks what it is given as the kernel would.

The tables fake parses the restore script the real planner produced (IptablesWriter.plan) and
commits a table only if every rule's jump target exists and every set it matches on exists
with the rule's IP family; ``ipset destroy`` of a set a rule still uses is refused. The
nftables fake commits a table only if every set, map and chain its rules and maps name is in
it, and, as the real writer, compares only the sets named changed while it knows the table.
So a driver that writes in the wrong order fails here as it would on a node, without root.
Failures can be injected per writer (``fail``), and the state tampered with, to test retry
and repair.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import attrs
import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.ipip import IpipDevice
from pyfelix_dataplane.linux.ipsets import DesiredSets
from pyfelix_dataplane.linux.iptables import (
    Desired,
    IptablesWriter,
    Script,
    TableState,
    parse_save,
)
from pyfelix_dataplane.linux.kernel import Kernel
from pyfelix_dataplane.linux.nftables import KernelTable
from pyfelix_dataplane.linux.reading import Reading
from pyfelix_dataplane.linux.routes import IFF_RUNNING, IFF_UP, RouteOwnership, RouteTarget
from pyfelix_dataplane.linux.vxlan import RemoteVtep, VtepDevice
from pyfelix_dataplane.linux.wireguard import WireguardDevice
from pyfelix_dataplane.rules.model import Chain
from pyfelix_dataplane.rules.nft import NftTable

_TARGET = re.compile(r"(?:--jump|--goto|-j|-g) (\S+)")
_MATCH_SET = re.compile(r"--match-set (\S+)")
KERNEL_CHAINS = {
    "raw": ("PREROUTING", "OUTPUT"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
}
BUILTIN_TARGETS = {"ACCEPT", "DROP", "RETURN", "REJECT", "LOG", "MARK", "MASQUERADE", "SNAT"}
BUILTIN_TARGETS |= {"DNAT", "NOTRACK", "CT"}
_NFT_REFERENCE = re.compile(r'@([^\s;{}",]+)')
_NFT_TARGET = re.compile(r'\b(?:jump|goto) ([^\s;{}",]+)')


def _refuse(tool: str, message: str, line: str = "") -> DataplaneWriteError:
    return DataplaneWriteError(tool, message, line)


@attrs.define
class FakeNode:
    """What the fake kernel holds, shared by its writers; ``log`` records every write in order."""

    sets: dict[str, tuple[str, set[str]]] = attrs.Factory(dict)
    tables: dict[int, dict[str, dict[str, list[str]]]] = attrs.Factory(dict)
    #: NFTablesMode: each IP version's ``calico`` table.
    nft: dict[int, NftTable] = attrs.Factory(dict)
    routes: dict[str, RouteTarget] = attrs.Factory(dict)
    vxlan: tuple[VtepDevice | None, tuple[RemoteVtep, ...]] = (None, ())
    vxlan_v6: tuple[VtepDevice | None, tuple[RemoteVtep, ...]] = (None, ())
    wireguard: WireguardDevice | None = None
    wireguard_v6: WireguardDevice | None = None
    ipip: IpipDevice | None = None
    #: (name, MTU, running) of its interfaces: what MTU detection sees.
    links: list[tuple[str, int, bool]] = attrs.Factory(lambda: [("eth0", 1500, True)])
    log: list[str] = attrs.Factory(list)
    #: Errors the next writes of a kind ("ipsets", "tables", "nftables", "routes") raise,
    #: first first.
    fail: dict[str, list[DataplaneWriteError]] = attrs.Factory(dict)
    #: Awaited in the middle of the next ipset write (what else happens meanwhile), once.
    during_ipsets: Callable[[], Awaitable[None]] | None = None
    #: Likewise, in the middle of the next plan of a table write (of the first IP version).
    during_plan: Callable[[], Awaitable[None]] | None = None
    #: How long reading the tables back takes (iptables-save of a large node: 0.1-0.3 s):
    #: for a plan (the tables it writes), and for a check (every table written).
    table_read_seconds: float = 0.0
    check_read_seconds: float = 0.0
    #: Plans made from tables read ahead (``TableWriting.read``) rather than at the plan.
    plans_read_ahead: int = 0
    #: Readings of the tables for a plan (``TableWriting.read``), ahead of it or not.
    table_reads: int = 0

    def failure(self, kind: str) -> None:
        pending = self.fail.get(kind)
        if pending:
            raise pending.pop(0)

    def sets_in_use(self) -> set[str]:
        used = set()
        for tables in self.tables.values():
            for chains in tables.values():
                for rules in chains.values():
                    for rule in rules:
                        used.update(_MATCH_SET.findall(rule))
        return used

    def table(self, version: int, name: str) -> dict[str, list[str]]:
        tables = self.tables.setdefault(version, {})
        if name not in tables:
            tables[name] = {chain: [] for chain in KERNEL_CHAINS[name]}
        return tables[name]


def _valid_member(set_type: str, family: str, member: str) -> bool:
    address = member.split(",", 1)[0]
    try:
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return False
    if network.version != (6 if family == "inet6" else 4):
        return False
    if set_type == "hash:ip,port":
        return bool(re.fullmatch(r"[^,]+,(tcp|udp|sctp):\d+", member))
    return set_type in ("hash:net", "hash:ip")


@attrs.define
class FakeIpsets:
    node: FakeNode
    #: No set of the fake has a size limit.
    oversized: dict[str, int] = attrs.Factory(dict)

    async def apply_updates(
        self,
        desired: DesiredSets,
        refresh: bool = False,
        changed: Collection[str] | None = None,
    ) -> str:
        """As the real writer: only the ``changed`` sets are written (all of them on a refresh),
        so a manager that forgets to name a changed set leaves it stale here too."""
        self.node.failure("ipsets")
        if self.node.during_ipsets is not None:
            during, self.node.during_ipsets = self.node.during_ipsets, None
            await during()
        names = desired if refresh or changed is None else [n for n in changed if n in desired]
        for name in sorted(names):
            set_type, members = desired[name]
            family = "inet6" if name.startswith("cali60") else "inet"
            for member in sorted(members):
                if not _valid_member(set_type, family, member):
                    raise _refuse("ipset restore", "Syntax error", f"add {name} {member}")
            if name not in self.node.sets:
                self.node.log.append(f"ipset create {name}")
            self.node.sets[name] = (set_type, set(members))
        return ""

    async def apply_deletions(self, desired: DesiredSets) -> list[str]:
        stale = sorted(n for n in self.node.sets if n.startswith(("cali4", "cali6")))
        stale = [n for n in stale if n not in desired]
        in_use = self.node.sets_in_use()
        for name in stale:
            if name in in_use:
                raise _refuse("ipset restore", "Set cannot be destroyed: it is in use", name)
            del self.node.sets[name]
            self.node.log.append(f"ipset destroy {name}")
        return stale


@attrs.define
class FakeTables:
    """One IP version's tables: planned by the real planner, committed by a checking parser."""

    node: FakeNode
    version: int

    def _save(self) -> str:
        lines = []
        for table, chains in self.node.tables.get(self.version, {}).items():
            lines.append(f"*{table}")
            for chain in chains:
                policy = "ACCEPT [0:0]" if chain in KERNEL_CHAINS[table] else "- [0:0]"
                lines.append(f":{chain} {policy}")
            for chain, rules in chains.items():
                for rule in rules:
                    short = rule.replace("--jump ", "-j ").replace("--goto ", "-g ")
                    lines.append(f"-A {chain} {short}".rstrip())
            lines.append("COMMIT")
        return "\n".join(lines) + "\n"

    async def _plans(self, desired: Mapping[str, Desired], reading: float) -> dict[str, Script]:
        """Each desired table's restore transaction against the tables as they are now,
        read for ``reading`` seconds."""
        text = self._save()
        await trio.sleep(reading)
        states = parse_save(text)
        planner = IptablesWriter(self.version, "nft")
        return {
            table: planner.plan(
                table, states.get(table) or parse_save(f"*{table}\nCOMMIT\n")[table], c, h, a
            )
            for table, (c, h, a) in desired.items()
        }

    async def read(self, tables: Collection[str]) -> dict[str, TableState]:
        self.node.table_reads += 1
        text = self._save()
        await trio.sleep(self.node.table_read_seconds)
        states = parse_save(text)
        return {t: states.get(t) or parse_save(f"*{t}\nCOMMIT\n")[t] for t in tables}

    async def prepare(
        self, desired: Mapping[str, Desired], states: Mapping[str, TableState] | None = None
    ) -> Script:
        if self.node.during_plan is not None:
            during, self.node.during_plan = self.node.during_plan, None
            await during()
        if states is None:
            plans = await self._plans(desired, self.node.table_read_seconds)
            return Script.join(plans.values())
        self.node.plans_read_ahead += 1
        planner = IptablesWriter(self.version, "nft")
        return Script.join(
            planner.plan(table, states[table], c, h, a) for table, (c, h, a) in desired.items()
        )

    async def differing(self, desired: Mapping[str, Desired]) -> set[str]:
        plans = await self._plans(desired, self.node.check_read_seconds)
        return {table for table, script in plans.items() if script}

    def rewrites(
        self, state: TableState, hooks: Sequence[tuple[str, str]], appends: Sequence[Chain]
    ) -> bool:
        return IptablesWriter(self.version, "nft").rewrites(state, hooks, appends)

    def after(
        self,
        table: str,
        state: TableState,
        chains: Sequence[Chain],
        hooks: Sequence[tuple[str, str]],
        appends: Sequence[Chain] = (),
    ) -> TableState:
        return IptablesWriter(self.version, "nft").after(table, state, chains, hooks, appends)

    async def write(self, script: Script) -> None:
        self.node.failure("tables")
        tool = f"ip{'6' if self.version == 6 else ''}tables-restore"
        working: dict[str, list[str]] = {}
        table = ""
        for line in script.text().splitlines():
            if line.startswith("*"):
                table = line[1:]
                working = {k: list(v) for k, v in self.node.table(self.version, table).items()}
            elif line == "-S":
                continue
            elif line.startswith(":"):
                name = line[1:].split()[0]
                working[name] = [] if name not in KERNEL_CHAINS[table] else working.get(name, [])
            elif line.startswith(("-A ", "-I ")):
                verb, chain, *rest = line.split(" ", 2)
                if chain not in working:
                    raise _refuse(tool, f"chain {chain} does not exist", line)
                body = rest[0] if rest else ""
                working[chain].insert(0 if verb == "-I" else len(working[chain]), body)
            elif line.startswith("-D "):
                _, chain, position = line.split()
                del working[chain][int(position) - 1]
            elif line.startswith("-X "):
                working.pop(line.split()[1], None)
            elif line == "COMMIT":
                self._check(tool, working)
                self.node.tables[self.version][table] = working
                self.node.log.append(f"IPv{self.version} {table} committed")

    def _check(self, tool: str, chains: dict[str, list[str]]) -> None:
        family = "cali6" if self.version == 6 else "cali4"
        for chain, rules in chains.items():
            for rule in rules:
                line = f"-A {chain} {rule}"
                for target in _TARGET.findall(rule):
                    if target not in BUILTIN_TARGETS and target not in chains:
                        raise _refuse(tool, f"target {target} does not exist", line)
                for name in _MATCH_SET.findall(rule):
                    if name not in self.node.sets or not name.startswith(family):
                        raise _refuse(tool, f"Set {name} doesn't exist", line)


@attrs.define
class FakeNftables:
    """One IP version's ``calico`` table, written in one transaction each time."""

    node: FakeNode
    version: int
    _known: bool = False
    #: What this writer believes the kernel holds, and the table last asked for.
    _current: NftTable | None = None
    _desired: NftTable | None = None
    _read: bool = False

    @property
    def written(self) -> bool:
        return self._known and self._desired is not None

    def invalidate(self) -> None:
        self._known = False

    def adopt(self, reading: Reading[KernelTable | None]) -> None:
        """The fake reads the node itself: a reading made before is not needed."""

    async def know(self) -> bool:
        if self._known:
            return self._read
        self._current = self.node.nft.get(self.version)
        self._known = self._read = True
        return True

    async def apply(self, desired: NftTable, changed_sets: Collection[str] | None = None) -> bool:
        if await self.know():
            changed_sets = None
        self._read = False
        current = self._current
        table = desired
        if changed_sets is not None and current is not None:
            # As the real writer: a set not named changed is taken to hold what it held.
            sets = {
                name: current.sets[name]
                if name in current.sets and name not in changed_sets
                else nft_set
                for name, nft_set in desired.sets.items()
            }
            table = attrs.evolve(desired, sets=sets)
        if table == current:
            self._desired = desired
            return False
        try:
            self.node.failure("nftables")
            self._check(table)
        except DataplaneWriteError:
            self._known = False
            raise
        self.node.nft[self.version] = table
        self.node.log.append(f"IPv{self.version} nftables committed")
        self._current, self._desired = table, desired
        return True

    async def check(self, attempts: int) -> bool:
        if not self.written or self.node.nft.get(self.version) == self._current:
            return False
        self._known = False
        return True

    def _check(self, table: NftTable) -> None:
        """Refuse the transaction, as nft does, when a rule or map names what is missing."""
        named = set(table.sets) | set(table.maps)
        for chain in table.chains.values():
            for rule in chain.rules:
                line = f"{chain.name}: {rule.text}"
                for name in _NFT_REFERENCE.findall(rule.text):
                    if name not in named:
                        raise _refuse("nft", f"No such file or directory: set {name}", line)
                for target in _NFT_TARGET.findall(rule.text):
                    if target not in table.chains:
                        raise _refuse("nft", f"No such file or directory: chain {target}", line)
        for name, entries in table.maps.items():
            for verdict in entries.values():
                for target in _NFT_TARGET.findall(verdict):
                    if target not in table.chains:
                        raise _refuse("nft", f"map {name}: no chain {target}", verdict)


@attrs.define
class FakeRoutes:
    node: FakeNode
    #: Interfaces that do not exist: routes through them are "waiting".
    missing: set[str] = attrs.Factory(set)

    async def apply(
        self, desired: Mapping[str, RouteTarget], ownership: RouteOwnership | None = None
    ) -> dict[str, str]:
        self.node.failure("routes")
        self.node.routes = dict(desired)
        self.node.log.append("routes")
        return {
            dst: "waiting" if target.interface in self.missing else "added"
            for dst, target in desired.items()
        }


@attrs.define
class FakeDevices:
    node: FakeNode

    async def vxlan(
        self, device: VtepDevice | None, remotes: Collection[RemoteVtep], version: int = 4
    ) -> str:
        if version == 6:
            self.node.vxlan_v6 = (device, tuple(remotes))
        else:
            self.node.vxlan = (device, tuple(remotes))
        return "absent" if device is None else "ready"

    async def ipip(self, device: IpipDevice | None) -> str:
        self.node.ipip = device
        return "absent" if device is None else "ready"

    async def wireguard(
        self, device: WireguardDevice | None, previous: str, version: int = 4
    ) -> str:
        if version == 6:
            self.node.wireguard_v6 = device
            return "" if device is None else "ZmFrZS12Ni1rZXktZmFrZS12Ni1rZXktZmFrZS12NiE="
        self.node.wireguard = device
        return "" if device is None else "ZmFrZS1rZXktZmFrZS1rZXktZmFrZS1rZXktZmFrZSE="


@attrs.define
class FakeInterfaces:
    addresses_by_name: dict[str, frozenset[str]] = attrs.Factory(dict)
    node: FakeNode = attrs.Factory(FakeNode)

    async def addresses(
        self, named: tuple[str, ...], workload_prefixes: tuple[str, ...]
    ) -> dict[str, frozenset[str]]:
        """As the real one: the named interfaces, and every other one's addresses but the
        workloads'."""
        return {
            name: addresses
            for name, addresses in self.addresses_by_name.items()
            if name in named or not name.startswith(workload_prefixes)
        }

    def flags(self, name: str) -> tuple[int, int] | None:
        if name not in self.addresses_by_name and all(link[0] != name for link in self.node.links):
            return None
        return (1, IFF_UP | IFF_RUNNING)

    async def links(self) -> list[tuple[str, int, bool]]:
        return list(self.node.links)


async def _no_events(on_change: Any) -> None:
    await trio.sleep_forever()


def fake_kernel(
    node: FakeNode, versions: tuple[int, ...] = (4, 6), *, nftables: bool = False
) -> Kernel:
    """The fake kernel in the iptables mode, or with ``nftables`` in the nftables mode."""
    return Kernel(
        ipsets=FakeIpsets(node),
        tables={} if nftables else {v: FakeTables(node, v) for v in versions},
        nftables={v: FakeNftables(node, v) for v in versions} if nftables else None,
        routes=FakeRoutes(node),
        devices=FakeDevices(node),
        interfaces=FakeInterfaces(node=node),
        watch=_no_events,
        description="a fake kernel",
    )
