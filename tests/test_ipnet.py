"""The fast IPv4 path agrees with ipaddress on every input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyfelix.ipnet import IPV4_CIDR, canonical_network, canonical_networks, parse_network
from pyfelix.validation.common import Checker, check_cidr, check_net, check_nets

_OCTETS = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "010", "", "-1"]))
_SUFFIX = st.sampled_from(
    ["", "/32", "/31", "/24", "/0", "/00", "/8", "/08", "/33", "/032", "/", " ", "%eth0"]
)
_TEXT = st.builds(lambda o, s: ".".join(o) + s, st.lists(_OCTETS, min_size=3, max_size=5), _SUFFIX)


@given(st.one_of(_TEXT, st.ip_addresses().map(str), st.text(max_size=20)))
def test_canonical_network_is_ipaddress(text: str) -> None:
    try:
        expected: str | None = str(parse_network(text))
    except ValueError:
        expected = None
    try:
        got: str | None = canonical_network(text)
    except ValueError:
        got = None
    assert got == expected


@given(
    st.one_of(
        _TEXT,
        st.builds("{}/{}".format, st.ip_addresses(v=4), st.integers(0, 32)),
        st.text(max_size=20),
    )
)
def test_a_network_told_by_pattern_is_one_ipaddress_takes(text: str) -> None:
    """``check_net``'s pattern takes only what the parse takes, and the problems a network
    set's entry gets are ``check_cidr``'s, with the pattern or without it."""
    if IPV4_CIDR.fullmatch(text):
        parse_network(text)
    by_pattern, by_parse = Checker(), Checker()
    check_net(by_pattern, text)
    check_cidr(by_parse, text)
    assert by_pattern.problems == by_parse.problems


@given(st.lists(st.one_of(_TEXT, st.ip_addresses().map(str)), max_size=4))
def test_a_list_of_networks_gets_each_one_s_problems_at_its_index(texts: list[str]) -> None:
    by_pattern, by_parse = Checker(), Checker()
    check_nets(by_pattern.at("spec.nets"), texts)
    for index, text in enumerate(texts):
        check_cidr(by_parse.at("spec.nets").at(index), text)
    assert [(p.field, p.message) for p in by_pattern.problems] == [
        (p.field, p.message) for p in by_parse.problems
    ]


def test_the_pattern_takes_canonical_ipv4_networks() -> None:
    for text in ("10.0.0.1", "10.0.0.1/32", "192.168.7.0/24", "0.0.0.0/0", "10.1.2.3/8"):
        assert IPV4_CIDR.fullmatch(text), text
    for text in ("10.0.0.01", "10.0.0.1/08", "10.0.0.1/33", "10.0.0.256/8", "::1/128"):
        assert not IPV4_CIDR.fullmatch(text), text


_HOSTS = st.builds("{}/32".format, st.ip_addresses(v=4))


@given(st.lists(st.one_of(_HOSTS, _HOSTS, _TEXT, st.ip_addresses().map(str)), max_size=6))
def test_networks_are_each_ones_canonical_network(values: list[str]) -> None:
    """Many entries at once (all canonical /32s told by one match) are each one's own
    canonical network, those that do not parse left out."""
    expected = []
    for value in values:
        try:
            expected.append(canonical_network(value))
        except ValueError:
            continue
    assert canonical_networks(tuple(values)) == tuple(expected)
