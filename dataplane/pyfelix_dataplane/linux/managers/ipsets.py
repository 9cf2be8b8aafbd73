"""IP sets: Calico's sets and the special ones (pools, VXLAN hosts) for every IP version.

An apply after a few changes touches only the sets that changed (the state names them), so a
label change costs the same with ten sets of ten members as with ten thousand sets of a
million; a refresh, or an apply after a failure, compares every set with the kernel again.

A set programmed cut (over MaxIpsetSize) is named with the policies it weakens, those whose
rules then let through what they mean to stop; the agent's health and metrics show them.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

import attrs

from pyfelix import messages as m
from pyfelix.stats import DataplaneStats
from pyfelix_dataplane.linux.ipsets import DesiredSets
from pyfelix_dataplane.linux.kernel import IpsetWriting
from pyfelix_dataplane.rules.ipsets import SPECIAL_IDS, ipset_name
from pyfelix_dataplane.rules.render import kernel_ipsets, kernel_ipsets_of
from pyfelix_dataplane.state import NodeState

log = logging.getLogger(__name__)


def weakened_policies(
    state: NodeState, oversized: Collection[str], versions: Collection[int]
) -> dict[str, tuple[str, ...]]:
    """The policies each set of ``oversized`` (kernel names) weakens: a Deny rule that matches
    an address in the set (the members left out are not denied), or an Allow rule that
    matches one outside it (they are allowed). Named "Kind namespace/name", sorted."""
    by_name = {
        ipset_name(set_id, version): set_id for set_id in state.ipsets for version in versions
    }
    wanted = {by_name[name]: name for name in oversized if name in by_name}
    found: dict[str, set[str]] = {}
    for policy_id, update in state.policies.items():
        for parsed in (*update.inbound, *update.outbound):
            sets = parsed.ipsets
            if parsed.rule.action == "deny":
                hits = (*sets.src, *sets.dst, *sets.src_named_ports, *sets.dst_named_ports)
            elif parsed.rule.action == "allow":
                hits = (*sets.not_src, *sets.not_dst, *sets.not_dst_named_ports)
            else:
                continue
            for set_id in hits:
                if set_id in wanted:
                    found.setdefault(wanted[set_id], set()).add(f"{policy_id.kind} {policy_id}")
    return {name: tuple(sorted(policies)) for name, policies in sorted(found.items())}


@attrs.define(eq=False)
class IpsetsManager:
    state: NodeState
    writer: IpsetWriting
    versions: tuple[int, ...]
    #: Where the sets programmed cut (over MaxIpsetSize) are reported, for the metrics.
    stats: DataplaneStats | None = None
    area: str = "ipsets"
    _stale: bool = True
    _desired: dict[str, tuple[str, frozenset[str]]] = attrs.Factory(dict)
    #: The state's rules generation the special sets were last computed at (they follow
    #: pools, hosts and the encapsulation, which bump it).
    _generation: int = -1
    #: The kernel names of the sets changed since the last apply; None: any may have.
    _changed: set[str] | None = None
    #: The ids of the sets whose type or members messages changed since ``desired``.
    _changed_ids: set[str] = attrs.Factory(set)

    def invalidate(self) -> None:
        self._stale = True

    def on_update(self, msg: m.ToDataplane) -> None:
        if isinstance(msg, m.IPSetUpdate | m.IPSetDeltaUpdate | m.IPSetRemove):
            self._changed_ids.add(msg.id)

    def desired(self) -> DesiredSets:
        """Every set wanted now (the table mode renders the rules from the same state);
        ``complete_deferred_work`` then writes those that changed. The mapping is this
        manager's own, unchanged until the next call (one apply's write and clean-up)."""
        changed_ids, self._changed_ids = self._changed_ids, set()
        if self._stale or self._generation < 0:
            self._desired = kernel_ipsets(self.state, self.versions)
            self._generation = self.state.rules_generation
            self._changed = None
            return self._desired
        if self._generation != self.state.rules_generation:
            self._generation = self.state.rules_generation
            changed_ids |= SPECIAL_IDS
        changed = self._changed if self._changed is not None else set()
        for name, entry in kernel_ipsets_of(self.state, self.versions, changed_ids).items():
            changed.add(name)
            if entry is None:
                self._desired.pop(name, None)
            else:
                self._desired[name] = entry
        if self._changed is not None:
            self._changed = changed
        return self._desired

    async def complete_deferred_work(self) -> None:
        """Create, fill and resize the sets last ``desired`` (before the tables that refer
        to them)."""
        desired = self._desired
        refresh, changed = self._stale, self._changed
        # Until this write succeeds, the next apply compares every set again.
        self._stale, self._changed = True, None
        try:
            await self.writer.apply_updates(desired, refresh=refresh, changed=changed)
        finally:
            self._report(self.writer.oversized)
        self._stale, self._changed = False, set()

    def _report(self, oversized: Mapping[str, int]) -> None:
        """Record the sets programmed cut and the policies they weaken, logging a change."""
        if self.stats is None:
            return
        weakened = weakened_policies(self.state, oversized, self.versions) if oversized else {}
        for name, policies in weakened.items():
            if self.stats.weakened_policies.get(name) != policies:
                log.error(
                    "IP set %s is programmed cut to MaxIpsetSize: the members left out get"
                    " through what %s mean to stop",
                    name,
                    ", ".join(policies),
                )
        self.stats.oversized_ipsets = dict(oversized)
        self.stats.weakened_policies = weakened

    async def clean_up(self) -> None:
        """Destroy the sets no longer wanted (after the tables stopped referring to them)."""
        await self.writer.apply_deletions(self._desired)
