"""A byte forwarder between a TCP port on 127.0.0.1 and a Unix socket, either way round:
``forward.py tcp PORT unix PATH`` listens on the port and connects to the socket, ``forward.py
unix PATH tcp PORT`` the reverse. Network namespaces share the file system, so a pair of them
(one inside a node namespace, one outside) lets an agent in the namespace reach an API server
on the host's loopback without any route or link in the host's namespace. Prints "ready"."""

from __future__ import annotations

import sys

import trio


async def pump(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await sink.aclose()


async def main(listen: str, at: str, connect: str, to: str) -> None:

    async def opener() -> trio.abc.Stream:
        if connect == "unix":
            return await trio.open_unix_socket(to)
        return await trio.open_tcp_stream("127.0.0.1", int(to))

    async def handle(client: trio.abc.Stream) -> None:
        try:
            upstream = await opener()
        except OSError:
            await client.aclose()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump, client, upstream)
            nursery.start_soon(pump, upstream, client)

    if listen == "tcp":
        listeners = await trio.open_tcp_listeners(int(at), host="127.0.0.1")
    else:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(at)
        sock.listen(64)
        listeners = [trio.SocketListener(sock)]
    print("ready", flush=True)
    await trio.serve_listeners(handle, listeners)


if __name__ == "__main__":
    listen, at, connect, to = sys.argv[1:5]
    trio.run(main, listen, at, connect, to)
