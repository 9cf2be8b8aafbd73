"""The Kubernetes kinds Calico reads: namespaces and service accounts (for namespace and
service-account rules) and services with their EndpointSlices (for service rules).

Only the fields Calico uses are modelled; anything else in these objects is an error, like any
unknown field, so typos are caught rather than silently ignored.
"""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    BOOL,
    INT,
    INT_OR_STR,
    JSON,
    RAW,
    STR,
    STR_LIST,
    ListOf,
    Nested,
    Spec,
    field,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@attrs.frozen
class NamespaceSpec(Spec):
    finalizers: tuple[str, ...] = field("finalizers", STR_LIST, factory=tuple)


@attrs.frozen
class RawStatus(Spec):
    phase: str = field("phase", STR, default="")
    conditions: JSON = field("conditions", RAW)
    load_balancer: JSON = field("loadBalancer", RAW)


@register
@attrs.frozen
class Namespace(Resource):
    """Becomes profile ``kns.<name>`` whose labels (``pcns.*``) apply to its endpoints."""

    KIND = "Namespace"
    API_VERSION = "v1"
    PLURAL = "namespaces"
    SPEC = NamespaceSpec
    STATUS = RawStatus
    spec: NamespaceSpec = attrs.field(factory=NamespaceSpec)
    status: RawStatus | None = None


@attrs.frozen
class ServiceAccountBody(Spec):
    secrets: JSON = field("secrets", RAW)
    image_pull_secrets: JSON = field("imagePullSecrets", RAW)
    automount_service_account_token: bool | None = field("automountServiceAccountToken", BOOL)


@register
@attrs.frozen
class ServiceAccount(Resource):
    """Becomes profile ``ksa.<namespace>.<name>`` with ``pcsa.*`` labels."""

    KIND = "ServiceAccount"
    API_VERSION = "v1"
    PLURAL = "serviceaccounts"
    NAMESPACED = True
    SPEC = ServiceAccountBody
    BODY_AT_TOP_LEVEL = True
    spec: ServiceAccountBody = attrs.field(factory=ServiceAccountBody)


@attrs.frozen
class ServicePort(Spec):
    name: str = field("name", STR, default="")
    protocol: str = field("protocol", STR, default="")
    port: int = field("port", INT, default=0, keep_empty=True)
    target_port: int | str | None = field("targetPort", INT_OR_STR)
    node_port: int = field("nodePort", INT, default=0)
    app_protocol: str = field("appProtocol", STR, default="")


@attrs.frozen
class ServiceSpec(Spec):
    type: str = field("type", STR, default="")
    cluster_ip: str = field("clusterIP", STR, default="")
    cluster_ips: tuple[str, ...] = field("clusterIPs", STR_LIST, factory=tuple)
    external_ips: tuple[str, ...] = field("externalIPs", STR_LIST, factory=tuple)
    load_balancer_ip: str = field("loadBalancerIP", STR, default="")
    ports: tuple[ServicePort, ...] = field("ports", ListOf(Nested(ServicePort)), factory=tuple)
    selector: JSON = field("selector", RAW)
    session_affinity: str = field("sessionAffinity", STR, default="")
    external_traffic_policy: str = field("externalTrafficPolicy", STR, default="")
    internal_traffic_policy: str = field("internalTrafficPolicy", STR, default="")
    ip_families: tuple[str, ...] = field("ipFamilies", STR_LIST, factory=tuple)
    ip_family_policy: str = field("ipFamilyPolicy", STR, default="")
    # What kubectl prints and Calico does not read: carried as given.
    allocate_load_balancer_node_ports: bool | None = field("allocateLoadBalancerNodePorts", BOOL)
    external_name: str = field("externalName", STR, default="")
    health_check_node_port: int = field("healthCheckNodePort", INT, default=0)
    load_balancer_class: str = field("loadBalancerClass", STR, default="")
    load_balancer_source_ranges: tuple[str, ...] = field(
        "loadBalancerSourceRanges", STR_LIST, factory=tuple
    )
    publish_not_ready_addresses: bool | None = field("publishNotReadyAddresses", BOOL)
    session_affinity_config: JSON = field("sessionAffinityConfig", RAW)
    traffic_distribution: str = field("trafficDistribution", STR, default="")


@register
@attrs.frozen
class Service(Resource):
    KIND = "Service"
    API_VERSION = "v1"
    PLURAL = "services"
    NAMESPACED = True
    SPEC = ServiceSpec
    STATUS = RawStatus
    spec: ServiceSpec = attrs.field(factory=ServiceSpec)
    status: RawStatus | None = None


@attrs.frozen
class EndpointConditions(Spec):
    ready: bool | None = field("ready", BOOL)
    serving: bool | None = field("serving", BOOL)
    terminating: bool | None = field("terminating", BOOL)


@attrs.frozen
class SliceEndpoint(Spec):
    addresses: tuple[str, ...] = field("addresses", STR_LIST, factory=tuple, keep_empty=True)
    conditions: EndpointConditions | None = field("conditions", Nested(EndpointConditions))
    hostname: str = field("hostname", STR, default="")
    node_name: str = field("nodeName", STR, default="")
    zone: str = field("zone", STR, default="")
    target_ref: JSON = field("targetRef", RAW)
    hints: JSON = field("hints", RAW)
    deprecated_topology: JSON = field("deprecatedTopology", RAW)


@attrs.frozen
class SlicePort(Spec):
    name: str | None = field("name", STR)
    protocol: str | None = field("protocol", STR)
    port: int | None = field("port", INT)
    app_protocol: str = field("appProtocol", STR, default="")


@attrs.frozen
class EndpointSliceBody(Spec):
    address_type: str = field("addressType", STR, default="", keep_empty=True)
    endpoints: tuple[SliceEndpoint, ...] = field(
        "endpoints", ListOf(Nested(SliceEndpoint)), factory=tuple, keep_empty=True
    )
    ports: tuple[SlicePort, ...] = field(
        "ports", ListOf(Nested(SlicePort)), factory=tuple, keep_empty=True
    )


@register
@attrs.frozen
class EndpointSlice(Resource):
    """A service's members (IPs and ports), named by its ``kubernetes.io/service-name`` label."""

    KIND = "EndpointSlice"
    API_VERSION = "discovery.k8s.io/v1"
    PLURAL = "endpointslices"
    NAMESPACED = True
    SPEC = EndpointSliceBody
    BODY_AT_TOP_LEVEL = True
    spec: EndpointSliceBody = attrs.field(factory=EndpointSliceBody)

    @property
    def service_name(self) -> str:
        return self.labels.get(SERVICE_NAME_LABEL, "")
