"""Pods straight from their JSON to the workload endpoint Felix's model holds for them,
skipping the Pod object and the v3 WorkloadEndpoint converted from it.

A cluster's dump (``kubectl get pods -A -o json``) holds about 3 KB of JSON a pod, nine
tenths of it fields Calico never reads (images, probes, volumes, conditions). The general
path decodes each pod into a Pod, validates it, converts it to a WorkloadEndpoint and that to
the model value, in the process that parses the file and again in the one that computes:
half the time of Felix's tags shape as a dump (bench/RESULTS.md). Nearly every pod of a dump
is *plain*: the fields Calico reads are of the types Kubernetes gives them and valid, and it
asks for nothing pyfelix treats specially (floating IPs, source prefixes, QoS controls, host
ports, deletion). For such a document :func:`plain_pod_fields` gives what the model value is
made of, worked out where the file was parsed, as a tuple that marshals (the dry-run's
validating child hands it on in the document's place); for anything else None, and the
general path names every problem. tests/test_plain_pods.py checks both paths agree, document
by generated document.
"""

from __future__ import annotations

import sys
from typing import Any

from pyfelix import model
from pyfelix.resources.k8s_conversion import (
    FINISHED_PHASES,
    FLOATING_IPS_ANNOTATION,
    PORT_PROTOCOLS,
    QOS_ANNOTATIONS,
    SOURCE_PREFIXES_ANNOTATION,
    endpoint_profiles,
    ip_source,
    veth_name,
)
from pyfelix.resources.loader import Identity
from pyfelix.resources.pods import CONTAINER_UNREAD, POD_SPEC_UNREAD, POD_STATUS_UNREAD
from pyfelix.syncer.processors import KV, workload_label_dict
from pyfelix.syncer.processors.endpoints import split_nets
from pyfelix.validation.common import port_name_problem
from pyfelix.validation.kinds import plain_metadata_valid
from pyfelix.values import FrozenMap, shared_names

#: Pod's KIND (a test compares it with the class's).
_KIND = "Pod"
_TOP_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
#: The metadata fields a plain pod may have that are strings (all but three of them).
METADATA_STRINGS = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
)
#: ``generation`` is an integer, on every pod since Kubernetes 1.34 (pod generation tracking).
_METADATA_KEYS = frozenset(
    {*METADATA_STRINGS, "labels", "annotations", "ownerReferences", "generation"}
)
_SPEC_KEYS = POD_SPEC_UNREAD | {
    "nodeName",
    "hostNetwork",
    "serviceAccountName",
    "containers",
    "initContainers",
}
_STATUS_KEYS = POD_STATUS_UNREAD | {"phase", "podIP", "podIPs"}
_CONTAINER_KEYS = CONTAINER_UNREAD | {"name", "ports"}
_PORT_KEYS = frozenset({"name", "containerPort", "protocol"})
#: Annotations that ask for what only the general path handles (each is rare).
SPECIAL_ANNOTATIONS = frozenset(
    {FLOATING_IPS_ANNOTATION, SOURCE_PREFIXES_ANNOTATION, *QOS_ANNOTATIONS}
)
_intern = sys.intern

#: A plain pod's fields, checked (``plain_pod_fields``): the kind (what tells them from the
#: other direct paths' tuples), the pod's name and namespace, the model key's parts, the
#: interface, the profiles, the IPv4 and IPv6 networks, the named ports (name, protocol,
#: number) and the labels as Felix matches them. Strings, tuples and a dict: it marshals.
PodFields = tuple[
    str,
    str,
    str,
    tuple[str, str, str, str],
    str,
    tuple[str, ...],
    tuple[str, ...],
    tuple[str, ...],
    tuple[tuple[str, str, int], ...],
    dict[str, str],
]


def is_pod_fields(value: tuple[Any, ...]) -> bool:
    """Whether a direct path's tuple is a pod's (``PodFields``)."""
    return len(value) == 10 and value[0] == _KIND


def plain_pod_fields(document: dict[str, Any], *, validate: bool = True) -> PodFields | None:
    """A plain Pod document's fields, checked, or None if it is not one (another kind, a
    field or annotation only the general path handles, a type or value it would report, a
    pod that is no endpoint). ``validate=False`` trusts the values (their shapes are still
    checked): for a load whose validation runs elsewhere, on the same files."""
    if document.get("kind") != _KIND or document.get("apiVersion") != "v1":
        return None
    if not document.keys() <= _TOP_KEYS:
        return None
    metadata, spec = document.get("metadata"), document.get("spec")
    status = document.get("status", {})
    if type(metadata) is not dict or type(spec) is not dict or type(status) is not dict:
        return None
    if not (
        metadata.keys() <= _METADATA_KEYS
        and spec.keys() <= _SPEC_KEYS
        and status.keys() <= _STATUS_KEYS
    ):
        return None
    meta = metadata.get
    labels, annotations = meta("labels", {}), meta("annotations", {})
    if type(labels) is not dict or type(annotations) is not dict:
        return None
    if not annotations.keys().isdisjoint(SPECIAL_ANNOTATIONS):
        return None
    if not _flat_references(meta("ownerReferences", [])) or type(meta("generation", 0)) is not int:
        return None
    name, namespace = meta("name", ""), meta("namespace", "")
    node, account = spec.get("nodeName", ""), spec.get("serviceAccountName", "")
    if spec.get("hostNetwork", False) is not False or not node:
        return None  # no endpoint (or a value the general path reports)
    phase, pod_ip = status.get("phase", ""), status.get("podIP", "")
    ip_entries = status.get("podIPs", [])
    if type(ip_entries) is not list:
        return None
    pod_ips = []
    for entry in ip_entries:
        if type(entry) is not dict or entry.keys() != {"ip"}:
            return None
        pod_ips.append(entry["ip"])
    ports = _ports(spec, validate)
    if ports is None:
        return None
    # Every value a string: one join checks them all, in C (it refuses anything else).
    try:
        "".join(
            [
                *(name, namespace, meta("generateName", ""), meta("uid", "")),
                *(meta("resourceVersion", ""), meta("creationTimestamp", "")),
                *(node, account, phase, pod_ip),
                *pod_ips,
                *labels,
                *labels.values(),
                *annotations,
                *annotations.values(),
            ]
        )
    except TypeError:
        return None
    return checked_pod_fields(
        name,
        namespace,
        labels,
        annotations,
        node=node,
        account=account,
        phase=phase,
        pod_ip=pod_ip,
        pod_ips=pod_ips,
        ports=ports,
        validate=validate,
    )


