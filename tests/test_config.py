"""The typed configuration: generated from the parameter table, parsed from Felix's text."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyfelix import messages as m
from pyfelix.config import FIELDS, FelixConfig, ProtoPort, parse_config
from pyfelix.config.felix_config import ChainInsertMode, IptablesBackend
from pyfelix.config.params import DATASTORE_PARAMS, PARAMS
from pyfelix.config.support import ACTED_ON
from pyfelix.values import FrozenMap
from tests.conftest import REPO


def test_generated_module_matches_the_table() -> None:
    """Regenerate with ``python -m pyfelix.config.generate`` after changing the table."""
    check = [sys.executable, "-m", "pyfelix.config.generate", "--check"]
    assert subprocess.run(check, check=False).returncode == 0


def test_every_parameter_is_a_typed_field() -> None:
    named = {p.felix for p in (*PARAMS, *DATASTORE_PARAMS) if p.felix}
    assert {f.felix for f in FIELDS} == named
    assert len({f.attribute for f in FIELDS}) == len(FIELDS)


def test_defaults_are_felix_defaults() -> None:
    config = FelixConfig()
    assert config.vxlan_port == 4789
    assert config.wireguard_listening_port == 51820
    assert config.iptables_refresh_interval == 180.0
    assert config.iptables_lock_probe_interval == 0.05
    assert config.iptables_backend is IptablesBackend.AUTO
    assert config.chain_insert_mode is ChainInsertMode.INSERT
    assert config.failsafe_inbound_host_ports[0] == ProtoPort("tcp", 22)
    assert config.kube_node_port_ranges == ((30000, 32767),)
    assert config.ipv6_support is True
    assert config.vxlan_enabled is None


def test_text_as_felix_carries_it() -> None:
    config = parse_config(
        {
            "VXLANPort": "4790",
            "IptablesMarkMask": "0xff000000",
            "IptablesBackend": "nft",
            "ChainInsertMode": "APPEND",
            "Ipv6Support": "0",
            "ReportingIntervalSecs": "0",
            "IptablesLockProbeIntervalMillis": "500",
            "HealthTimeoutOverrides": "CalculationGraph=1m,InternalDataplaneMainLoop=5s",
            "FailsafeInboundHostPorts": "none",
            "FailsafeOutboundHostPorts": "udp:53,tcp:10.0.0.0/8:443",
            "InterfaceExclude": "kube-ipvs0,/^veth/",
            "RouteTableRanges": "1-250,300-400",
            "NATPortRange": "32768:65535",
            "ClusterGUID": "abc",
        }
    )
    assert config.vxlan_port == 4790
    assert config.iptables_mark_mask == 0xFF000000
    assert config.iptables_backend is IptablesBackend.NFT
    assert config.chain_insert_mode is ChainInsertMode.APPEND
    assert config.ipv6_support is False
    assert config.reporting_interval == 0.0
    assert config.iptables_lock_probe_interval == 0.5
    assert dict(config.health_timeout_overrides) == {
        "CalculationGraph": 60.0,
        "InternalDataplaneMainLoop": 5.0,
    }
    assert config.failsafe_inbound_host_ports == ()
    assert config.failsafe_outbound_host_ports == (
        ProtoPort("udp", 53),
        ProtoPort("tcp", 443, "10.0.0.0/8"),
    )
    assert config.interface_exclude == ("kube-ipvs0", "/^veth/")
    assert config.route_table_ranges == ((1, 250), (300, 400))
    assert config.nat_port_range == (32768, 65535)
    assert config.cluster_guid == "abc"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("VXLANPort", "x"),
        ("HealthPort", "70000"),
        ("IptablesBackend", "iptables"),
        ("Ipv6Support", "maybe"),
        ("MTUIfacePattern", "^(eth"),
        ("RouteTableRange", "1-300"),
        ("RouteTableRanges", "0-10"),
        ("RouteTableRanges", "1-70000"),
    ],
)
def test_a_bad_value_is_named_and_its_default_used(
    name: str, text: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once: the same configuration is parsed at start-up, by the graph and at changes."""
    import pyfelix.config  # noqa: PLC0415

    monkeypatch.setattr(pyfelix.config, "_WARNED", set())
    config = parse_config({name: text})
    assert parse_config({name: text}) == config == FelixConfig()
    assert caplog.text.count(f"Felix parameter {name}={text!r} ignored") == 1


def test_config_update_carries_the_typed_config() -> None:
    update = m.ConfigUpdate(FrozenMap({"VXLANVNI": "10"}))
    assert update.typed.vxlan_vni == 10


def _source_text() -> str:
    roots = [Path(__file__).parent.parent / "src", Path(__file__).parent.parent / "dataplane"]
    return "\n".join(
        path.read_text()
        for root in roots
        for path in root.rglob("*.py")
        if "config" not in path.relative_to(root).parts[:2]
    )


def test_docs_config_md_is_generated_from_the_code() -> None:
    """Regenerate with ``python -m pyfelix.config.support`` after changing support.py."""
    check = [sys.executable, "-m", "pyfelix.config.support", "--check"]
    assert subprocess.run(check, check=False).returncode == 0


def test_the_readmes_count_of_parameters_acted_on_is_the_codes() -> None:
    named = [p for p in PARAMS if p.felix]
    acted = sum(1 for p in named if p.felix in ACTED_ON)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert f"({acted} of {len(named)} are acted on today)" in " ".join(readme.split())


def test_what_the_code_reads_and_what_the_table_says_agree() -> None:
    """Every typed attribute the agent reads is listed as acted on, and every parameter
    listed as acted on is read somewhere (as an attribute, or by its Felix name where the
    calculation graph takes it as text)."""
    source = _source_text()
    by_attribute = {f.attribute: f.felix for f in FIELDS}
    read = {
        by_attribute[name]
        for name in re.findall(r"(?:config|typed)\.([a-z][a-z0-9_]+)\b", source)
        if name in by_attribute
    }
    assert read - set(ACTED_ON) == set(), "read by the code but not listed as acted on"
    for felix in ACTED_ON:
        attribute = next(f.attribute for f in FIELDS if f.felix == felix)
        assert re.search(rf"\.{attribute}\b|\"{felix}\"", source), f"{felix} is not read"


def test_the_dataplane_reads_only_the_typed_configuration() -> None:
    """Neither a Felix parameter's name in quotes nor ``str(...config.X)`` anywhere in the
    dataplane: every setting is read as FelixConfig's typed attribute, an enum compared as a
    member (a name, or an enum's text, escapes the type checker)."""
    names = {p.felix for p in (*PARAMS, *DATASTORE_PARAMS) if p.felix}
    quoted = re.compile(r"([\"'])([A-Za-z0-9]+)\1")
    as_text = re.compile(r"str\([\w.]*config\.")
    found = []
    for path in sorted((REPO / "dataplane").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            named = [m.group(2) for m in quoted.finditer(line) if m.group(2) in names]
            if named or as_text.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []
