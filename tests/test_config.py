"""The typed configuration: generated from the parameter table, parsed from Felix's text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyfelix import messages as m
from pyfelix.config import FIELDS, FelixConfig, ProtoPort, parse_config
from pyfelix.config.felix_config import ChainInsertMode, IptablesBackend
from pyfelix.config.params import DATASTORE_PARAMS, PARAMS
from pyfelix.values import FrozenMap


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
    assert config.interface_exclude == "kube-ipvs0,/^veth/"
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
    ],
)
def test_a_bad_value_is_named_and_its_default_used(
    name: str, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config({name: text})
    assert config == FelixConfig()
    assert f"Felix parameter {name}={text!r} ignored" in caplog.text


def test_config_update_carries_the_typed_config() -> None:
    update = m.ConfigUpdate(FrozenMap({"VXLANVNI": "10"}))
    assert update.typed.vxlan_vni == 10
