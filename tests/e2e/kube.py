"""The e2e cases through a real kube-apiserver: objects written as a user would with kubectl,
and an agent inside a node namespace that reaches the API server over a forwarder pair.

The API server runs on the host's loopback (tests/kube_server.py); the agent runs in the node
namespace, whose 127.0.0.1 is its own. Two forwarders join them through a Unix socket
(network namespaces share the file system): no link, address or route is added to the host's
namespace. ``replace`` stands for a file of manifests rewritten: the objects written under a
name before and not now are deleted, the others created anew (a Pod's status, which a create
ignores, is written through its subresource, as the kubelet writes it). Calico's kinds are
written as the crd.projectcalico.org/v1 custom resources a cluster without Calico's API
server holds.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import attrs
import yaml

from tests.etcd_server import free_port
from tests.kube_server import KubeServer, collection_path

PROGRAMS = Path(__file__).parent / "programs"
#: Namespaces the API server has already.
BUILTIN_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


def _identity(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    metadata = doc["metadata"]
    return (doc["apiVersion"], doc["kind"], metadata.get("namespace", ""), metadata["name"])


def as_custom_resource(doc: dict[str, Any]) -> dict[str, Any]:
    """Calico's v3 kinds as the custom resources kubectl would find."""
    if doc.get("apiVersion") == "projectcalico.org/v3":
        return {**doc, "apiVersion": "crd.projectcalico.org/v1"}
    return doc


@attrs.define(eq=False)
class KubeDatastore:
    server: KubeServer
    _written: dict[str, dict[tuple[str, str, str, str], dict[str, Any]]] = attrs.Factory(dict)

    def datastore(self, stack: ExitStack, netns: str) -> str:
        """The ``--datastore`` of an agent in ``netns``: a kubeconfig naming a port there that
        forwards to the API server."""
        socket_path = self.server.directory / f"api-{netns}.sock"
        socket_path.unlink(missing_ok=True)
        inside = free_port()
        self._forwarder(stack, [], "unix", str(socket_path), "tcp", str(self.server.port))
        self._forwarder(
            stack, ["ip", "netns", "exec", netns], "tcp", str(inside), "unix", str(socket_path)
        )
        config = self.server.kubeconfig(name=f"kubeconfig-{netns}")
        config.write_text(config.read_text().replace(f":{self.server.port}", f":{inside}"))
        return f"kubernetes://{config}"

    @staticmethod
    def _forwarder(stack: ExitStack, prefix: list[str], *args: str) -> None:
        process = subprocess.Popen(
            [*prefix, sys.executable, str(PROGRAMS / "forward.py"), *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(process.wait)
        stack.callback(process.kill)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"

    def replace(self, name: str, text: str) -> None:
        docs = [as_custom_resource(d) for d in yaml.safe_load_all(text) if d]
        wanted = {_identity(d): d for d in docs}
        before = self._written.get(name, {})
        for identity, doc in before.items():
            if identity not in wanted or wanted[identity] != doc:
                self._delete(doc)
        # Namespaces first: what lives in them is refused until they exist.
        for identity, doc in sorted(wanted.items(), key=lambda i: i[0][1] != "Namespace"):
            if before.get(identity) != doc:
                self._create(doc)
        self._written[name] = wanted

    def _create(self, doc: dict[str, Any]) -> None:
        body = {k: v for k, v in doc.items() if k != "status"}
        if doc["kind"] == "Namespace" and doc["metadata"]["name"] in BUILTIN_NAMESPACES:
            return
        self.server.apply(body)
        if doc["kind"] == "Pod" and "status" in doc:
            path = f"{collection_path(doc)}/{doc['metadata']['name']}/status"
            self.server.request("PATCH", path, {"status": doc["status"]})

    def _delete(self, doc: dict[str, Any]) -> None:
        path = f"{collection_path(doc)}/{doc['metadata']['name']}"
        try:
            self.server.request("DELETE", f"{path}?gracePeriodSeconds=0")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
