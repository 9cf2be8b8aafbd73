"""A real etcd server for tests: Debian's etcd-server on free 127.0.0.1 ports, in a temporary
data directory, stopped by PID. It can be stopped and started again on the same ports and data
(to test a datastore that goes away and comes back)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class EtcdServer:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def etcd_url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 20.0) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.process = subprocess.Popen(
            [
                ETCD,
                "--name",
                "pft",
                "--data-dir",
                self.data_dir,
                "--listen-client-urls",
                self.url,
                "--advertise-client-urls",
                self.url,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"pft={peer}",
                "--log-level",
                "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    if b"true" in response.read():
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not become healthy")

    def stop(self) -> None:
        if self.process is None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@contextmanager
def running_etcd() -> Iterator[EtcdServer]:
    data = tempfile.mkdtemp(prefix="pft-etcd-")
    server = EtcdServer(data)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
