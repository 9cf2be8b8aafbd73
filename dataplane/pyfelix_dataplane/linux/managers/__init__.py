"""The Linux dataplane's managers, one per concern, as Felix's int_dataplane splits them.

Each reads the desired state (pyfelix_dataplane.state.NodeState, shared with the dry-run),
works out what its part of the kernel should hold, and writes it through its writer
(pyfelix_dataplane.linux.kernel). The driver only orders them:

    endpoints.resolve  -> host endpoints placed on interfaces (rendering needs it)
    ipsets.apply       -> sets created and filled            (rules refer to them)
    tables.plan/write  -> each IP version's four tables      (beside the routes)
    mtus.start         -> the host's MTU detected once      (the devices wait for it)
    vxlan, ipip, wireguard, routes                            (devices before routes;
                                                               their MTUs pulled from mtus)
    ipsets.clean_up    -> sets no rule refers to any more
    endpoints.report   -> workload and host endpoint status

In the nftables mode ``nftables.render/write`` (each version's table, its sets included, in
one transaction) takes the place of ``ipsets`` and ``tables``.

``invalidate`` forgets what a manager wrote, so its next apply re-reads the kernel and
repairs it (the refresh of its ``area``). The tables (``tables``, ``nftables``) are large to
read back (0.1-0.3 s): their refresh is a ``check`` beside the applies instead, which
forgets only what it found changed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

#: Readings a check takes while writes of ours keep overlapping them, before it leaves the
#: reading to the next apply.
CHECK_ATTEMPTS = 3


class Manager(Protocol):
    #: The refresh period it belongs to: "iptables", "nftables", "ipsets" or "routes".
    area: str

    def invalidate(self) -> None: ...


@runtime_checkable
class Checking(Protocol):
    """A manager whose refresh reads the kernel beside the applies."""

    area: str

    @property
    def written(self) -> bool:
        """Whether anything is known written (a check has something to compare)."""
        ...

    def invalidate(self) -> None: ...

    async def check(self) -> bool:
        """Read back what was written; forget what differs (logged), for the next apply to
        repair; whether there is anything to repair."""
        ...
