"""The validation filter: the pipeline stage between the decoupler and the calculation graph.

As in Felix, status passes straight through and every update whose value fails validation is
forwarded as a deletion (value None): downstream, an invalid resource is simply absent, and
nothing that did not depend on it changes. Each rejection logs one warning naming the resource
and its fields, and is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from pyfelix.resources import Resource
from pyfelix.syncer.api import SyncerCallbacks, SyncStatus, Update
from pyfelix.validation.kinds import ValidationContext, check_resource

log = logging.getLogger(__name__)


def origin_of(value: object) -> Resource | None:
    """The v3 resource a model value was converted from, if it records one."""
    origin = getattr(value, "origin", None)
    return origin if isinstance(origin, Resource) else None


@attrs.define(eq=False)
class ValidationFilter:
    """Between the syncer and the graph, as Felix's validation filter: an invalid resource's
    updates become deletions (it is treated as absent, once named in a warning), the rest
    pass on."""

    downstream: SyncerCallbacks
    context: ValidationContext = attrs.field(factory=ValidationContext)
    rejected: int = 0

    def on_status(self, status: SyncStatus) -> None:
        self.downstream.on_status(status)

    def on_updates(self, updates: Sequence[Update]) -> None:
        checked: dict[int, str] = {}
        out = []
        for update in updates:
            origin = origin_of(update.value)
            if origin is not None:
                verdict = checked.get(id(origin))
                if verdict is None:
                    problems = check_resource(origin, self.context).problems
                    verdict = "; ".join(
                        f"{p.field}: {p.message}" if p.field else p.message for p in problems
                    )
                    checked[id(origin)] = verdict
                    if verdict:
                        log.warning("invalid %s treated as absent: %s", origin.ident, verdict)
                if verdict:
                    self.rejected += 1
                    out.append(attrs.evolve(update, value=None))
                    continue
            out.append(update)
        self.downstream.on_updates(out)
