"""The WireGuard writer: Felix's encrypted node-to-node path.

When WireguardEnabled, the node has a WireGuard device (``wireguard.cali`` unless
WireguardInterfaceName says otherwise): the kernel's where the module exists, else wireguard-go
(userspace, over /dev/net/tun; its control socket lives under /var/run/wireguard). The device
keeps its private key across agent restarts (one is generated the first time); its public key
goes back to the datastore, where the other nodes read it. Each remote node with a public key
is a peer: its underlay address as endpoint, its IPAM blocks and WireGuard address as allowed
IPs. Those destinations are routed through the device in a routing table of their own, which
a rule (WireguardRoutingRulePriority) consults for every packet not carrying the device's own
firewall mark, so encrypted packets leave by the normal routes. With WireguardEnabledV6 a
second device (``wg-v6.cali``) does the same for IPv6, over the nodes' IPv6 addresses, with
its own port and table. Devices and peers are configured with the `wg` tool, which speaks to
both kinds of device. Blocking; run in a worker thread.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from pyfelix_dataplane.linux.commands import writing
from pyfelix_dataplane.linux.pyroute import iproute, netlink_error
from pyfelix_dataplane.linux.routes import direct_route, link_flags, set_sysctl, sync_only_address
from pyfelix_dataplane.linux.rtnl import (
    NLM_F_REQUEST,
    REPLACE,
    RTM_DELROUTE,
    RTM_NEWROUTE,
    RTN_THROW,
    RTN_UNICAST,
    RTPROT_STATIC,
    Rtnl,
    route_message,
)

if TYPE_CHECKING:
    from pyroute2 import IPRoute

log = logging.getLogger(__name__)

SOCKETS = Path("/var/run/wireguard")
#: What WireGuard adds to a packet over IPv4: outer IPv4 (20), UDP (8), WireGuard (32).
OVERHEAD = 60
#: The same over IPv6 (a 40-byte outer header).
OVERHEAD_V6 = 80
FIB_RULE_INVERT = 0x2
EOPNOTSUPP = 95


@attrs.frozen
class Peer:
    public_key: str
    endpoint: str
    allowed_ips: tuple[str, ...]
    node: str = ""


@attrs.frozen
class WireguardDevice:
    """The device as it must be; ``mtu`` 0 leaves the device's own; the driver gives it
    Felix's (linux/mtu.py)."""

    name: str
    port: int
    fwmark: int
    table: int
    rule_priority: int
    address: str = ""
    mtu: int = 0
    peers: tuple[Peer, ...] = ()
    #: WireguardPersistentKeepAlive in seconds, on every peer (0: off).
    keepalive: int = 0
    version: int = 4
    #: The destinations of nodes that are not peers (no key yet, WireGuard off, a key another
    #: node claims too): thrown back to the main table, as Felix's throw routes, so a wider
    #: route of a peer never catches them.
    throw: tuple[str, ...] = ()
    #: WireguardHostEncryptionEnabled: IPv4's reverse-path check must honour the packets'
    #: marks (src_valid_mark), as the raw table marks what arrives from outside the tunnel.
    src_valid_mark: bool = False


#: The device Felix names for each IP version unless configured otherwise.
DEFAULT_NAMES = {4: "wireguard.cali", 6: "wg-v6.cali"}


def _family(version: int) -> int:
    return socket.AF_INET6 if version == 6 else socket.AF_INET


