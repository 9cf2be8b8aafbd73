"""Felix's configuration sources and their precedence, as the rules a node gets show them:
the environment over ``node.<name>`` over the selector-scoped FelixConfiguration that selects
the node (the oldest of several) over ``default``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyfelix.resources.config_sources import SelectorScoped, selector_config
from pyfelix.selector import parse_selector
from pyfelix.values import FrozenMap
from tests.conftest import REPO

NODE = """
apiVersion: projectcalico.org/v3
kind: Node
metadata: {name: node-1, labels: {zone: west}}
spec: {}
"""


def config(name: str, action: str, selector: str = "", created: str = "") -> str:
    metadata = f"name: {name}" + (f", creationTimestamp: '{created}'" if created else "")
    selected = f", nodeSelector: '{selector}'" if selector else ""
    return f"""---
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {{{metadata}}}
spec: {{defaultEndpointToHostAction: {action}{selected}}}
"""


def dry_run(
    tmp_path: Path, manifests: str, environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``pyfelix dry-run`` for node-1 of ``manifests`` (beside node-1's Node), with only
    ``environment``'s Felix variables."""
    (tmp_path / "cluster.yaml").write_text(NODE + manifests)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("FELIX_")}
    return subprocess.run(
        [sys.executable, "-m", "pyfelix", "dry-run", "--hostname", "node-1", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env, **environment},
        check=False,
    )


def to_host_action(tmp_path: Path, manifests: str, **environment: str) -> str:
    """The action ``pyfelix dry-run`` renders at the end of node-1's cali-wl-to-host."""
    done = dry_run(tmp_path, manifests, environment)
    assert done.returncode == 0, done.stderr
    (line,) = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("-A cali-wl-to-host") and "DefaultEndpointToHostAction" in line
    ][:1]
    return line.rsplit(" ", 1)[1]


def test_each_source_overrides_the_ones_below_it(tmp_path: Path) -> None:
    manifests = config("default", "Drop")
    assert to_host_action(tmp_path, manifests) == "DROP"
    manifests += config("west", "Accept", 'zone == "west"')
    assert to_host_action(tmp_path, manifests) == "ACCEPT"
    manifests += config("node.node-1", "Return")
    assert to_host_action(tmp_path, manifests) == "RETURN"
    environment = {"FELIX_DEFAULTENDPOINTTOHOSTACTION": "Accept"}
    assert to_host_action(tmp_path, manifests, **environment) == "ACCEPT"


def test_a_selector_that_does_not_select_the_node_is_not_applied(tmp_path: Path) -> None:
    manifests = config("default", "Return") + config("east", "Accept", 'zone == "east"')
    assert to_host_action(tmp_path, manifests) == "RETURN"


def test_of_several_matching_the_oldest_wins(tmp_path: Path) -> None:
    manifests = config("newer", "Accept", "has(zone)", "2026-03-01T00:00:00Z") + config(
        "older", "Return", "all()", "2025-01-01T00:00:00Z"
    )
    assert to_host_action(tmp_path, manifests) == "RETURN"


def test_the_winner_is_named_when_several_select_a_node(caplog: pytest.LogCaptureFixture) -> None:
    entries = [
        SelectorScoped("b", parse_selector("all()"), FrozenMap({"LogPrefix": "b"}), "2025"),
        SelectorScoped("a", parse_selector("all()"), FrozenMap({"LogPrefix": "a"}), "2025"),
        SelectorScoped("c", None, FrozenMap({"LogPrefix": "c"}), ""),
    ]
    with caplog.at_level(logging.WARNING):
        assert selector_config(entries, {"zone": "west"}) == {"LogPrefix": "a"}
    assert "a, b all select this node: a, the oldest, is used" in caplog.text
    assert selector_config(entries, None) == {}, "the node's labels are not known yet"


SPOOFER = """---
apiVersion: projectcalico.org/v3
kind: WorkloadEndpoint
metadata:
  name: node--1-k8s-pod-eth0
  namespace: default
  labels: {projectcalico.org/namespace: default, projectcalico.org/orchestrator: k8s}
spec:
  orchestrator: k8s
  node: node-1
  pod: pod
  endpoint: eth0
  interfaceName: cali0123456789a
  ipNetworks: [10.65.0.2/32]
  allowSpoofedSourcePrefixes: [192.0.2.0/24]
"""


def spoofing_allowed(tmp_path: Path, manifests: str, **environment: str) -> bool:
    """Whether ``pyfelix dry-run`` for node-1 takes the endpoint's spoofed prefixes (its
    raw cali-rpf-skip rule), rather than refusing the endpoint."""
    done = dry_run(tmp_path, SPOOFER + manifests, environment)
    if done.returncode != 0:
        assert "allowSpoofedSourcePrefixes" in done.stdout + done.stderr
        return False
    return "--source 192.0.2.0/24 --jump ACCEPT" in done.stdout


def test_workload_source_spoofing_is_read_from_every_source(tmp_path: Path) -> None:
    spoofing = "spec: {workloadSourceSpoofing: Any}"
    assert not spoofing_allowed(tmp_path, "")
    node_config = "---\napiVersion: projectcalico.org/v3\nkind: FelixConfiguration\n"
    node_config += f"metadata: {{name: node.node-1}}\n{spoofing}\n"
    assert spoofing_allowed(tmp_path, node_config)
    selected = node_config.replace("node.node-1", "west").replace(
        "Any}", "Any, nodeSelector: 'zone == \"west\"'}"
    )
    assert spoofing_allowed(tmp_path, selected)
    assert spoofing_allowed(tmp_path, "", FELIX_WORKLOADSOURCESPOOFING="Any")
