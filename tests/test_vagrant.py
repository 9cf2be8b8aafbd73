"""The Vagrant cluster's files agree with the rest of the repository.

VMs cannot run here, so this checks what can drift without anyone noticing: the files' syntax,
the nodes' names and addresses against the example Node resources (the agents find their
VXLAN parent by that address), the pyfelix command lines in provision.sh against the CLI, and
the systemd unit's path against the virtualenv the script installs. The agents' part, pods on
two nodes talking over VXLAN with `pyfelix pods`, runs in tests/e2e/test_vxlan.py.
"""

from __future__ import annotations

import re
import shlex
import subprocess

from pyfelix.cli import build_parser
from pyfelix.resources import Node, load_paths
from tests.conftest import REPO

VAGRANT = REPO / "vagrant"


def test_syntax() -> None:
    ruby = subprocess.run(
        ["ruby", "-c", str(VAGRANT / "Vagrantfile")], capture_output=True, text=True, check=False
    )
    assert ruby.returncode == 0, ruby.stderr
    bash = subprocess.run(
        ["bash", "-n", str(VAGRANT / "provision.sh")], capture_output=True, text=True, check=False
    )
    assert bash.returncode == 0, bash.stderr


def test_nodes_match_the_examples() -> None:
    text = (VAGRANT / "Vagrantfile").read_text()
    vms = dict(re.findall(r'^\s+"([\w-]+)" => "([\d.]+)",$', text, re.MULTILINE))
    nodes = {
        item.resource.name: item.resource.spec.bgp.ipv4_address.split("/")[0]
        for item in load_paths([REPO / "examples"]).resources
        if isinstance(item.resource, Node) and item.resource.spec.bgp is not None
    }
    assert vms
    assert vms == nodes


def test_provision_commands_parse() -> None:
    script = (VAGRANT / "provision.sh").read_text()
    values = {"NODE": "node-a", "IP": "192.168.56.11", "ETCD_IP": "192.168.56.11"}
    values["SRC"] = "/opt/pyfelix-src"
    values["DATASTORE"] = f"etcd://{values['ETCD_IP']}:2379"
    lines = [line.strip() for line in script.splitlines() if line.strip().startswith('"$PYFELIX"')]
    assert {shlex.split(line)[1] for line in lines} == {"datastore", "pods"}
    for line in lines:
        command = line
        for name, value in values.items():
            command = command.replace(f"${name}", value)
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert callable(args.handler)


def test_unit_runs_the_installed_agent() -> None:
    script = (VAGRANT / "provision.sh").read_text()
    (venv,) = re.findall(r"VENV=(\S+) venv", script)
    unit = (REPO / "examples" / "systemd" / "pyfelix.service").read_text()
    assert f"ExecStart={venv}/bin/pyfelix run" in unit
    assert f"PYFELIX={venv}/bin/pyfelix" in script
