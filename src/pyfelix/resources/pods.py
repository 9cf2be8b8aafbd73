"""Kubernetes' Pod (v1) as ``kubectl get -o yaml`` prints it, status and all.

Calico reads a few of its fields (node, host networking, service account, the containers'
ports, the phase and addresses; pyfelix.resources.k8s_conversion turns a pod into its
WorkloadEndpoint). Every other field of Kubernetes' Pod is accepted and left out (``UNREAD``),
so a cluster's dump loads unchanged; a field Kubernetes does not have is an error, as
anywhere. Kept, those fields were nine tenths of a dumped pod (3 KB of JSON, 18 KB as Python
objects) and of a 250,000-pod dry-run's time and memory (bench/RESULTS.md).
"""

from __future__ import annotations

import attrs

from pyfelix.resources.meta import Resource, register
from pyfelix.resources.schema import (
    BOOL,
    INT,
    SHARED_STR,
    STR,
    ListOf,
    Nested,
    Spec,
    field,
)

#: A container's fields Calico never reads.
CONTAINER_UNREAD = frozenset(
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
    )
)

#: A pod spec's fields Calico never reads.
POD_SPEC_UNREAD = frozenset(
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
    )
)

#: A pod status's fields Calico never reads.
POD_STATUS_UNREAD = frozenset(
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
    )
)


@attrs.frozen
class ContainerPort(Spec):
    name: str = field("name", STR, default="")
    container_port: int = field("containerPort", INT, default=0, keep_empty=True)
    protocol: str = field("protocol", STR, default="")
    host_port: int = field("hostPort", INT, default=0)
    host_ip: str = field("hostIP", STR, default="")


@attrs.frozen
class Container(Spec):
    UNREAD = CONTAINER_UNREAD
    name: str = field("name", STR, default="", keep_empty=True)
    ports: tuple[ContainerPort, ...] = field("ports", ListOf(Nested(ContainerPort)), factory=tuple)


@attrs.frozen
class PodSpec(Spec):
    UNREAD = POD_SPEC_UNREAD
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
class PodStatus(Spec):
    UNREAD = POD_STATUS_UNREAD
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
