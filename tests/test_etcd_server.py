"""The test etcd server helper: a port taken between choosing it and etcd binding it (as
happened in CI) must not fail the test that wanted a server."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.etcd_server import EtcdServer


def test_a_first_start_whose_port_was_taken_moves_to_a_free_one(tmp_path: Path) -> None:
    server = EtcdServer(str(tmp_path))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.client_port))
        squatter.listen()
        try:
            server.start()
            assert server.client_port != squatter.getsockname()[1]
            assert server._healthy()
        finally:
            server.stop()
