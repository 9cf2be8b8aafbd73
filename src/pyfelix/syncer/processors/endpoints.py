"""Workload endpoints (and the pods they are converted from) and host endpoints."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from sys import intern
from typing import TYPE_CHECKING

from pyfelix import model
from pyfelix.ipnet import canonical_networks
from pyfelix.model import (
    NAMESPACE_LABEL,
    NAMESPACE_LABEL_PREFIX,
    ORCHESTRATOR_LABEL,
    SERVICE_ACCOUNT_LABEL,
    SERVICE_ACCOUNT_LABEL_PREFIX,
)
from pyfelix.values import FrozenMap

if TYPE_CHECKING:
    from pyfelix.resources import (
        HostEndpoint,
        Pod,
        Resource,
        WorkloadEndpoint,
    )
from pyfelix.syncer.processors.common import (
    KV,
    normalise_protocol,
)

log = logging.getLogger(__name__)


def _unescape_name_parts(name: str) -> list[str]:
    """Split a WorkloadEndpoint name on single dashes ("--" is an escaped dash)."""
    parts, current, i = [], [], 0
    while i < len(name):
        if name.startswith("--", i):
            current.append("-")
            i += 2
        elif name[i] == "-":
            parts.append("".join(current))
            current = []
            i += 1
        else:
            current.append(name[i])
            i += 1
    parts.append("".join(current))
    return parts


def workload_key(wep: WorkloadEndpoint) -> model.WorkloadEndpointKey:
    spec = wep.spec
    return workload_key_of(
        wep.name,
        wep.namespace,
        node=spec.node,
        orchestrator=spec.orchestrator,
        workload=spec.pod or spec.workload,
        endpoint=spec.endpoint,
    )


def workload_key_of(
    name: str, namespace: str, *, node: str, orchestrator: str, workload: str, endpoint: str
) -> model.WorkloadEndpointKey:
    """From the spec when it names node and endpoint, else parsed from Calico's name format."""
    if node and endpoint and workload:
        return model.WorkloadEndpointKey(
            node, orchestrator or "k8s", f"{namespace}/{workload}", endpoint
        )
    parts = _unescape_name_parts(name)
    if len(parts) == 4:
        node_part, orchestrator_part, workload_part, endpoint_part = parts
    else:
        node_part, orchestrator_part, endpoint_part = node, orchestrator, endpoint or "eth0"
        workload_part = workload or name
    return model.WorkloadEndpointKey(
        node or node_part,
        orchestrator or orchestrator_part,
        f"{namespace}/{workload_part}",
        endpoint or endpoint_part,
    )


def workload_labels(
    labels: Mapping[str, str], namespace: str, orchestrator: str, service_account: str
) -> FrozenMap[str]:
    """An endpoint's labels as Felix matches them: Calico's namespace and service account
    labels are its own (labels with their prefixes are dropped), plus the orchestrator."""
    return FrozenMap.shared(workload_label_dict(labels, namespace, orchestrator, service_account))


def workload_label_dict(
    labels: Mapping[str, str], namespace: str, orchestrator: str, service_account: str
) -> dict[str, str]:
    """``workload_labels`` as a new dict, its keys and values interned: a cluster's pods
    repeat a few labels (app, tier, version) thousands of times, and each decoded document
    brings its own copies of them."""
    out = {
        intern(k): intern(v)
        for k, v in labels.items()
        if not k.startswith((NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL_PREFIX))
    }
    out[NAMESPACE_LABEL] = namespace
    out[ORCHESTRATOR_LABEL] = orchestrator
    if service_account:
        out[SERVICE_ACCOUNT_LABEL] = service_account
    return out


def split_nets(values: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    nets = canonical_networks(values)
    v6 = tuple(n for n in nets if ":" in n)
    return (tuple(n for n in nets if ":" not in n) if v6 else nets), v6


def _pod(pod: Pod) -> list[KV]:
    """The WorkloadEndpoint Calico makes of a pod (none for a host-network pod)."""
    from pyfelix.resources.k8s_conversion import ConversionError, workload_endpoint  # noqa: PLC0415

    try:
        wep = workload_endpoint(pod)
    except ConversionError:
        return []  # validation named the field
    return _workload_endpoint(wep, origin=pod) if wep is not None else []


#: The qosControls fields already named in a warning (once per process each: a cluster may
#: shape thousands of pods).
_QOS_WARNED: set[str] = set()


def _warn_qos(wep: WorkloadEndpoint) -> None:
    """Felix shapes bandwidth and packet rates with tc, limits connections and sets DSCP;
    pyfelix programs none of them, so each control a workload asks for is named once."""
    controls = wep.spec.qos_controls
    if not isinstance(controls, Mapping):
        return
    for name in sorted(str(k) for k, v in controls.items() if v not in (None, "", 0)):
        if name not in _QOS_WARNED:
            _QOS_WARNED.add(name)
            log.warning(
                "%s asks for qosControls.%s, which pyfelix does not program (Felix does):"
                " it and any other workload's are programmed without it",
                wep.ident,
                name,
            )


def _workload_endpoint(wep: WorkloadEndpoint, origin: Resource | None = None) -> list[KV]:
    spec = wep.spec
    if spec.qos_controls:
        _warn_qos(wep)
    key = workload_key(wep)
    v4, v6 = split_nets(spec.ip_networks)
    if not (v4 or v6):
        return [(key, None)]
    labels = workload_labels(
        wep.labels, wep.namespace, spec.orchestrator or key.orchestrator, spec.service_account_name
    )
    # Most endpoints have no NATs, ports or spoofing prefixes: nothing is built for them.
    nats = [model.IPNAT(n.internal_ip, n.external_ip) for n in spec.ip_nats]
    value = model.WorkloadEndpoint(
        state="active",
        name=spec.interface_name,
        mac=spec.mac,
        profile_ids=spec.profiles,
        ipv4_nets=v4,
        ipv6_nets=v6,
        labels=labels,
        ipv4_nat=tuple(n for n in nats if ":" not in n.int_ip) if nats else (),
        ipv6_nat=tuple(n for n in nats if ":" in n.int_ip) if nats else (),
        ipv4_gateway=spec.ipv4_gateway,
        ipv6_gateway=spec.ipv6_gateway,
        ports=tuple(
            model.EndpointPort(p.name, normalise_protocol(p.protocol) or "tcp", p.port)
            for p in spec.ports
            if p.name
        )
        if spec.ports
        else (),
        allow_spoofed_source_prefixes=canonical_networks(spec.allow_spoofed_source_prefixes)
        if spec.allow_spoofed_source_prefixes
        else (),
        origin=origin or wep,
    )
    return [(key, value)]


def _host_endpoint(hep: HostEndpoint) -> list[KV]:
    spec = hep.spec
    addresses = []
    for ip in spec.expected_ips:
        try:
            addresses.append(ipaddress.ip_address(ip))
        except ValueError:
            continue
    value = model.HostEndpoint(
        name=spec.interface_name,
        expected_ipv4_addrs=tuple(str(a) for a in addresses if a.version == 4),
        expected_ipv6_addrs=tuple(str(a) for a in addresses if a.version == 6),
        labels=hep.labels,
        profile_ids=spec.profiles,
        ports=tuple(
            model.EndpointPort(p.name, normalise_protocol(p.protocol) or "tcp", p.port)
            for p in spec.ports
        ),
        origin=hep,
    )
    return [(model.HostEndpointKey(spec.node, hep.name), value)]
