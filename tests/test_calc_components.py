"""Unit tests of individual calculators, fed by hand (no Trio, no datastore)."""

from __future__ import annotations

from pyfelix import model
from pyfelix.calc.config_batcher import environment_config
from pyfelix.calc.ipsets import IPSetMemberIndex, split_default_route
from pyfelix.calc.rule_scanner import IPSetData, RuleScanner, rule_ipsets
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.calc.service_index import ServiceIndex
from pyfelix.resources import EndpointSlice
from pyfelix.selector import make_unique_id, parse_selector
from pyfelix.values import FrozenMap, Port


def members_recorder() -> tuple[dict[str, set[str]], IPSetMemberIndex]:
    """The members each set has, as the index sends them (at its flush)."""
    members: dict[str, set[str]] = {}
    index = IPSetMemberIndex(
        lambda s, m: members.setdefault(s, set()).add(m),
        lambda s, m: members[s].remove(m),
    )
    return members, index


def test_default_route_split_into_halves() -> None:
    """ipsets cannot hold /0, so a network set's 0.0.0.0/0 becomes two /1s (and ::/0 too)."""
    assert split_default_route("0.0.0.0/0") == ("0.0.0.0/1", "128.0.0.0/1")
    assert split_default_route("::/0") == ("::/1", "8000::/1")
    members, index = members_recorder()
    data = IPSetData(selector='role == "any"')
    index.on_ipset_active(data)
    everything = model.NetworkSet(("0.0.0.0/0",), FrozenMap({"role": "any"}))
    index.on_item_update(model.NetworkSetKey("all"), everything)
    index.flush()
    assert members[data.id] == {"0.0.0.0/1", "128.0.0.0/1"}


def test_members_are_reference_counted_and_inherit_profile_labels() -> None:
    """Two items with one address give one member until both go; profile labels count."""
    members, index = members_recorder()
    data = IPSetData(selector='team == "a"')
    index.on_ipset_active(data)
    index.on_parent_labels("kns.a", {"team": "a"})
    for name in ("x", "y"):
        endpoint = model.WorkloadEndpoint(
            "active", "cali" + name, "", ("kns.a",), ("10.0.0.1/32",), (), FrozenMap()
        )
        index.on_item_update(name, endpoint)
    index.flush()
    assert members[data.id] == {"10.0.0.1/32"}
    index.on_item_update("x", None)
    index.flush()
    assert members[data.id] == {"10.0.0.1/32"}
    index.on_item_update("y", None)
    index.flush()
    assert members[data.id] == set()


def test_an_endpoint_listing_an_address_twice_gives_it_once() -> None:
    """An endpoint's addresses count once each, however it lists them, and whichever comes
    first, the endpoint or its set: taken back whole when it goes."""
    for set_first in (False, True):
        members, index = members_recorder()
        data = IPSetData(selector='team == "a"')
        endpoint = model.WorkloadEndpoint(
            "active",
            "calix",
            "",
            (),
            ("10.0.0.1/32", "10.0.0.1/32", "10.0.0.2/32"),
            ("fd00::1/128",),
            FrozenMap({"team": "a"}),
        )
        if set_first:
            index.on_ipset_active(data)
            index.flush()
        index.on_item_update("x", endpoint)
        index.on_ipset_active(data)
        index.flush()
        assert members[data.id] == {"10.0.0.1/32", "10.0.0.2/32", "fd00::1/128"}
        index.on_item_update("x", None)
        index.flush()
        assert members[data.id] == set()


def test_named_port_members() -> None:
    """A named-port set holds ip,proto:port for endpoints offering that port."""
    members, index = members_recorder()
    data = IPSetData(selector="all()", named_port="http", protocol="tcp")
    index.on_ipset_active(data)
    endpoint = model.WorkloadEndpoint(
        "active",
        "cali1",
        "",
        (),
        ("10.0.0.1/32",),
        (),
        FrozenMap(),
        ports=(model.EndpointPort("http", "tcp", 8080), model.EndpointPort("dns", "udp", 53)),
    )
    index.on_item_update("e", endpoint)
    index.flush()
    assert members[data.id] == {"10.0.0.1,tcp:8080"}
    assert data.id == make_unique_id("n", f"{parse_selector('all()').unique_id},tcp,http")
    assert data.type == "hash:ip,port"


