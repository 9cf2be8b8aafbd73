"""A real etcd server for tests: Debian's etcd-server on free 127.0.0.1 ports, in a temporary
data directory, stopped by PID. It can be stopped and started again on the same ports and data
(to test a datastore that goes away and comes back)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


#: Listening ports come from below the kernel's ephemeral range (32768-60999 by default):
#: a port the kernel handed out and took back could be handed to any outgoing connection
#: before etcd binds it (it happened in CI).
LISTEN_PORTS = range(20000, 32768)

#: A first start whose ports were taken after all tries fresh ones this many times.
PORT_TRIES = 5


def free_port() -> int:
    """A 127.0.0.1 TCP port nothing listens on now, outside the ephemeral range."""
    while True:
        port = random.choice(LISTEN_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class PortTaken(RuntimeError):
    """etcd could not bind a port that was free when chosen."""


class EtcdServer:
    """``tls`` is a directory with ca.pem, server.pem and server-key.pem: clients must then
    present a certificate signed by that CA."""

    def __init__(
        self, data_dir: str, tls: Path | None = None, netns: str = "", host: str = "127.0.0.1"
    ) -> None:
        self.data_dir = data_dir
        self.tls = tls
        #: Run inside this network namespace (its own 127.0.0.1), for an agent that runs there.
        self.netns = netns
        #: The address clients reach it on (inside ``netns``, another node's may do).
        self.host = host
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        #: More of etcd's flags, for the next start.
        self.flags: list[str] = []
        self._log = open(os.path.join(data_dir, "etcd.log"), "ab")  # noqa: SIM115 (kept open)
        #: Whether it has started once: its clients know its ports from then on.
        self._served = False

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    @property
    def etcd_url(self) -> str:
        scheme = "etcds" if self.tls else "etcd"
        return f"{scheme}://{self.host}:{self.client_port}"

    def _tls_flags(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            "--cert-file",
            str(self.tls / "server.pem"),
            "--key-file",
            str(self.tls / "server-key.pem"),
            "--trusted-ca-file",
            str(self.tls / "ca.pem"),
            "--client-cert-auth",
        ]

    def _healthy(self) -> bool:
        if self.netns:
            probe = f"import urllib.request as u; print(u.urlopen('{self.url}/health').read())"
            result = subprocess.run(
                ["ip", "netns", "exec", self.netns, sys.executable, "-c", probe],
                capture_output=True,
                text=True,
                check=False,
            )
            return "true" in result.stdout
        if self.tls is None:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    return b"true" in response.read()
            except OSError:
                return False
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.client_port)) == 0

    def start(self, timeout: float = 20.0) -> None:
        """A restart keeps its ports (clients hold the URL); a first start whose ports were
        taken meanwhile moves to fresh ones."""
        for tries_left in reversed(range(PORT_TRIES)):
            try:
                self._start(timeout)
            except PortTaken:
                if self._served or not tries_left:
                    raise
                self.client_port = free_port()
                self.peer_port = free_port()
            else:
                self._served = True
                return

    def _start(self, timeout: float) -> None:
        logged = os.path.getsize(self._log.name)
        peer = f"http://127.0.0.1:{self.peer_port}"
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        self.process = subprocess.Popen(
            [
                *inside,
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
                *self._tls_flags(),
                *self.flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                with open(self._log.name, "rb") as written:
                    written.seek(logged)
                    log = written.read().decode(errors="replace")[-2000:]
                if "address already in use" in log:
                    raise PortTaken(log)
                raise RuntimeError(f"etcd exited with {self.process.returncode}:\n{log}")
            if self._healthy():
                return
            time.sleep(0.1)
        raise RuntimeError("etcd did not become healthy")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is not None:
            self.process = None
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def client_tls_env(directory: Path) -> dict[str, str]:
    """calico-node's variables naming the CA and the client certificate and key that
    ``make_certificates`` wrote into ``directory``."""
    return {
        "ETCD_CA_CERT_FILE": str(directory / "ca.pem"),
        "ETCD_CERT_FILE": str(directory / "client.pem"),
        "ETCD_KEY_FILE": str(directory / "client-key.pem"),
    }


def make_certificates(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, with openssl."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req",
        "-x509",
        *key,
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=pft-test-ca",
    )
    for name, extension in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (directory / f"{name}.ext").write_text(extension + "\n")
        openssl(
            "req",
            *key,
            "-keyout",
            f"{name}-key.pem",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN=pft-{name}",
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
        )


@contextmanager
def running_etcd(tls: Path | None = None) -> Iterator[EtcdServer]:
    data = tempfile.mkdtemp(prefix="pft-etcd-")
    server = EtcdServer(data, tls)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        server._log.close()
        shutil.rmtree(data, ignore_errors=True)
