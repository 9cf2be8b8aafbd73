"""The Linux driver running against the fake kernel (tests/fake_kernel.py), in either table
mode, fed by a real calculation graph: the builders the driver's test modules share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from pyfelix import messages as m
from pyfelix.calc.pipeline import build_pipeline
from pyfelix.resources import Resource
from pyfelix.validation import ValidationContext
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.driver import LinuxDriver
from pyfelix_dataplane.linux.kernel import Kernel
from tests.calc_harness import Identity
from tests.fake_kernel import FakeNode, fake_kernel


@attrs.define
class Datastore:
    """The calculation graph's messages for a datastore and its later changes."""

    out: list[Any] = attrs.Factory(list)
    pipeline: Any = None

    def __attrs_post_init__(self) -> None:
        self.pipeline = build_pipeline("node-a", self.out.append, ValidationContext("Any"))

    def snapshot(self, state: dict[Identity, Resource]) -> list[Any]:
        self.pipeline.load(state.values())
        return [*self._taken(), m.InSync()]

    def put(self, resources: list[Resource]) -> list[Any]:
        for resource in resources:
            key = (resource.KIND, resource.namespace, resource.name)
            self.pipeline.on_updates(self.pipeline.converter.update(key, resource))
        self.pipeline.flush()
        return self._taken()

    def delete(self, keys: list[Identity]) -> list[Any]:
        self.pipeline.on_updates(
            [u for key in keys for u in self.pipeline.converter.update(key, None)]
        )
        self.pipeline.flush()
        return self._taken()

    def _taken(self) -> list[Any]:
        taken, self.out[:] = list(self.out), []
        return taken


def messages_for(state: dict[Identity, Resource]) -> list[Any]:
    return Datastore().snapshot(state)


@attrs.define
class Running:
    driver: LinuxDriver
    node: FakeNode
    to_calc: trio.MemoryReceiveChannel[Any]
    nftables: bool = False

    async def send(self, messages: list[Any]) -> None:
        for message in messages:
            await self.driver.apply(message)

    async def settle(self, seconds: float = 1.0) -> None:
        await trio.sleep(seconds)

    def chains(self, version: int) -> set[str]:
        """The names of the chains the kernel holds for ``version``, in either mode (the
        nftables mode's without the iptables table their name begins with)."""
        if self.nftables:
            table = self.node.nft.get(version)
            names = table.chains if table is not None else {}
            return {name.partition("-")[2] for name in names}
        return {name for chains in self.node.tables.get(version, {}).values() for name in chains}


@asynccontextmanager
async def running(
    node: FakeNode | None = None, state_dir: Path | None = None, *, nftables: bool = False
) -> AsyncIterator[Running]:
    """The driver started, over a fake kernel in the iptables mode or the nftables one."""
    node = node or FakeNode()
    send, receive = trio.open_memory_channel[Any](1000)

    async def open_kernel(config: Any, probe: Any) -> Kernel:
        return fake_kernel(node, nftables=nftables)

    driver = LinuxDriver(send, "node-a", open_kernel=open_kernel)
    if state_dir is not None:
        driver.state_dir = state_dir
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        yield Running(driver, node, receive, nftables)
        nursery.cancel_scope.cancel()


def received(channel: trio.MemoryReceiveChannel[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(channel.receive_nowait())
        except trio.WouldBlock:
            return out


def with_config(messages: list[Any], **settings: str) -> list[Any]:
    """``messages`` with ``settings`` added to their configuration (the first message)."""
    config = m.ConfigUpdate(FrozenMap({**messages[0].config, **settings}))
    return [config, *messages[1:]]
