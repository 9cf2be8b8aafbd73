"""The fast IPv4 path agrees with ipaddress on every input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyfelix.ipnet import canonical_network, parse_network

_OCTETS = st.one_of(st.integers(0, 300).map(str), st.sampled_from(["00", "01", "010", "", "-1"]))
_SUFFIX = st.sampled_from(["", "/32", "/31", "/24", "/0", "/33", "/032", "/", " ", "%eth0"])
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
