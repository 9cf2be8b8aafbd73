"""Workload and host endpoints: where policy is enforced."""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    INT,
    INT_OR_STR,
    JSON,
    RAW,
    SHARED_STR,
    SHARED_STR_LIST,
    STR,
    STR_LIST,
    ListOf,
    Nested,
    Spec,
    field,
)


@attrs.frozen
class EndpointPort(Spec):
    """A named port an endpoint offers; rules refer to it by name."""

    name: str = field("name", STR, default="", keep_empty=True)
    protocol: int | str = field("protocol", INT_OR_STR, default="", keep_empty=True)
    port: int = field("port", INT, default=0, keep_empty=True)


@attrs.frozen
class WorkloadEndpointPort(EndpointPort):
    host_port: int = field("hostPort", INT, default=0, keep_empty=True)
    host_ip: str = field("hostIP", STR, default="", keep_empty=True)


@attrs.frozen
class IPNAT(Spec):
    internal_ip: str = field("internalIP", STR, default="", keep_empty=True)
    external_ip: str = field("externalIP", STR, default="", keep_empty=True)


@attrs.frozen
class WorkloadEndpointSpec(Spec):
    orchestrator: str = field("orchestrator", SHARED_STR, default="")
    workload: str = field("workload", STR, default="")
    node: str = field("node", SHARED_STR, default="")
    container_id: str = field("containerID", STR, default="")
    pod: str = field("pod", STR, default="")
    endpoint: str = field("endpoint", SHARED_STR, default="")
    service_account_name: str = field("serviceAccountName", SHARED_STR, default="")
    ip_networks: tuple[str, ...] = field("ipNetworks", STR_LIST, factory=tuple)
    ip_nats: tuple[IPNAT, ...] = field("ipNATs", ListOf(Nested(IPNAT)), factory=tuple)
    ipv4_gateway: str = field("ipv4Gateway", STR, default="")
    ipv6_gateway: str = field("ipv6Gateway", STR, default="")
    profiles: tuple[str, ...] = field("profiles", SHARED_STR_LIST, factory=tuple)
    interface_name: str = field("interfaceName", STR, default="")
    mac: str = field("mac", STR, default="")
    ports: tuple[WorkloadEndpointPort, ...] = field(
        "ports", ListOf(Nested(WorkloadEndpointPort)), factory=tuple
    )
    allow_spoofed_source_prefixes: tuple[str, ...] = field(
        "allowSpoofedSourcePrefixes", STR_LIST, factory=tuple
    )
    qos_controls: JSON = field("qosControls", RAW)
    aws_elastic_ips: tuple[str, ...] = field("awsElasticIPs", STR_LIST, factory=tuple)


@register
@attrs.frozen
class WorkloadEndpoint(Resource):
    KIND = "WorkloadEndpoint"
    PLURAL = "workloadendpoints"
    NAMESPACED = True
    SPEC = WorkloadEndpointSpec
    spec: WorkloadEndpointSpec = attrs.field(factory=WorkloadEndpointSpec)


@attrs.frozen
class HostEndpointSpec(Spec):
    node: str = field("node", STR, default="")
    interface_name: str = field("interfaceName", STR, default="")
    expected_ips: tuple[str, ...] = field("expectedIPs", STR_LIST, factory=tuple)
    profiles: tuple[str, ...] = field("profiles", SHARED_STR_LIST, factory=tuple)
    ports: tuple[EndpointPort, ...] = field("ports", ListOf(Nested(EndpointPort)), factory=tuple)


@register
@attrs.frozen
class HostEndpoint(Resource):
    KIND = "HostEndpoint"
    PLURAL = "hostendpoints"
    SPEC = HostEndpointSpec
    spec: HostEndpointSpec = attrs.field(factory=HostEndpointSpec)
