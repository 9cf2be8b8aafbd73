"""Rendered scripts load into a real kernel: ipset restore, then iptables-restore for every
table and both IP versions, with both the legacy and the nft backend, in fresh namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from pyfelix.dryrun import compute
from pyfelix.resources import Resource, load_paths, load_text
from tests.conftest import REPO
from tests.netns import run_in, temporary_netns

pytestmark = pytest.mark.netns

EVERY_FEATURE = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: every-feature}
spec:
  selector: all()
  types: [Ingress, Egress]
  ingress:
  - action: Allow
    protocol: TCP
    source:
      nets: [10.0.0.0/8, 192.168.0.0/16]
      notNets: [10.1.0.0/16]
      selector: app == "web"
      notSelector: app == "evil"
    destination:
      ports: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, "100:200", 300, http]
      notPorts: [22]
  - action: Deny
    protocol: ICMP
    icmp: {type: 8, code: 0}
    notICMP: {type: 3}
  - action: Allow
    ipVersion: 6
    protocol: ICMPv6
    icmp: {type: 128}
    source: {nets: ["fd00::/8"]}
  - action: Pass
    notProtocol: UDP
    source: {namespaceSelector: team == "a"}
  - action: Log
  - action: Allow
    protocol: UDP
    destination: {ports: [metrics, 53], selector: has(dns)}
  egress:
  - action: Allow
    protocol: TCP
    destination:
      services: {name: web, namespace: shop}
  - action: Deny
    destination:
      nets: ["0.0.0.0/0"]
      notNets: [10.0.0.0/8, 172.16.0.0/12]
"""


def scripts(resources: list[Resource], hostname: str = "node-a") -> dict[str, Any]:
    view, _ = compute(resources, hostname)
    return view


def load(view: dict[str, Any], backend: str) -> None:
    with temporary_netns("render") as ns:
        result = run_in(ns, "ipset", "restore", input_text=view["ipset_restore"])
        assert result.returncode == 0, result.stderr
        for family, tables in view["iptables"].items():
            command = f"ip{'6' if family == 'ipv6' else ''}tables-{backend}-restore"
            for table, text in tables.items():
                result = run_in(ns, command, input_text=text)
                assert result.returncode == 0, f"{family} {table}: {result.stderr}\n{text}"
        saved = run_in(ns, f"iptables-{backend}-save", "-t", "filter")
        assert "-A FORWARD" in saved.stdout
        assert "cali-FORWARD" in saved.stdout


def example_resources() -> list[Resource]:
    result = load_paths([REPO / "examples"])
    return [item.resource for item in result.resources]


@pytest.mark.parametrize("backend", ["legacy", "nft"])
@pytest.mark.parametrize("hostname", ["node-a", "node-b"])
def test_example_loads(backend: str, hostname: str) -> None:
    """The bundled example's scripts, for each node, load into the kernel."""
    view = scripts(example_resources(), hostname)
    if hostname == "node-a":
        # Packets from a host endpoint are ingress to the host: its inbound policy applies.
        filter_v4 = view["iptables"]["ipv4"]["filter"].splitlines()
        assert any(
            line.startswith("-A cali-fh-eth1") and "--jump cali-pi-gnp/host-ssh" in line
            for line in filter_v4
        )
        assert any(
            line.startswith("-A cali-from-host-endpoint") and "--goto cali-fh-eth1" in line
            for line in filter_v4
        )
    load(view, backend)


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_every_feature_loads(backend: str) -> None:
    """A policy using every rule feature renders into rules the kernel accepts."""
    resources = example_resources() + [item.resource for item in load_text(EVERY_FEATURE).resources]
    view = scripts(resources)
    filter_v4 = view["iptables"]["ipv4"]["filter"]
    assert "cali-pi-gnp/every-feature" in filter_v4
    assert "--icmp-type 8/0" in filter_v4
    assert "--icmpv6-type 128" in view["iptables"]["ipv6"]["filter"]
    load(view, backend)


def test_restore_failure_is_visible() -> None:
    """Sanity of the harness: a rule naming a missing ipset is refused by the kernel."""
    with temporary_netns("render") as ns:
        text = "*filter\n:cali-x - [0:0]\n-A cali-x -m set --match-set nosuch src -j DROP\nCOMMIT\n"
        result = run_in(ns, "iptables-legacy-restore", input_text=text)
        assert result.returncode != 0


HOST_POLICIES = """
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: untracked}
spec:
  selector: has(host-endpoint)
  doNotTrack: true
  applyOnForward: true
  ingress: [{action: Allow, protocol: UDP, destination: {ports: [53]}}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: pre-dnat}
spec:
  selector: has(host-endpoint)
  preDNAT: true
  applyOnForward: true
  ingress: [{action: Deny, source: {nets: [198.51.100.0/24]}}]
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: forward}
spec:
  selector: has(host-endpoint)
  applyOnForward: true
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [443]}}]
"""


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_host_endpoint_policies_load(backend: str) -> None:
    """Untracked policy lands in raw, pre-DNAT in mangle, apply-on-forward in the forward
    chains of filter, for the host endpoint's interface; all of it loads."""
    resources = example_resources() + [item.resource for item in load_text(HOST_POLICIES).resources]
    view = scripts(resources)
    raw = view["iptables"]["ipv4"]["raw"]
    mangle = view["iptables"]["ipv4"]["mangle"]
    filter_v4 = view["iptables"]["ipv4"]["filter"]
    assert "-A cali-fh-eth1" in raw
    assert "--jump NOTRACK" in raw
    assert "--jump cali-pi-gnp/untracked" in raw
    assert "-A cali-from-host-endpoint" in mangle
    assert "--jump cali-pi-gnp/pre-dnat" in mangle
    assert "-A cali-fhfw-eth1" in filter_v4
    assert "--jump cali-pi-gnp/forward" in filter_v4
    load(view, backend)
