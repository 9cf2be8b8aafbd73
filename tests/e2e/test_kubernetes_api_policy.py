"""The Kubernetes network-policy e2e cases through a real kube-apiserver: namespaces, pods
(their status written as the kubelet writes it) and policies created and deleted through the
API, the agent on the node reading the Kubernetes API datastore, every reachability table
probed with real packets (tests/e2e/test_kubernetes_policy.py has the same cases from files)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.kube import KubeDatastore
from tests.e2e.test_kubernetes_policy import Model, netpol_cases
from tests.kube_server import kube_server

pytestmark = [pytest.mark.netns]


def test_kubernetes_network_policy_model_through_the_api_server(tmp_path: Path) -> None:
    with ExitStack() as stack:
        server = stack.enter_context(kube_server(tmp_path / "kube"))
        root = tmp_path / "node"
        root.mkdir()
        netpol_cases(Model(stack, root, api=KubeDatastore(server)))
