"""Host endpoints resolved to the node's interfaces as Felix resolves them (a pure function)."""

from __future__ import annotations

from pyfelix import messages as m
from pyfelix import model
from pyfelix.values import FrozenMap
from pyfelix_dataplane.linux.host_endpoints import interface_excludes, resolve, without_excluded

Entry = tuple[model.HostEndpointKey, m.HostEndpointUpdate]


def hep(name: str, interface: str = "", *addresses: str) -> Entry:
    key = model.HostEndpointKey("node", name)
    endpoint = model.HostEndpoint(
        name=interface,
        expected_ipv4_addrs=tuple(a for a in addresses if ":" not in a),
        expected_ipv6_addrs=tuple(a for a in addresses if ":" in a),
        labels=FrozenMap({}),
        profile_ids=(),
    )
    return key, m.HostEndpointUpdate(key, endpoint, ())


INTERFACES = {
    "eth0": frozenset({"192.0.2.1", "2001:db8::1"}),
    "eth1": frozenset({"198.51.100.1"}),
    "eth2": frozenset(),
}


def test_by_name_and_by_address() -> None:
    hosts = dict([hep("uplink", "eth0"), hep("backend", "", "198.51.100.1"), hep("all", "*")])
    assert resolve(hosts, INTERFACES) == {
        "eth0": model.HostEndpointKey("node", "uplink"),
        "eth1": model.HostEndpointKey("node", "backend"),
    }


def test_first_name_wins_and_a_name_never_matches_by_address() -> None:
    hosts = dict(
        [
            hep("b-named", "eth0"),
            hep("a-by-address", "", "2001:db8::1"),
            hep("c-named-elsewhere", "eth2", "198.51.100.1"),
        ]
    )
    assert resolve(hosts, INTERFACES) == {
        "eth0": model.HostEndpointKey("node", "a-by-address"),
        "eth2": model.HostEndpointKey("node", "c-named-elsewhere"),
    }


def test_an_address_on_two_interfaces_governs_both() -> None:
    interfaces = {"eth0": frozenset({"10.0.0.1"}), "eth1": frozenset({"10.0.0.1"})}
    key, update = hep("shared", "", "10.0.0.1")
    assert resolve({key: update}, interfaces) == {"eth0": key, "eth1": key}


def test_excluded_interfaces_take_no_host_endpoint() -> None:
    """InterfaceExclude (kube-ipvs0 by default, names or /regex/): such an interface is never
    a host endpoint's, though it holds the address the endpoint expects (kube-ipvs0 holds every
    service address)."""
    found = dict(INTERFACES, **{"kube-ipvs0": frozenset({"198.51.100.1"}), "dummy7": frozenset()})
    hosts = dict([hep("backend", "", "198.51.100.1"), hep("seven", "dummy7")])
    assert resolve(hosts, found)["kube-ipvs0"] == model.HostEndpointKey("node", "backend")
    kept = without_excluded(found, interface_excludes(("kube-ipvs0", "/^dummy[0-9]$/")))
    assert resolve(hosts, kept) == {"eth1": model.HostEndpointKey("node", "backend")}
    assert interface_excludes(()) == ()