def _wg(*args: str, stdin: str = "") -> str:
    result = subprocess.run(["wg", *args], input=stdin, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"wg {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


@attrs.frozen
class PeerStats:
    key: str
    #: ``host:port``, or Go's ``<nil>`` for a peer never heard from (as Felix labels it).
    endpoint: str
    #: The latest handshake, as a Unix time (0: none yet).
    handshake: int
    received: int
    sent: int


@attrs.frozen
class DeviceStats:
    name: str
    public_key: str
    listen_port: int
    peers: tuple[PeerStats, ...]


def device_stats() -> list[DeviceStats]:
    """Every WireGuard device on the host and its peers' counters (``wg show all dump``), as
    Felix's WireGuard metrics read them; none when ``wg`` is missing or fails."""
    try:
        return parse_dump(_wg("show", "all", "dump"))
    except OSError:
        return []


def parse_dump(dump: str) -> list[DeviceStats]:
    """``wg show all dump``'s lines: a device's (5 fields), each of its peers' (9)."""
    devices: dict[str, list[str]] = {}
    peers: dict[str, list[PeerStats]] = {}
    for line in dump.splitlines():
        fields = line.split("\t")
        if len(fields) == 5:  # interface, private key, public key, port, fwmark
            devices[fields[0]] = fields
        elif len(fields) == 9:  # interface, key, psk, endpoint, ips, handshake, rx, tx, keepalive
            endpoint = "<nil>" if fields[3] == "(none)" else fields[3]
            stats = PeerStats(fields[1], endpoint, int(fields[5]), int(fields[6]), int(fields[7]))
            peers.setdefault(fields[0], []).append(stats)
    return [
        DeviceStats(name, fields[2], int(fields[3]), tuple(peers.get(name, ())))
        for name, fields in sorted(devices.items())
    ]


def _create(ipr: IPRoute, name: str) -> None:
    """The kernel's device if it can, else wireguard-go's (left running on its own)."""
    try:
        ipr.link("add", ifname=name, kind="wireguard")
    except netlink_error() as exc:
        if exc.code != EOPNOTSUPP:
            raise
    else:
        log.info("created %s (kernel WireGuard)", name)
        return
    if shutil.which("wireguard-go") is None:
        raise OSError("no WireGuard: the kernel lacks it and wireguard-go is not installed")
    subprocess.Popen(
        ["wireguard-go", name],
        env={**os.environ, "WG_PROCESS_FOREGROUND": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 5
    while not (SOCKETS / f"{name}.sock").exists() or not ipr.link_lookup(ifname=name):
        if time.monotonic() > deadline:
            raise OSError(f"wireguard-go did not create {name}")
        time.sleep(0.01)
    log.info("created %s (wireguard-go, userspace)", name)


def _remove(ipr: IPRoute, name: str) -> None:
    found = ipr.link_lookup(ifname=name)
    if not found:
        return
    log.info("WireGuard disabled: removing %s", name)
    socket_path = SOCKETS / f"{name}.sock"
    if socket_path.exists():
        # A wireguard-go device goes with its process, which exits when its socket is removed.
        socket_path.unlink()
    else:
        ipr.link("del", index=found[0])


@writing("WireGuard device")
def sync_wireguard(device: WireguardDevice | None, previous: str = "", version: int = 4) -> str:
    """Make the kernel's device of IP ``version`` match ``device`` (None: no device); returns
    the device's public key ("" without a device). ``previous`` is the device name last
    configured."""
    if device is None and not _leftovers(previous or DEFAULT_NAMES[version], version):
        return ""
    with iproute() as ipr:
        if device is None or (previous and previous != device.name):
            _remove(ipr, previous or DEFAULT_NAMES[version])
        if device is None:
            _sync_rule(ipr, None, version)
            return ""
        if device.src_valid_mark:
            set_sysctl("net/ipv4/conf/all/src_valid_mark", "1")
        if not ipr.link_lookup(ifname=device.name):
            _create(ipr, device.name)
        if _wg("show", device.name, "private-key") in ("", "(none)"):
            _wg("set", device.name, "private-key", "/dev/stdin", stdin=_wg("genkey") + "\n")
        _wg("set", device.name, "listen-port", str(device.port), "fwmark", hex(device.fwmark))
        _sync_peers(device)
        index = ipr.link_lookup(ifname=device.name)[0]
        sized = {"mtu": device.mtu} if device.mtu else {}
        ipr.link("set", index=index, state="up", **sized)
        sync_only_address(ipr, index, device.address, version)
        _sync_routes(index, device)
        _sync_rule(ipr, device, version)
        return _wg("show", device.name, "public-key")


def _sync_peers(device: WireguardDevice) -> None:
    wanted = {peer.public_key: peer for peer in device.peers}
    lines = _wg("show", device.name, "peers").split()
    for key in set(lines) - wanted.keys():
        _wg("set", device.name, "peer", key, "remove")
    for peer in device.peers:
        args = ["peer", peer.public_key, "endpoint", peer.endpoint]
        args += ["allowed-ips", ",".join(peer.allowed_ips)]
        args += ["persistent-keepalive", str(device.keepalive) if device.keepalive else "off"]
        _wg("set", device.name, *args)


def _sync_routes(index: int, device: WireguardDevice) -> None:
    """The table: each peer's allowed IPs through the device, each thrown destination a throw
    route."""
    family = _family(device.version)
    wanted = {net: RTN_UNICAST for peer in device.peers for net in peer.allowed_ips}
    wanted.update({net: RTN_THROW for net in device.throw if net not in wanted})
    with Rtnl() as nl:
        present: dict[str, tuple[int, int]] = {}
        for route in nl.routes(family, device.table):
            if route.dst is not None:
                present[f"{route.dst}/{route.dst_len}"] = (route.type, route.scope)
        requests = [
            (
                RTM_DELROUTE,
                NLM_F_REQUEST,
                route_message(dst, table=device.table, proto=0, scope=scope, route_type=kind),
            )
            for dst, (kind, scope) in present.items()
            if wanted.get(dst) != kind
        ]
        missing = sorted(dst for dst, kind in wanted.items() if present.get(dst, (0, 0))[0] != kind)
        for dst in missing:
            if wanted[dst] == RTN_UNICAST:
                requests.append(direct_route(dst, index, device.table))
            else:
                throw = route_message(
                    dst, table=device.table, proto=RTPROT_STATIC, scope=0, route_type=RTN_THROW
                )
                requests.append((RTM_NEWROUTE, REPLACE, throw))
        for error in nl.request(requests):
            if error and error != errno.ESRCH:
                raise OSError(error, f"WireGuard routes: {os.strerror(error)}")


def _ours(table: int, mark: int | None, flags: int) -> bool:
    """Whether a routing rule has the shape of the device's ("not from all fwmark M/M lookup
    T", T not one of the kernel's own tables)."""
    return bool(flags & FIB_RULE_INVERT) and mark is not None and table not in (253, 254, 255)


def _leftovers(name: str, version: int) -> bool:
    """Whether WireGuard being off has anything to remove: the device, or a rule of its shape
    (asked over rtnetlink: most nodes have neither, and need no pyroute2 for it)."""
    if link_flags(name) is not None:
        return True
    with Rtnl() as netlink:
        rules = netlink.rules(_family(version))
    return any(_ours(table, mark, flags) for _, table, mark, flags in rules)


def _sync_rule(ipr: IPRoute, device: WireguardDevice | None, version: int) -> None:
    """One rule of the device's IP version: packets without the device's mark look up its
    table (as Felix's "not from all fwmark M/M lookup T")."""
    wanted = (device.rule_priority, device.table, device.fwmark) if device is not None else None
    family = _family(version)
    for rule in ipr.get_rules(family=family):
        table = rule.get_attr("FRA_TABLE") or rule["table"]
        mark = rule.get_attr("FRA_FWMARK")
        if not _ours(table, mark, rule["flags"]):
            continue
        current = (rule.get_attr("FRA_PRIORITY"), table, mark)
        if current == wanted:
            wanted = None
            continue
        priority, table, mark = current
        inverted = {"flags": FIB_RULE_INVERT, "fwmask": mark, "family": family}
        ipr.rule("del", priority=priority, table=table, fwmark=mark, **inverted)
    if wanted is not None:
        priority, table, mark = wanted
        inverted = {"flags": FIB_RULE_INVERT, "fwmask": mark, "family": family}
        ipr.rule("add", priority=priority, table=table, fwmark=mark, **inverted)


def peers_from(
    wireguard: Mapping[str, tuple[str, str]],
    blocks: Mapping[str, list[str]],
    node_addresses: Mapping[str, str],
    port: int,
    hostname: str,
) -> tuple[Peer, ...]:
    """Peers for every remote node with a public key and an address (as Felix: not a key two
    nodes claim): ``wireguard`` maps node -> (public key, WireGuard address), ``blocks`` node
    -> its destinations (all of one IP version, the addresses' own)."""
    claims = Counter(key for key, _ in wireguard.values() if key)
    peers = []
    for node, (public_key, address) in sorted(wireguard.items()):
        endpoint = node_addresses.get(node, "")
        if node == hostname or not public_key or not endpoint or claims[public_key] > 1:
            continue
        own = {f"{address}/{128 if ':' in address else 32}"} if address else set()
        allowed = sorted(set(blocks.get(node, [])) | own)
        where = f"[{endpoint}]" if ":" in endpoint else endpoint
        peers.append(Peer(public_key, f"{where}:{port}", tuple(allowed), node))
    return tuple(peers)
