"""Health as Felix aggregates it, and a health server no client can take down."""

from __future__ import annotations

import os
import resource
import socket
import struct

import trio
import trio.testing

from pyfelix import messages as m
from pyfelix.calc.async_loop import CalcLoop
from pyfelix.calc.decoupler import Decoupler
from pyfelix.health import CALC_GRAPH, HealthAggregator, health_routes
from pyfelix.httpserver import MAX_CONNECTIONS, REQUEST_TIMEOUT, HttpServer, text
from pyfelix.syncer.api import SyncStatus
from tests.etcd_server import free_port


async def test_component_times_out_and_override_replaces_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    health = HealthAggregator()
    health.register("A", timeout=30)
    health.register("B", timeout=0, ready=False)
    health.report("A", live=True, ready=True)
    await trio.sleep(29)
    assert health.summary().live
    await trio.sleep(2)
    summary = health.summary()
    assert not summary.live
    assert not summary.ready
    assert "timed out" in summary.detail.splitlines()[1]
    health.overrides = {"A": 60}
    assert health.summary().live
    assert "60s (override)" in health.summary().detail


async def test_idle_calc_loop_stays_live(autojump_clock: trio.testing.MockClock) -> None:
    """No datastore change for ten minutes: the loop still reports, so liveness holds."""
    decoupler = Decoupler()
    send, receive = trio.open_memory_channel[m.Flush](1000)
    loop = CalcLoop("node-a", decoupler, send)
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        decoupler.on_status(SyncStatus.IN_SYNC)
        await trio.sleep(600)
        summary = loop.health.summary()
        assert summary.live, summary.detail
        assert summary.ready
        nursery.cancel_scope.cancel()
    del receive


async def test_stuck_calc_loop_turns_not_live(autojump_clock: trio.testing.MockClock) -> None:
    """A loop that cannot hand its output on (nobody receives) stops reporting: not live."""
    decoupler = Decoupler()
    send, receive = trio.open_memory_channel[m.Flush](0)
    loop = CalcLoop("node-a", decoupler, send)
    async with trio.open_nursery() as nursery:
        await nursery.start(loop.run)
        decoupler.on_status(SyncStatus.IN_SYNC)
        await trio.sleep(25)
        assert loop.health.summary().live
        await trio.sleep(10)
        summary = loop.health.summary()
        assert not summary.live
        assert CALC_GRAPH in summary.detail
        nursery.cancel_scope.cancel()
    del receive


async def _get(port: int, path: str) -> tuple[int, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def _server() -> HttpServer:
    health = HealthAggregator()
    health.register(CALC_GRAPH, timeout=30)
    health.report(CALC_GRAPH, live=True, ready=True)
    return HttpServer(health_routes(health))


async def test_reset_and_garbage_clients_do_not_stop_the_server() -> None:
    port = free_port()
    async with trio.open_nursery() as nursery:
        await nursery.start(_server().serve, "127.0.0.1", port)
        assert (await _get(port, "/liveness"))[0] == 200
        for payload in (b"GET /liv", b"\x00\xff garbage\r\n\r\n", b""):
            raw = socket.create_connection(("127.0.0.1", port))
            raw.sendall(payload)
            # Linger 0: close with a TCP reset instead of a FIN.
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raw.close()
        await trio.sleep(0.2)
        status, body = await _get(port, "/readiness")
        assert status == 200
        assert "CalculationGraph" in body
        assert (await _get(port, "/metrics"))[0] == 404, "metrics have their own port"
        assert (await _get(port, "/nothing"))[0] == 404
        nursery.cancel_scope.cancel()


async def test_port_in_use_is_retried_not_fatal() -> None:
    port = free_port()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", port))
    holder.listen()
    async with trio.open_nursery() as nursery:
        await nursery.start(_server().serve, "127.0.0.1", port)
        await trio.sleep(1.5)  # at least one failed attempt
        holder.close()
        with trio.fail_after(5):
            while True:
                try:
                    status, _ = await _get(port, "/liveness")
                    break
                except OSError:
                    await trio.sleep(0.2)
        assert status == 200
        nursery.cancel_scope.cancel()


async def test_a_flood_of_idle_connections_costs_the_agent_no_descriptors() -> None:
    """1,100 connections that send nothing (they exhausted the agent's descriptors, and
    /liveness could not be probed): the server holds at most MAX_CONNECTIONS of them, leaves
    the rest in the kernel's backlog, and answers a probe once the idle ones time out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    port = free_port()
    server = HttpServer({"/liveness": lambda: text(200, "ok\n")})
    clients: list[trio.SocketStream] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, "127.0.0.1", port)
            await trio.sleep(0.2)
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(1100):
                clients.append(await trio.open_tcp_stream("127.0.0.1", port))
            await trio.sleep(0.5)
            held = len(os.listdir("/proc/self/fd")) - before - len(clients)
            assert held <= MAX_CONNECTIONS
            with trio.fail_after(REQUEST_TIMEOUT * 3):
                probe = await trio.open_tcp_stream("127.0.0.1", port)
                await probe.send_all(b"GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = await probe.receive_some(1024)
                await probe.aclose()
            assert answer.startswith(b"HTTP/1.1 200")
            nursery.cancel_scope.cancel()
    finally:
        for client in clients:
            await client.aclose()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
