"""Datastore access outside the syncers: the etcd client, Calico's etcd key layout, and the
calicoctl-like ``pyfelix datastore`` commands."""


def is_etcd(source: str) -> bool:
    """Whether a datastore source names etcd (else it is a directory or file of manifests)."""
    return source.startswith(("etcd://", "etcds://"))
