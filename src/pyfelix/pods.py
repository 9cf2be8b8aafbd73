"""Pods without an orchestrator: network namespaces wired as Calico's CNI plugin wires pods.

``pyfelix pods up`` gives each WorkloadEndpoint of this node a namespace: a veth pair named as
the endpoint says (the host end in the current namespace, ``eth0`` in the pod), the endpoint's
addresses and MAC, a default route through the link-local gateway 169.254.1.1 (answered by
proxy ARP on the host end, which the agent turns on) and, for IPv6, through the host end's
link-local address (the host end's MAC is ee:ee:ee:ee:ee:ee, as Calico's plugin sets it),
and a TCP responder on each of its ports (8080 when it declares none). ``pods check`` tries,
from every pod of this node, every endpoint of the cluster on each of those ports; ``pods
down`` removes it all. With two nodes
(the Vagrant cluster in vagrant/) that is how an operator sees the agents' overlay and policy
at work. ``pyfelix demo`` builds its node with the same wiring.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

import attrs

from pyfelix.resources import Resource, WorkloadEndpoint
from pyfelix_dataplane.linux.mtu import read_mtu_file

GATEWAY = "169.254.1.1"
#: The host end's MAC as Calico's CNI plugin sets it, and the IPv6 link-local address it gives.
HOST_END_MAC = "ee:ee:ee:ee:ee:ee"
GATEWAY_V6 = "fe80::ecee:eeff:feee:eeee"
DEFAULT_PORT = 8080
SERVER = """
import socket, sys, threading
def serve(port):
    try:  # IPv4 and IPv6 on one socket, where the pod has IPv6 at all
        s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address = "::"
    except OSError:
        s = socket.socket(); address = "0.0.0.0"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port)); s.listen(16)
    while True:
        c, _ = s.accept(); c.sendall(b"ok"); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""
CLIENT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print(c.recv(2).decode())
except OSError as e:
    print("blocked", e)
"""


def run_in(ns: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command in namespace ``ns`` (None: the current one); never raises."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)


def wire_pod(
    host: str | None,
    pod: str,
    interface: str,
    address: str,
    mac: str = "",
    *,
    mtu: int | None = None,
    more: Sequence[str] = (),
) -> None:
    """A veth pair from namespace ``host`` (None: the current one) into namespace ``pod``,
    configured as the CNI plugin configures a pod's (``mtu`` on both ends, when given) with
    ``address`` and the ``more`` addresses (IPv4 or IPv6)."""
    sized = ("mtu", str(mtu)) if mtu else ()
    here = ["netns", host] if host else []
    peer = ("peer", "name", "eth0", *sized, "netns", pod)
    subprocess.run(
        ["ip", "link", "add", interface, *here, *sized, "type", "veth", *peer],
        check=True,
        capture_output=True,
    )
    if mac:
        # The endpoint's MAC is what Felix pins in the node's ARP table.
        run_in(pod, "ip", "link", "set", "eth0", "address", mac)
    addresses = (address, *more)
    v4 = [a for a in addresses if ":" not in a]
    v6 = [a for a in addresses if ":" in a]
    commands: list[tuple[str, ...]] = [("addr", "add", f"{a}/32", "dev", "eth0") for a in v4]
    commands += [("-6", "addr", "add", f"{a}/128", "dev", "eth0", "nodad") for a in v6]
    commands.append(("link", "set", "eth0", "up"))
    if v4:
        commands += [
            ("route", "add", GATEWAY, "dev", "eth0", "scope", "link"),
            ("route", "add", "default", "via", GATEWAY, "dev", "eth0"),
        ]
    if v6:
        commands.append(("-6", "route", "add", "default", "via", GATEWAY_V6, "dev", "eth0"))
    for command in commands:
        run_in(pod, "ip", *command)
    # The host end answers for its link-local address at once (no duplicate detection).
    run_in(host, "sysctl", "-qw", f"net.ipv6.conf.{interface}.accept_dad=0")
    run_in(host, "ip", "link", "set", interface, "address", HOST_END_MAC)
    run_in(host, "ip", "link", "set", interface, "up")


def start_responder(pod: str, ports: Sequence[int], detach: bool = False) -> subprocess.Popen[str]:
    """A TCP server answering "ok" on each port inside ``pod``; returns once it listens.
    ``detach`` lets it outlive this process (its own session)."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", pod, sys.executable, "-c", SERVER, *map(str, ports)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=detach,
    )
    assert server.stdout is not None
    server.stdout.readline()
    return server


