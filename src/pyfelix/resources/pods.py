"""Kubernetes' Pod (v1) as ``kubectl get -o yaml`` prints it, status and all.

Calico reads a few of its fields (node, host networking, service account, the containers'
ports, the phase and addresses; pyfelix.resources.k8s_conversion turns a pod into its
WorkloadEndpoint). Every other field of Kubernetes' Pod is accepted and kept as it is, so a
cluster's dump loads unchanged; a field Kubernetes does not have is an error, as anywhere.
"""

from __future__ import annotations

from typing import Any

import attrs

from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    BOOL,
    INT,
    RAW,
    SHARED_STR,
    STR,
    ListOf,
    Nested,
    Spec,
    field,
)


def carried_fields(name: str, names: tuple[str, ...]) -> type[Spec]:
    """A base class holding ``names`` as free-form JSON: the Kubernetes fields Calico does
    not read (Python names are the JSON names in snake case, prefixed ``k_``)."""
    fields: dict[str, Any] = {f"k_{n}": field(n, RAW, keep_empty=True) for n in names}
    return attrs.make_class(name, fields, bases=(Spec,), frozen=True)


_ContainerRest = carried_fields(
    "_ContainerRest",
    (
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "readinessProbe",
        "resizePolicy",
        "resources",
        "restartPolicy",
        "restartPolicyRules",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "targetContainerName",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    ),
)

_PodSpecRest = carried_fields(
    "_PodSpecRest",
    (
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "securityContext",
        "serviceAccount",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    ),
)

_PodStatusRest = carried_fields(
    "_PodStatusRest",
    (
        "conditions",
        "containerStatuses",
        "ephemeralContainerStatuses",
        "extendedResourceClaimStatus",
        "hostIP",
        "hostIPs",
        "initContainerStatuses",
        "message",
        "nominatedNodeName",
        "observedGeneration",
        "qosClass",
        "reason",
        "resize",
        "resourceClaimStatuses",
        "startTime",
    ),
)


@attrs.frozen
class ContainerPort(Spec):
    name: str = field("name", STR, default="")
    container_port: int = field("containerPort", INT, default=0, keep_empty=True)
    protocol: str = field("protocol", STR, default="")
    host_port: int = field("hostPort", INT, default=0)
    host_ip: str = field("hostIP", STR, default="")


@attrs.frozen
class Container(_ContainerRest):  # type: ignore[misc,valid-type]
    name: str = field("name", STR, default="", keep_empty=True)
    ports: tuple[ContainerPort, ...] = field("ports", ListOf(Nested(ContainerPort)), factory=tuple)


@attrs.frozen
class PodSpec(_PodSpecRest):  # type: ignore[misc,valid-type]
    node_name: str = field("nodeName", SHARED_STR, default="")
    host_network: bool = field("hostNetwork", BOOL, default=False)
    service_account_name: str = field("serviceAccountName", SHARED_STR, default="")
    containers: tuple[Container, ...] = field(
        "containers", ListOf(Nested(Container)), factory=tuple
    )
    init_containers: tuple[Container, ...] = field(
        "initContainers", ListOf(Nested(Container)), factory=tuple
    )


@attrs.frozen
class PodIP(Spec):
    ip: str = field("ip", STR, default="", keep_empty=True)


@attrs.frozen
class PodStatus(_PodStatusRest):  # type: ignore[misc,valid-type]
    phase: str = field("phase", STR, default="")
    pod_ip: str = field("podIP", STR, default="")
    pod_ips: tuple[PodIP, ...] = field("podIPs", ListOf(Nested(PodIP)), factory=tuple)


@register
@attrs.frozen
class Pod(Resource):
    """Becomes the WorkloadEndpoint ``<node>-k8s-<pod>-eth0`` Calico makes of it."""

    KIND = "Pod"
    API_VERSION = "v1"
    PLURAL = "pods"
    NAMESPACED = True
    SPEC = PodSpec
    STATUS = PodStatus
    spec: PodSpec = attrs.field(factory=PodSpec)
    status: PodStatus | None = None