def test_rule_scanner_counts_references() -> None:
    """A set is active while any rule needs it, announced once, withdrawn once."""
    events: list[tuple[str, str]] = []
    scanner = RuleScanner(
        lambda d: events.append(("on", d.id)),
        lambda d: events.append(("off", d.id)),
        EventSequencer(lambda _: None),
    )
    rule = model.Rule(action="allow", src_selector='a == "b"')
    scanner.on_rules_update("p1", [rule])
    scanner.on_rules_update("p2", [rule])
    scanner.on_rules_remove("p1")
    assert events == [("on", parse_selector('a == "b"').unique_id)]
    scanner.on_rules_remove("p2")
    assert events[-1] == ("off", parse_selector('a == "b"').unique_id)


def test_rule_ipsets_split_named_and_numeric_ports() -> None:
    """Named ports get named-port sets; numeric ports keep the plain selector set."""
    rule = model.Rule(
        action="allow",
        protocol="tcp",
        dst_selector="has(x)",
        dst_ports=(Port(80, 80), Port(name="http")),
        not_src_selector="has(bad)",
    )
    kinds = sorted((d.selector, d.named_port) for d in rule_ipsets(rule))
    assert kinds == [("has(bad)", ""), ("has(x)", ""), ("has(x)", "http")]
    # With a selector on the same side, the negation folds into it (Felix's
    # combineMatchesIfPossible), for the named-port set and the plain one alike.
    folded = model.Rule(
        action="allow",
        protocol="tcp",
        dst_selector="has(x)",
        not_dst_selector="has(bad)",
        dst_ports=(Port(80, 80), Port(name="http")),
    )
    assert sorted((d.selector, d.named_port) for d in rule_ipsets(folded)) == [
        ("(has(x)) && (!(has(bad)))", ""),
        ("(has(x)) && (!(has(bad)))", "http"),
    ]
    no_protocol = model.Rule(action="allow", dst_ports=(Port(name="web"),))
    assert {d.protocol for d in rule_ipsets(no_protocol)} == {"tcp", "udp"}


def test_service_index_follows_endpoint_slices() -> None:
    """Service sets fill from EndpointSlices, and follow them as they change or go."""
    members: dict[str, set[str]] = {}
    index = ServiceIndex(
        lambda s, m: members.setdefault(s, set()).add(m), lambda s, m: members[s].remove(m)
    )
    with_ports = IPSetData(service="shop/web", include_ports=True)
    without = IPSetData(service="shop/web")
    index.on_ipset_active(with_ports)
    index.on_ipset_active(without)

    def slice_(addresses: list[str]) -> EndpointSlice:
        return EndpointSlice.from_manifest(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "web-1",
                    "namespace": "shop",
                    "labels": {"kubernetes.io/service-name": "web"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": addresses}],
                "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
            }
        )

    index.on_endpoint_slice("shop", "web-1", slice_(["10.0.0.1"]))
    assert members[with_ports.id] == {"10.0.0.1,tcp:80", "10.0.0.1,udp:53"}
    assert members[without.id] == {"10.0.0.1"}
    index.on_endpoint_slice("shop", "web-1", slice_(["10.0.0.2"]))
    assert members[without.id] == {"10.0.0.2"}
    index.on_endpoint_slice("shop", "web-1", None)
    assert members[without.id] == set()
    assert with_ports.id.startswith("svc:")
    assert without.id.startswith("svcnoport:")


def test_environment_overrides_configuration() -> None:
    """FELIX_<NAME> (any case) overrides datastore configuration, by Felix's parameter name."""
    env = {"FELIX_LOGSEVERITYSCREEN": "Debug", "felix_healthenabled": "true", "FELIX_BOGUS": "1"}
    assert environment_config(env) == {"LogSeverityScreen": "Debug", "HealthEnabled": "true"}
