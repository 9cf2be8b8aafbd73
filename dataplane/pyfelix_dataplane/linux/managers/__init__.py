"""The Linux dataplane's managers, one per concern, as Felix's int_dataplane splits them.

Each reads the desired state (pyfelix_dataplane.state.NodeState, shared with the dry-run),
works out what its part of the kernel should hold, and writes it through its writer
(pyfelix_dataplane.linux.kernel). Every manager has Felix's two verbs: ``on_update`` sees
each message as it arrives (and notes what it changes for the manager: its sets, its routes),
``complete_deferred_work`` brings the manager's part of the kernel to the state. Inputs from
another manager come from one named in the constructor (the routes from the tunnel managers,
the tunnels' MTUs from the MTU manager). The driver only orders them:

    endpoints           -> host endpoints placed on interfaces (rendering needs it)
    table mode          -> iptables: the IP sets, then each IP version's tables;
                           nftables: one transaction per version         (beside the routes)
    mtus.start          -> the host's MTU detected once      (the devices wait for it)
    vxlan, ipip, wireguard, routes                            (devices before routes)
    table mode finish   -> iptables: the sets no rule refers to any more destroyed
    endpoint status     -> workload and host endpoint status reported

The table mode (pyfelix_dataplane.linux.table_mode) is started and finished rather than
completed: it renders one IP version while the previous one is written.

``invalidate`` forgets what a manager wrote, so its next apply re-reads the kernel and
repairs it (the refresh of its ``area``). The tables (``tables``, ``nftables``) are large to
read back (0.1-0.3 s): their refresh is a ``check`` beside the applies instead, which
forgets only what it found changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from pyfelix import messages as m

#: Readings a check takes while writes of ours keep overlapping them, before it leaves the
#: reading to the next apply.
CHECK_ATTEMPTS = 3


class Refreshed(Protocol):
    """What a refresh can make forget what it wrote."""

    #: The refresh period it belongs to: "iptables", "nftables", "ipsets" or "routes".
    area: str

    def invalidate(self) -> None: ...


class Manager(Refreshed, Protocol):
    def on_update(self, msg: m.ToDataplane) -> None:
        """Note what ``msg`` changes for this manager (the state has it already)."""
        ...

    async def complete_deferred_work(self) -> None:
        """Write what changed since the last call, or everything after ``invalidate``."""
        ...


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
