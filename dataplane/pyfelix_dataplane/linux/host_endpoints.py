"""Which host endpoint governs which of the node's interfaces, as Felix resolves them.

A host endpoint names its interface, or (with no interfaceName) lists the addresses it expects:
then it governs every non-workload interface holding one of them. When several match one
interface, the one with the alphabetically first name wins. An all-interfaces ("*") endpoint
is not resolved here: the rendering makes it the default for interfaces nobody claims.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from pyfelix import messages as m
from pyfelix import model
from pyfelix_dataplane.linux.commands import writing
from pyfelix_dataplane.linux.pyroute import iproute
from pyfelix_dataplane.linux.routes import link_flags

Interfaces = Mapping[str, frozenset[str]]


def resolve(
    hosts: Mapping[Any, m.HostEndpointUpdate], interfaces: Interfaces
) -> dict[str, model.HostEndpointKey]:
    """Interface name -> the key of the host endpoint governing it."""
    resolved: dict[str, model.HostEndpointKey] = {}
    for interface, addresses in interfaces.items():
        best: model.HostEndpointKey | None = None
        for key, update in hosts.items():
            endpoint = update.endpoint
            if endpoint.name == "*":
                continue
            if endpoint.name:
                matches = endpoint.name == interface
            else:
                expected = endpoint.expected_ipv4_addrs + endpoint.expected_ipv6_addrs
                matches = not addresses.isdisjoint(expected)
            if matches and (best is None or key.endpoint < best.endpoint):
                best = key
        if best is not None:
            resolved[interface] = best
    return resolved


@writing("interface listing")
def interface_excludes(items: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """InterfaceExclude as Felix reads it: names (matched whole) or ``/regex/`` patterns
    (matched anywhere)."""
    patterns = []
    for item in items:
        if len(item) > 1 and item.startswith("/") and item.endswith("/"):
            patterns.append(re.compile(item[1:-1]))
        elif item:
            patterns.append(re.compile(f"^{re.escape(item)}$"))
    return tuple(patterns)


def without_excluded(
    found: Mapping[str, frozenset[str]], excludes: Sequence[re.Pattern[str]]
) -> dict[str, frozenset[str]]:
    """The interfaces Felix's interface monitor reports: none InterfaceExclude names (kube-ipvs0
    by default, which holds every service address and would otherwise take host endpoints
    matched by address)."""
    return {n: a for n, a in found.items() if not any(p.search(n) for p in excludes)}


def interface_addresses(
    named: tuple[str, ...], workload_prefixes: tuple[str, ...]
) -> dict[str, frozenset[str]]:
    """The node's non-workload interfaces that have an address, or that host endpoints name,
    with their addresses (blocking). Only addresses are dumped: parsing a dump of every link
    costs about 0.5 ms a link, and a node has a veth per pod."""
    found: dict[str, set[str]] = {name: set() for name in named if link_flags(name)}
    with iproute() as ipr:
        for entry in ipr.get_addr():
            address = entry.get_attr("IFA_ADDRESS")
            try:
                name = socket.if_indextoname(entry["index"])
            except OSError:
                continue
            if address and not name.startswith(workload_prefixes):
                found.setdefault(name, set()).add(address)
    return {name: frozenset(addresses) for name, addresses in found.items()}