_SCALARS = (str, int, float, bool, type(None))


def _flat_references(references: object) -> bool:
    """Whether ``references`` is a list of objects of scalars, as an owner's references are
    (the general decoder keeps any JSON there, but refuses it nested past its depth)."""
    return type(references) is list and all(
        type(owner) is dict and all(type(v) in _SCALARS for v in owner.values())
        for owner in references
    )


def checked_pod_fields(
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    *,
    node: str,
    account: str,
    phase: str,
    pod_ip: str,
    pod_ips: list[str],
    ports: tuple[tuple[str, str, int], ...],
    validate: bool,
) -> PodFields | None:
    """A pod's fields from the values its decoder read with their types checked, or None if
    its metadata (with ``validate``) or an address is one the general path reports. Shared
    by the decoders of a parsed document and of a pod's JSON text (plain_pods_typed.py)."""
    if validate and not plain_metadata_valid(name, namespace, labels, annotations):
        return None
    addresses = ip_source(pod_ips, pod_ip, annotations)[1]
    v4, v6 = split_nets(tuple(addresses))
    if len(v4) + len(v6) != len(addresses):
        return None  # an address the general path reports
    if phase in FINISHED_PHASES:
        v4, v6 = (), ()  # a finished pod keeps its key, without addresses
    namespace, node, account = _intern(namespace), _intern(node), _intern(account)
    key_parts = (node, "k8s", f"{namespace}/{name}", "eth0")
    # endpoint_labels' Calico labels, which workload_label_dict sets again: the same dict.
    matched = workload_label_dict(labels, namespace, "k8s", account)
    return (
        _KIND,
        name,
        namespace,
        key_parts,
        veth_name(namespace, name),
        tuple([_intern(p) for p in endpoint_profiles(namespace, account)]),
        v4,
        v6,
        ports,
        matched,
    )


def _ports(spec: dict[str, Any], validate: bool) -> tuple[tuple[str, str, int], ...] | None:
    """The named container ports, containers before init containers, as the model's
    (name, protocol, number); None at anything the general path handles or reports."""
    named: list[tuple[str, str, int]] = []
    for field in ("containers", "initContainers"):
        containers = spec.get(field, [])
        if type(containers) is not list:
            return None
        for container in containers:
            if type(container) is not dict or not container.keys() <= _CONTAINER_KEYS:
                return None
            if type(container.get("name", "")) is not str:
                return None
            ports = container.get("ports", [])
            if type(ports) is not list:
                return None
            for port in ports:
                if type(port) is not dict or not port.keys() <= _PORT_KEYS:
                    return None
                number, name = port.get("containerPort"), port.get("name", "")
                given = port.get("protocol", "")
                if type(number) is not int or type(name) is not str or type(given) is not str:
                    return None
                checked = checked_port(number, name, given, validate)
                if checked is None:
                    return None
                if name:
                    named.append(checked)
    return tuple(named)


def checked_port(number: int, name: str, given: str, validate: bool) -> tuple[str, str, int] | None:
    """A container port as the model's (name, protocol, number) once its types are checked,
    or None if the general path handles or reports it."""
    protocol = PORT_PROTOCOLS.get(given)
    if protocol is None or not 1 <= number <= 65535:
        return None
    if validate and name and port_name_problem(name):
        return None
    return _intern(name), protocol.lower(), number


def pod_entry(fields: PodFields) -> tuple[Identity, KV]:
    """The identity and model (key, value) of a plain pod's checked fields."""
    _, name, namespace, key_parts, interface, profiles, v4, v6, ports, labels = fields
    key = model.WorkloadEndpointKey(*key_parts)
    if not (v4 or v6):
        return (_KIND, namespace, name), (key, None)
    value = model.WorkloadEndpoint(
        "active",
        interface,
        "",
        shared_names(profiles),
        v4,
        v6,
        FrozenMap.shared(labels),
        ports=tuple([model.EndpointPort(*port) for port in ports]),
    )
    return (_KIND, namespace, name), (key, value)


def pod_identity(fields: PodFields) -> Identity:
    """The identity (Kind, namespace, name) of a plain pod's checked fields."""
    return (_KIND, fields[2], fields[1])
