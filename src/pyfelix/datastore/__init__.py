"""Datastore access outside the syncers: the etcd client, Calico's etcd key layout, and the
calicoctl-like ``pyfelix datastore`` commands."""
