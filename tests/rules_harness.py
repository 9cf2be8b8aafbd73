"""What the rule rendering tests share: marks, rule contexts, and clusters rendered with one
FelixConfiguration setting."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import attrs
import yaml

from pyfelix import model
from pyfelix.calc.rule_scanner import parse_rule
from pyfelix.dryrun import compute
from pyfelix.resources import FelixConfiguration
from pyfelix.resources.cluster import FelixConfigurationSpec
from pyfelix.resources.loader import load_paths, load_text
from pyfelix.values import FrozenMap
from pyfelix_dataplane.rules.marks import MarkBits
from pyfelix_dataplane.rules.model import Rule
from pyfelix_dataplane.rules.policy import (
    RuleContext,
    render_rule,
)
from tests.test_render_kernel import example_resources

REPO = Path(__file__).resolve().parent.parent


MARKS = MarkBits.from_mask()


V4 = RuleContext(4, MARKS)


V6 = RuleContext(6, MARKS)


ALLOW = ["-m mark --mark 0x10000/0x10000 --jump RETURN"]


def render_parsed(rule: model.Rule, ctx: RuleContext) -> list[Rule]:
    """A rule rendered as it reaches the dataplane: with the scanner's IP set ids."""
    return list(render_rule(parse_rule(rule), ctx))


def text(rules: list[Rule]) -> list[str]:
    return [r.body for r in rules]


def rendered_with(config: str, table: str) -> str:
    """One IPv4 table of node-a for examples/ with ``config`` added to its FelixConfiguration
    default."""
    resources = []
    for original in example_resources():
        resource = original
        if original.KIND == "FelixConfiguration" and original.name == "default":
            manifest = original.to_manifest()
            for line in config.splitlines():
                name, _, value = line.partition(": ")
                manifest["spec"][name] = yaml.safe_load(value)
            (item,) = load_text(yaml.safe_dump(manifest)).resources
            resource = item.resource
        resources.append(resource)
    view, _ = compute(resources, "node-a")
    return str(view["iptables"]["ipv4"][table])


def rendered_filter_with(config: str) -> str:
    return rendered_with(config, "filter")


def with_felix_config(resources: list[Any], **values: object) -> list[Any]:
    """``resources`` with ``values`` added to FelixConfiguration default's spec."""
    out = []
    for resource in resources:
        if isinstance(resource, FelixConfiguration) and resource.name == "default":
            spec = FelixConfigurationSpec(FrozenMap(dict(resource.spec.values, **values)))
            out.append(attrs.evolve(resource, spec=spec))
        else:
            out.append(resource)
    return out


def rendered_nat_with(config: str) -> list[str]:
    """The IPv4 nat table's rules for examples/ with ``config`` (as rendered_filter_with)."""
    return [line for line in rendered_with(config, "nat").split("\n") if "-A cali-" in line]


def chain_rules(rendered: str, chain: str) -> list[str]:
    """``chain``'s rules without their ids: ``-A chain [match] --jump target``."""
    return [
        line.split('" ', 1)[1] if '" ' in line else line
        for line in rendered.split("\n")
        if line.startswith(f"-A {chain} ")
    ]


def ipip_cluster(directory: Path) -> list[Any]:
    """examples/ with its pool on IPIP (Always) instead of VXLAN, and the nodes' IPIP
    addresses."""
    shutil.copytree(REPO / "examples" / "cluster", directory)
    cluster = directory / "00-cluster.yaml"
    cluster.write_text(
        cluster.read_text()
        .replace("vxlanEnabled: true", "vxlanEnabled: false")
        .replace("vxlanMode: Always\n  ipipMode: Never", "vxlanMode: Never\n  ipipMode: Always")
    )
    nodes = directory / "10-nodes.yaml"
    text = nodes.read_text()
    node_a, node_b = text.split("kind: Node", 2)[1:]
    text = (
        text.split("kind: Node", 1)[0]
        + "kind: Node"
        + node_a.replace(
            "    ipv4Address: 192.168.56.11/24",
            "    ipv4Address: 192.168.56.11/24\n    ipv4IPIPTunnelAddr: 10.65.0.1",
            1,
        )
        + "kind: Node"
        + node_b.replace(
            "    ipv4Address: 192.168.56.12/24",
            "    ipv4Address: 192.168.56.12/24\n    ipv4IPIPTunnelAddr: 10.65.1.1",
            1,
        )
    )
    nodes.write_text(text)
    result = load_paths([directory])
    assert result.ok, result.problems
    return [item.resource for item in result.resources]
