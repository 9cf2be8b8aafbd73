"""Reading nft's text listing of our table (what a restart and the refresh compare with the
desired table), on listings written out here; the real kernel's are in
test_render_nft.py and test_linux_nftables.py."""

from __future__ import annotations

from pyfelix_dataplane.linux.nftables import parse_listing
from pyfelix_dataplane.rules.nft import NftSet

LISTING = """table ip calico {
\tset cali40s-nets {
\t\ttype ipv4_addr
\t\tflags constant,interval
\t\telements = { 10.0.0.0/8, 192.0.2.1,
\t\t\t     198.51.100.7-198.51.100.9 }
\t}

\tset cali40n-ports {
\t\ttype ipv4_addr . inet_proto . inet_service
\t\telements = { 10.0.0.1 . tcp . 8080 }
\t}

\tset cali40s-empty {
\t\ttype ipv4_addr
\t\tflags interval
\t}

\tmap filter-cali-to-wl-dispatch {
\t\ttype ifname : verdict
\t\telements = { "cali0a" : goto filter-cali-tw-cali0a,
\t\t\t     "cali0b" : drop }
\t}

\tchain filter-FORWARD {
\t\ttype filter hook forward priority 0; policy accept;
\t\tcounter jump filter-cali-FORWARD comment "cali:6w4QSCw_3t5xqspz;"
\t\tcounter accept comment "cali:5DN03cBUL4J_GSUd; Policy explicitly accepted packet."
\t}

\tchain filter-cali-tw-cali0a {
\t\tip saddr { 10.1.0.1, 10.1.0.2 } counter drop
\t\tcounter drop comment "cali:Ab-_9; Drop if no profiles matched"
\t}

\tchain filter-cali-empty {
\t}
}
"""


def test_chains_sets_and_maps_as_the_writer_compares_them() -> None:
    """Rule ids from the comments ("" for a rule without one: another tool's, so the chain
    is rewritten), the hook as the rendering writes it, elements over several lines, map
    keys without nft's quotes."""
    table = parse_listing(LISTING)
    assert table.chains == {
        "filter-FORWARD": (
            ("6w4QSCw_3t5xqspz", "5DN03cBUL4J_GSUd"),
            "type filter hook forward priority 0; policy accept;",
        ),
        "filter-cali-tw-cali0a": (("", "Ab-_9"), ""),
        "filter-cali-empty": ((), ""),
    }
    assert table.sets == {
        "cali40s-nets": NftSet(
            "ipv4_addr",
            True,
            frozenset({"10.0.0.0/8", "192.0.2.1", "198.51.100.7-198.51.100.9"}),
        ),
        "cali40n-ports": NftSet(
            "ipv4_addr . inet_proto . inet_service", False, frozenset({"10.0.0.1 . tcp . 8080"})
        ),
        "cali40s-empty": NftSet("ipv4_addr", True, frozenset()),
    }
    assert table.maps == {
        "filter-cali-to-wl-dispatch": {"cali0a": "goto filter-cali-tw-cali0a", "cali0b": "drop"}
    }


def test_an_empty_listing_is_an_empty_table() -> None:
    table = parse_listing("table ip calico {\n}\n")
    assert (table.chains, table.sets, table.maps) == ({}, {}, {})


def test_a_listing_cut_short_is_read_as_far_as_it_goes() -> None:
    """The elements of a set whose listing ends early, and no chain it never reached: the
    writer then finds differences to write, and is not stopped by the reading."""
    cut = LISTING[: LISTING.index("198.51.100.7")]
    table = parse_listing(cut)
    assert table.sets["cali40s-nets"].elements == {"10.0.0.0/8", "192.0.2.1"}
    assert not table.chains
