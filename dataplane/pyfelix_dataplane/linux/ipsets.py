"""The ipset writer: reconcile the kernel's cali40/cali60 sets with the desired ones through
``ipset restore``.

Sets are created with maxelem MaxIpsetSize, as Felix creates them; a set whose type or maxelem
differs (made by an earlier version, or under another MaxIpsetSize) is rebuilt as a temporary
set and swapped in, so its name never disappears; otherwise only member deltas are written. Sets
no longer wanted are destroyed in a separate step, after iptables stopped referring to them.

A member the kernel refuses (one that validation let through) is isolated: it is logged with
its set, left out, and the rest of the script is written at once, so one bad value never holds
back the rest of the node. It stays left out while it is wanted.

A set wanted with more members than MaxIpsetSize cannot be programmed whole: it is programmed
with the first MaxIpsetSize members (in sorted order, so the choice is stable), named in an
error log for as long as it stays too large, and listed in ``oversized``; the kernel is never
asked to take more than a set holds (each refusal would cost a re-read of every set), and
every other set is programmed as usual. A temporary set left behind by a rebuild that failed
half way (any earlier run's) is destroyed before it is made again, and with the stale sets.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

import attrs

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.commands import run
from pyfelix_dataplane.rules.ipsets import DEFAULT_MAXELEM

log = logging.getLogger(__name__)

OURS = ("cali40", "cali60")
#: The temporary sets' prefixes: a rebuild's temporary set is ours to clean up too.
TEMPORARY = ("cali4t", "cali6t")
#: How many refused members one apply isolates before it gives up (and retries later): a
#: kernel that refuses everything is not a bad member.
MAX_REFUSED_PER_APPLY = 64
TEMP = {"cali40": "cali4t", "cali60": "cali6t"}


def _normal(member: str) -> str:
    """ipset prints host networks without their prefix length."""
    return member.removesuffix("/32").removesuffix("/128")


@attrs.frozen
class KernelSet:
    type: str
    maxelem: int
    members: frozenset[str]


def parse_save(text: str) -> dict[str, KernelSet]:
    sets: dict[str, tuple[str, int, set[str]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "create":
            maxelem = 65536
            if "maxelem" in parts:
                maxelem = int(parts[parts.index("maxelem") + 1])
            sets[parts[1]] = (parts[2], maxelem, set())
        elif len(parts) >= 3 and parts[0] == "add" and parts[1] in sets:
            sets[parts[1]][2].add(_normal(parts[2]))
    return {name: KernelSet(t, m, frozenset(s)) for name, (t, m, s) in sets.items()}


DesiredSets = Mapping[str, tuple[str, frozenset[str]]]


def _refused_member(line: str, desired: DesiredSets) -> tuple[str, str] | None:
    """(set, member) when the failing line adds a member of one of the desired sets."""
    parts = line.split()
    if len(parts) < 3 or parts[0] != "add":
        return None
    name = parts[1]
    for set_name, temp in TEMP.items():
        if name.startswith(temp):
            name = set_name + name[len(temp) :]
    if name not in desired:
        return None
    return name, _normal(parts[2])


class IpsetWriter:
    """Remembers what it wrote, so steady-state updates are pure deltas; ``refresh`` re-reads
    the kernel first (to repair drift)."""

    def __init__(self, maxelem: int = DEFAULT_MAXELEM) -> None:
        #: MaxIpsetSize: every set's maxelem.
        self.maxelem = maxelem
        self._known: dict[str, KernelSet] | None = None
        #: Members the kernel refused, by set name.
        self.refused: dict[str, set[str]] = {}
        #: Sets wanted with more members than maxelem: name -> how many were wanted.
        self.oversized: dict[str, int] = {}

    async def read(self) -> dict[str, KernelSet]:
        return parse_save(await run(["ipset", "save"]))

    async def apply_updates(
        self,
        desired: DesiredSets,
        refresh: bool = False,
        changed: Collection[str] | None = None,
    ) -> str:
        """Create, fill and fix sets so the kernel holds ``desired``; returns the script used.

        ``changed`` names the only sets that may differ from what this writer last wrote (None:
        any may). Raises DataplaneWriteError for a failure that is not one refused member."""
        self.refused = {
            name: refused & {_normal(m) for m in desired[name][1]}
            for name, refused in self.refused.items()
            if name in desired
        }
        for _ in range(MAX_REFUSED_PER_APPLY):
            try:
                return await self._apply_updates(desired, refresh, changed)
            except DataplaneWriteError as exc:
                refused = _refused_member(exc.line, desired)
                if refused is None:
                    raise
                name, member = refused
                log.error(
                    "the kernel refused member %r of IP set %s (%s); leaving it out",
                    member,
                    name,
                    exc,
                )
                self.refused.setdefault(name, set()).add(member)
                refresh = True
        return await self._apply_updates(desired, refresh, changed)

    async def _apply_updates(
        self, desired: DesiredSets, refresh: bool, changed: Collection[str] | None
    ) -> str:
        if refresh or self._known is None:
            self._known = await self.read()
            changed = None
        kernel = self._known
        names = sorted(desired) if changed is None else sorted(n for n in changed if n in desired)
        lines = []
        programmed: dict[str, frozenset[str]] = {}
        for name in names:
            set_type, members = desired[name]
            family = "inet6" if name.startswith("cali60") else "inet"
            maxelem = self.maxelem
            wanted = self._within_maxelem(name, {_normal(m) for m in members})
            programmed[name] = frozenset(wanted)
            current = kernel.get(name)
            if current is None:
                lines.append(f"create {name} {set_type} family {family} maxelem {maxelem}")
                lines.extend(f"add {name} {m}" for m in sorted(wanted))
            elif current.type != set_type:
                # A set id encodes its type, so this only meets leftovers of another version:
                # recreate it (iptables rules are rewritten after this step).
                lines.append(f"destroy {name}")
                lines.append(f"create {name} {set_type} family {family} maxelem {maxelem}")
                lines.extend(f"add {name} {m}" for m in sorted(wanted))
            elif current.maxelem != maxelem:
                temp = TEMP[name[:6]] + name[6:]
                temp = temp[:31]
                if temp in kernel:  # left behind by a rebuild that failed half way
                    lines.append(f"destroy {temp}")
                lines.append(f"create {temp} {set_type} family {family} maxelem {maxelem}")
                lines.extend(f"add {temp} {m}" for m in sorted(wanted))
                lines.append(f"swap {name} {temp}")
                lines.append(f"destroy {temp}")
            else:
                lines.extend(f"del {name} {m} -exist" for m in sorted(current.members - wanted))
                lines.extend(f"add {name} {m} -exist" for m in sorted(wanted - current.members))
        script = "\n".join(lines) + "\n" if lines else ""
        if script:
            try:
                await run(["ipset", "restore"], script)
            except BaseException:
                self._known = None
                raise
        for name in names:
            set_type, _ = desired[name]
            self._known[name] = KernelSet(set_type, self.maxelem, programmed[name])
            temp = (TEMP[name[:6]] + name[6:])[:31]
            self._known.pop(temp, None)
        return script

    def _within_maxelem(self, name: str, members: set[str]) -> set[str]:
        """``members`` less the refused ones, cut to maxelem (the first, sorted) when there
        are more: logged when a set becomes too large, and again when it fits once more."""
        wanted = members - self.refused.get(name, set())
        if len(wanted) <= self.maxelem:
            if self.oversized.pop(name, None) is not None:
                log.warning("IP set %s fits in MaxIpsetSize (%d) again", name, self.maxelem)
            return wanted
        if self.oversized.get(name) is None:
            log.error(
                "IP set %s has %d members, more than MaxIpsetSize (%d): only the first %d are"
                " programmed; raise MaxIpsetSize, or split what selects them",
                name,
                len(wanted),
                self.maxelem,
                self.maxelem,
            )
        self.oversized[name] = len(wanted)
        return set(sorted(wanted)[: self.maxelem])

    async def apply_deletions(self, desired: DesiredSets) -> list[str]:
        """Destroy our sets that are no longer wanted (call after iptables stopped using them)."""
        kernel = self._known if self._known is not None else await self.read()
        stale = sorted(n for n in kernel if n.startswith(OURS + TEMPORARY) and n not in desired)
        self.oversized = {n: size for n, size in self.oversized.items() if n in desired}
        if stale:
            try:
                await run(["ipset", "restore"], "".join(f"destroy {n}\n" for n in stale))
            finally:
                self._known = None
        return stale