def connects(source_ns: str, address: str, port: int, timeout: float = 0.5) -> bool:
    result = run_in(source_ns, sys.executable, "-c", CLIENT, address, str(port), str(timeout))
    return result.stdout.strip() == "ok"


@attrs.frozen
class Pod:
    """A workload endpoint as a pod: where it runs and what it answers on."""

    name: str
    node: str
    interface: str
    address: str
    mac: str
    ports: tuple[int, ...]
    #: Its other addresses (a dual-stack pod's IPv6 one).
    more: tuple[str, ...] = ()

    def netns(self, prefix: str) -> str:
        return f"{prefix}{self.name.replace('/', '.')}"[:200]


def cluster_pods(resources: Sequence[Resource]) -> list[Pod]:
    """Every workload endpoint with an address, as a pod, in name order."""
    pods = []
    for wep in resources:
        if not isinstance(wep, WorkloadEndpoint) or not wep.spec.ip_networks:
            continue
        ports = tuple(sorted({p.port for p in wep.spec.ports})) or (DEFAULT_PORT,)
        pods.append(
            Pod(
                name=f"{wep.namespace}/{wep.spec.pod or wep.name}",
                node=wep.spec.node,
                interface=wep.spec.interface_name,
                address=wep.spec.ip_networks[0].split("/")[0],
                mac=wep.spec.mac,
                ports=ports,
                more=tuple(net.split("/")[0] for net in wep.spec.ip_networks[1:]),
            )
        )
    return sorted(pods, key=lambda p: p.name)


def _existing_namespaces() -> set[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in listing.stdout.splitlines() if line.strip()}


def pods_up(resources: Sequence[Resource], hostname: str, prefix: str, out: TextIO) -> int:
    """Create this node's pods (those already there are left as they are), with the MTU the
    agent wrote for the CNI plugin, as Calico's plugin takes it (the kernel's default if the
    agent has not written one)."""
    existing = _existing_namespaces()
    mtu = read_mtu_file()
    for pod in cluster_pods(resources):
        if pod.node != hostname:
            continue
        netns = pod.netns(prefix)
        if netns in existing:
            print(f"{pod.name}: {netns} exists", file=out)
            continue
        subprocess.run(["ip", "netns", "add", netns], check=True)
        run_in(netns, "ip", "link", "set", "lo", "up")
        wire_pod(None, netns, pod.interface, pod.address, pod.mac, mtu=mtu, more=pod.more)
        start_responder(netns, pod.ports, detach=True)
        ports = ",".join(map(str, pod.ports))
        sized = f", mtu {mtu}" if mtu else ""
        addresses = " ".join((pod.address, *pod.more))
        print(f"{pod.name}: {netns}, {pod.interface} -> {addresses}, tcp/{ports}{sized}", file=out)
    return 0


def stop_processes(netns: str) -> None:
    """SIGTERM every process in ``netns`` (a namespace outlives its deletion while they run)."""
    listing = subprocess.run(
        ["ip", "netns", "pids", netns], capture_output=True, text=True, check=False
    )
    for pid in listing.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGTERM)


def pods_down(resources: Sequence[Resource], hostname: str, prefix: str, out: TextIO) -> int:
    """Stop this node's responders and delete its pods' namespaces (and so their veths)."""
    existing = _existing_namespaces()
    for pod in cluster_pods(resources):
        netns = pod.netns(prefix)
        if pod.node != hostname or netns not in existing:
            continue
        stop_processes(netns)
        subprocess.run(["ip", "netns", "del", netns], check=False)
        print(f"{pod.name}: removed {netns}", file=out)
    return 0


def pods_check(resources: Sequence[Resource], hostname: str, prefix: str, out: TextIO) -> int:
    """From each pod of this node, every pod of the cluster on each of its ports (at each of
    its addresses: after the first, the address follows the pod's name); exit 1 if this node
    has no pods up."""
    pods = cluster_pods(resources)
    existing = _existing_namespaces()
    local = [p for p in pods if p.node == hostname and p.netns(prefix) in existing]
    if not local:
        print(f"no pods of {hostname} are up (pyfelix pods up)", file=out)
        return 1
    print(f"{'from':<24} {'to':<24} {'node':<10} {'port':<9} result", file=out)
    for source in local:
        for destination in pods:
            if destination is source:
                continue
            for address in (destination.address, *destination.more):
                to = destination.name
                to = to if address == destination.address else f"{to} {address}"
                for port in destination.ports:
                    seen = connects(source.netns(prefix), address, port)
                    result = "allowed" if seen else "denied"
                    print(
                        f"{source.name:<24} {to:<24} {destination.node:<10} tcp/{port:<5} {result}",
                        file=out,
                    )
    return 0
