"""Syncers: the datastore (files or etcd) as a stream of model updates and sync statuses."""
