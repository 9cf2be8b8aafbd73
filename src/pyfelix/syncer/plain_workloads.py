"""WorkloadEndpoints straight from their JSON into Felix's model, skipping the v3 object.

The general path decodes a document field by field into the v3 resource, validates it and
converts it: 30 us an endpoint, most of the time it takes to list a 100k-endpoint etcd. Nearly
every endpoint a CNI plugin writes is *plain*: only names, interface, addresses, profiles, MAC,
labels and annotations, each a string (or a list or map of strings), each valid. For such a
document :func:`plain_workload` gives the model key and value the general path would give; for
anything else it gives None, and the caller takes the general path, which names every problem.

The value records no ``origin``: the validation filter has nothing left to check, and the
converter compares values alone (an annotation-only change emits nothing, as the dataplane
would do nothing with it). tests/test_plain_workloads.py checks both paths agree, document by
generated document.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from pyfelix import model
from pyfelix.resources.loader import Identity
from pyfelix.resources.meta import CALICO_API_VERSION
from pyfelix.syncer.processors import KV, workload_key_of, workload_label_dict
from pyfelix.validation.kinds import plain_workload_valid
from pyfelix.values import FrozenMap, shared_names

#: WorkloadEndpoint's KIND (not imported from its class: this module is on every agent's
#: path, the class only where endpoints are decoded whole; a test compares them).
_KIND = "WorkloadEndpoint"
#: The metadata fields a plain endpoint may have that are strings (all but two of them).
METADATA_STRINGS = ("name", "namespace", "resourceVersion", "uid", "creationTimestamp")
_METADATA_KEYS = frozenset({*METADATA_STRINGS, "labels", "annotations"})
#: The spec's strings ``checked_fields`` reads, in the order of its ``names``.
SPEC_STRINGS = (
    "orchestrator",
    "node",
    "endpoint",
    "workload",
    "pod",
    "serviceAccountName",
    "interfaceName",
    "mac",
)
#: The spec's strings nobody reads.
SPEC_UNREAD_STRINGS = ("containerID",)
_SPEC_KEYS = frozenset({*SPEC_STRINGS, *SPEC_UNREAD_STRINGS, "ipNetworks", "profiles"})
_intern = sys.intern
#: Where etcd holds workload endpoints (what the etcd syncer decodes as one; the layout's
#: key for the kind, which a test compares).
_ETCD_PREFIX = "/calico/resources/v3/projectcalico.org/workloadendpoints/"


#: A plain endpoint's fields, checked (``plain_fields``): name, namespace, node, orchestrator,
#: workload (the pod's name when there is one), endpoint, service account, interface, MAC,
#: profiles, networks and labels. A tuple of strings marshals, which lets the agent's first
#: read check endpoints on the core that parsed them (``ParsePrefetch``); a parsed document
#: is never a tuple.
PlainFields = tuple[
    str,
    str,
    tuple[str, str, str, str],
    str,
    str,
    tuple[str, ...],
    tuple[str, ...],
    dict[str, str],
]


def plain_workload_identity(
    document: dict[str, Any] | PlainFields,
) -> tuple[Identity, None] | None:
    """A plain endpoint's identity (Kind, namespace, name), for a load that only checks
    (the dry-run's validating child): a document's fields are checked in full."""
    fields = document if isinstance(document, tuple) else plain_fields(document)
    return None if fields is None else ((_KIND, fields[1], fields[0]), None)


def plain_workload(document: dict[str, Any], *, validate: bool = True) -> KV | None:
    """The model (key, value) of a plain WorkloadEndpoint document, or None if it is not one
    (another kind, another field, a type or value the general path would report)."""
    fields = plain_fields(document, validate=validate)
    return None if fields is None else from_fields(fields)[1]


def plain_fields(document: dict[str, Any], *, validate: bool = True) -> PlainFields | None:
    """A plain WorkloadEndpoint document's fields, checked, or None if it is not one."""
    if len(document) != 4:
        return None
    if document.get("kind") != _KIND or document.get("apiVersion") != CALICO_API_VERSION:
        return None
    metadata, spec = document.get("metadata"), document.get("spec")
    if type(metadata) is not dict or type(spec) is not dict:
        return None
    if not (metadata.keys() <= _METADATA_KEYS and spec.keys() <= _SPEC_KEYS):
        return None
    meta = metadata.get
    name, namespace = meta("name", ""), meta("namespace", "")
    labels, annotations = meta("labels", {}), meta("annotations", {})
    get = spec.get
    names = tuple([get(field, "") for field in SPEC_STRINGS])
    networks, profile_list = get("ipNetworks", []), get("profiles", [])
    if type(labels) is not dict or type(annotations) is not dict:
        return None
    if type(networks) is not list or type(profile_list) is not list:
        return None
    # Every value a string: one join checks them all, in C (it refuses anything else).
    try:
        "".join(
            [
                *[meta(field, "") for field in METADATA_STRINGS],
                *names,
                *[get(field, "") for field in SPEC_UNREAD_STRINGS],
                *networks,
                *profile_list,
                *labels,
                *labels.values(),
                *annotations,
                *annotations.values(),
            ]
        )
    except TypeError:
        return None
    return checked_fields(
        name,
        namespace,
        labels=labels,
        annotations=annotations,
        names=cast("tuple[str, str, str, str, str, str, str, str]", names),
        networks=networks,
        profile_list=profile_list,
        validate=validate,
    )


def checked_fields(
    name: str,
    namespace: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    names: tuple[str, str, str, str, str, str, str, str],
    networks: list[str],
    profile_list: list[str],
    validate: bool,
) -> PlainFields | None:
    """An endpoint's fields from the values its decoder read with their types checked (the
    spec's orchestrator, node, endpoint, workload, pod, service account, interface and MAC,
    in ``names``), or None if one is a value the general path reports (with ``validate``).
    Shared by the decoders of a parsed document and of its JSON text
    (plain_workloads_typed.py)."""
    orchestrator, node, endpoint, workload, pod, account, interface, mac = names
    # The decoder interns what repeats across a cluster (SHARED_STR): the same strings here.
    namespace = _intern(namespace or "default")
    orchestrator, node, endpoint = _intern(orchestrator), _intern(node), _intern(endpoint)
    account = _intern(account)
    profiles = tuple([_intern(p) for p in profile_list])
    if validate and not plain_workload_valid(
        name=name,
        namespace=namespace,
        interface_name=interface,
        mac=mac,
        ip_networks=networks,
        names=(orchestrator, workload, node, pod, endpoint, account),
        profiles=profiles,
        labels=labels,
        annotations=annotations,
    ):
        return None
    # Everything the model value needs is worked out here, on the core that parsed (or once,
    # for the parse cache): the model key's parts, the addresses as /32s, the labels as
    # Felix matches them; the agent only builds the objects (``from_fields``).
    workload = pod or workload
    if node and endpoint and workload:  # what a CNI plugin writes: workload_key_of's first case
        key_parts = (node, orchestrator or "k8s", f"{namespace}/{workload}", endpoint)
    else:
        key = workload_key_of(
            name,
            namespace,
            node=node,
            orchestrator=orchestrator,
            workload=workload,
            endpoint=endpoint,
        )
        key_parts = (key.hostname, key.orchestrator, key.workload, key.endpoint)
    nets = tuple([n if n.endswith("/32") else n + "/32" for n in networks])
    matched = workload_label_dict(labels, namespace, orchestrator or key_parts[1], account)
    return (name, namespace, key_parts, interface, mac, profiles, nets, matched)


def plain_fields_at(key: str, document: dict[str, Any]) -> PlainFields | None:
    """``plain_fields`` of the document stored at an etcd ``key``, where the etcd syncer would
    read it as a workload endpoint (a key under their prefix, valid UTF-8): the checks the
    agent's first listing runs in the child that fetches it (``ListingPrefetch``)."""
    if not key.startswith(_ETCD_PREFIX):
        return None
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return None  # the syncer reports it
    return plain_fields(document)


def from_fields(fields: PlainFields) -> tuple[Identity, KV]:
    """The identity and model (key, value) of a plain endpoint's checked fields."""
    name, namespace, key_parts, interface, mac, profiles, nets, labels = fields
    key = model.WorkloadEndpointKey(*key_parts)
    if not nets:
        return (_KIND, namespace, name), (key, None)
    labels_map = FrozenMap.shared(labels)
    value = model.WorkloadEndpoint(
        "active", interface, mac, shared_names(profiles), nets, (), labels_map
    )
    return (_KIND, namespace, name), (key, value)
