"""A real kube-apiserver for tests, over a real etcd, with Calico's custom resource kinds.

The binary is built from the k8s.io/kubernetes Go module by tests/kube/build-apiserver.sh
(``make kube-apiserver``; cached outside the work tree). Each server gets its own certificate
authority, serving certificate and service-account keys (openssl), a token file with an admin
token (group system:masters) and a token without rights (``viewer``, bound by the tests to
what they want it to have), and minimal structural CRDs for Calico's kinds and the
cluster-scoped policy API: their specs are kept as written (Calico's own CRDs validate them;
pyfelix validates what it reads). It can be stopped and started again on the same port and
data, to test an agent whose API server goes away.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.etcd_server import EtcdServer, free_port

BUILD = Path(__file__).resolve().parent / "kube" / "build-apiserver.sh"
ADMIN_TOKEN = "pyfelix-test-admin"
VIEWER_TOKEN = "pyfelix-test-viewer"

#: (kind, plural, namespaced) of Calico's custom resources (libcalico-go/config/crd).
CALICO_CRDS = (
    ("BGPConfiguration", "bgpconfigurations", False),
    ("BGPPeer", "bgppeers", False),
    ("BlockAffinity", "blockaffinities", False),
    ("ClusterInformation", "clusterinformations", False),
    ("FelixConfiguration", "felixconfigurations", False),
    ("GlobalNetworkPolicy", "globalnetworkpolicies", False),
    ("GlobalNetworkSet", "globalnetworksets", False),
    ("HostEndpoint", "hostendpoints", False),
    ("IPAMBlock", "ipamblocks", False),
    ("IPAMHandle", "ipamhandles", False),
    ("IPPool", "ippools", False),
    ("KubeControllersConfiguration", "kubecontrollersconfigurations", False),
    ("NetworkPolicy", "networkpolicies", True),
    ("NetworkSet", "networksets", True),
    ("StagedGlobalNetworkPolicy", "stagedglobalnetworkpolicies", False),
    ("StagedKubernetesNetworkPolicy", "stagedkubernetesnetworkpolicies", True),
    ("StagedNetworkPolicy", "stagednetworkpolicies", True),
    ("Tier", "tiers", False),
)


def apiserver_binary() -> Path:
    """The cached kube-apiserver, built first if it is not there (minutes, once)."""
    result = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, check=False, timeout=1800
    )
    if result.returncode != 0:
        raise RuntimeError(f"building kube-apiserver failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def _crd(group: str, version: str, kind: str, plural: str, namespaced: bool) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            # The k8s.io groups are protected: the network-policy-api project's CRDs carry
            # the approval, as this one must.
            "annotations": {
                "api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/network-policy-api/pull/30"
            }
            if group.endswith(".k8s.io")
            else {},
        },
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def crds() -> list[dict[str, Any]]:
    """Calico's kinds, and the cluster-scoped policy API's ClusterNetworkPolicy."""
    found = [_crd("crd.projectcalico.org", "v1", *row) for row in CALICO_CRDS]
    found.append(
        _crd(
            "policy.networking.k8s.io",
            "v1alpha2",
            "ClusterNetworkPolicy",
            "clusternetworkpolicies",
            False,
        )
    )
    return found


class KubeServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "etcd").mkdir(exist_ok=True)
        self.etcd = EtcdServer(str(directory / "etcd"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log = open(directory / "kube-apiserver.log", "ab")  # noqa: SIM115 (kept open)
        self._certificates()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _certificates(self) -> None:
        d = self.directory

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=pyfelix-test-ca",
        )
        (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=kube-apiserver",
        )
        openssl(
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
        )
        openssl("genrsa", "-out", "sa.key", "2048")
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        (d / "tokens.csv").write_text(
            f"{ADMIN_TOKEN},admin,1,system:masters\n{VIEWER_TOKEN},viewer,2\n"
        )

    def kubeconfig(self, token: str = ADMIN_TOKEN, name: str = "kubeconfig") -> Path:
        """A kubeconfig file for this server and ``token``, as kubeadm writes one."""
        path = self.directory / name
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.directory / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user"}}],
            "current-context": "test",
        }
        path.write_text(json.dumps(config))
        return path

    def start(self, timeout: float = 60.0) -> None:
        if self.etcd.process is None:
            self.etcd.start()
        d = self.directory
        self.process = subprocess.Popen(
            [
                str(apiserver_binary()),
                f"--etcd-servers={self.etcd.url}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={d / 'server.crt'}",
                f"--tls-private-key-file={d / 'server.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--authorization-mode=RBAC",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # No controller manager runs: nothing would create the service accounts pods
                # name, so that admission plugin would refuse every pod.
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited: see {self._log.name}")
            try:
                self.request("GET", "/readyz")
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.2)
                continue
            self._install_crds()
            return
        raise RuntimeError("kube-apiserver did not become ready")

    def _install_crds(self) -> None:
        for crd in crds():
            try:
                self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            except urllib.error.HTTPError as exc:
                if exc.code != 409:  # there from an earlier start
                    raise
        deadline = time.monotonic() + 30
        for crd in crds():
            name = crd["metadata"]["name"]
            while True:
                got = self.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conditions = {
                    c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])
                }
                if conditions.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not established")
                time.sleep(0.1)

    def request(self, method: str, path: str, body: Any = None, token: str = ADMIN_TOKEN) -> Any:
        """One API request as the admin (JSON in and out)."""
        context = ssl.create_default_context(cafile=str(self.directory / "ca.crt"))
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token}"}
        if data is not None:
            headers["Content-Type"] = (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            )
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            exc.msg = f"{exc.msg}: {exc.read().decode(errors='replace')[:2000]}"
            raise
        try:
            return json.loads(text)
        except ValueError:
            return text.decode()

    def apply(self, doc: dict[str, Any]) -> Any:
        """Create ``doc`` at its API path (a Kubernetes or Calico custom resource kind)."""
        return self.request("POST", collection_path(doc), doc)

    def delete(self, doc: dict[str, Any]) -> Any:
        return self.request("DELETE", f"{collection_path(doc)}/{doc['metadata']['name']}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        self.etcd.stop()
        self._log.close()


_PLURALS = {
    ("v1", "Pod"): "pods",
    ("v1", "Namespace"): "namespaces",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "Node"): "nodes",
    ("v1", "Service"): "services",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("discovery.k8s.io/v1", "EndpointSlice"): "endpointslices",
    ("policy.networking.k8s.io/v1alpha2", "ClusterNetworkPolicy"): "clusternetworkpolicies",
}
_NAMESPACED = {"pods", "serviceaccounts", "services", "networkpolicies", "endpointslices"}


def collection_path(doc: dict[str, Any]) -> str:
    api_version, kind = doc["apiVersion"], doc["kind"]
    plural = _PLURALS.get((api_version, kind))
    namespaced = plural in _NAMESPACED
    if plural is None:
        row = next(r for r in CALICO_CRDS if r[0] == kind)
        plural, namespaced = row[1], row[2]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = doc["metadata"].get("namespace", "default")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"


@contextmanager
def kube_server(directory: Path) -> Iterator[KubeServer]:
    server = KubeServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.close()
        shutil.rmtree(directory / "etcd", ignore_errors=True)
