"""Datastore access outside the syncers: the etcd client, Calico's etcd key layout, and the
calicoctl-like ``pyfelix datastore`` commands."""


def is_etcd(source: str) -> bool:
    """Whether a datastore source names etcd (else it is a directory or file of manifests)."""
    return source.startswith(("etcd://", "etcds://"))


#: The source that names the Kubernetes API datastore: ``kubernetes://`` takes the kubeconfig
#: Felix would (FELIX_KUBECONFIG, KUBECONFIG, else the pod's service account);
#: ``kubernetes:///path/to/kubeconfig`` names one.
KUBERNETES_SCHEME = "kubernetes://"


def is_kubernetes(source: str) -> bool:
    """Whether a datastore source names the Kubernetes API."""
    return source.startswith(KUBERNETES_SCHEME)


def kubeconfig_path(source: str) -> str:
    """The kubeconfig file a ``kubernetes://`` source names ("" for the environment's)."""
    return source.removeprefix(KUBERNETES_SCHEME)
