"""Kubernetes objects as Calico's Kubernetes datastore turns them into Calico's own (Calico
3.32 and master: libcalico-go/lib/backend/k8s/conversion).

A Pod becomes the WorkloadEndpoint ``<node>-k8s-<pod>-eth0`` in its namespace: its labels
plus Calico's namespace, orchestrator and service-account labels, profiles ``kns.<ns>`` and
``ksa.<ns>.<sa>``, addresses from its status (or Calico's annotations), the veth name
Calico's CNI plugin gives it, its named container ports. Host-network and unscheduled pods
are not endpoints; a finished pod has no addresses.

A NetworkPolicy becomes the NetworkPolicy of the same name and namespace in tier ``default``
at order 1000, its pod selector restricted to Kubernetes pods; the rest of pyfelix then
treats it as the Calico policy it is (the kind stays KubernetesNetworkPolicy, so Felix's chain
names ``cali-pi-knp/<namespace>/<name>`` and explanations name the Kubernetes object).

The conversion is a pure function of the object; what cannot be converted (a port Calico
cannot parse) is left out with its rule, as Calico drops such a rule, and validation
(pyfelix.validation) reports it by name first.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence

import attrs

from pyfelix.errors import PyfelixError
from pyfelix.ipnet import canonical_network, parse_network
from pyfelix.model import NAMESPACE_LABEL, ORCHESTRATOR_LABEL, SERVICE_ACCOUNT_LABEL
from pyfelix.resources.cluster import (
    Node,
    NodeAddress,
    NodeBGPSpec,
    NodeInterface,
    NodeSpec,
    NodeStatus,
    NodeWireguardSpec,
    OrchRef,
)
from pyfelix.resources.endpoints import (
    IPNAT,
    WorkloadEndpoint,
    WorkloadEndpointPort,
    WorkloadEndpointSpec,
)
from pyfelix.resources.k8s_node import KubernetesNode
from pyfelix.resources.k8s_policy import (
    AdminEgressRule,
    AdminIngressRule,
    AdminNetworkPolicy,
    AdminPeer,
    AdminPolicyPort,
    BaselineAdminNetworkPolicy,
    ClusterEgressRule,
    ClusterIngressRule,
    ClusterPeer,
    ClusterProtocol,
    ClusterSubject,
    KubernetesClusterNetworkPolicy,
    KubernetesNetworkPolicy,
    KubernetesNetworkPolicySpec,
    LabelSelector,
    NetworkPolicyPeer,
    NetworkPolicyPort,
)
from pyfelix.resources.meta import ObjectMeta, Resource
from pyfelix.resources.pods import Pod
from pyfelix.resources.policy import (
    GlobalNetworkPolicy,
    GlobalNetworkPolicySpec,
    NetworkPolicy,
    NetworkPolicySpec,
)
from pyfelix.resources.rules import EntityRule, Rule, RuleMetadata
from pyfelix.resources.schema import JSON
from pyfelix.values import FrozenMap, Port

#: Every selector Calico makes from a pod selector starts here: only Kubernetes pods.
PODS_ONLY = f"{ORCHESTRATOR_LABEL} == 'k8s'"
KNP_TIER = "default"
KNP_ORDER = 1000.0


class ConversionError(PyfelixError, ValueError):
    """A part of a Kubernetes object Calico cannot convert (its rule is left out)."""


def k8s_selector(selector: LabelSelector | None, *, pods: bool) -> str:
    """A LabelSelector as Calico writes it: for pods always with the Kubernetes-pods term;
    for namespaces ``all()`` when empty and "" when absent (the policy's own namespace).
    matchLabels sorted by key, then matchExpressions in the order given."""
    terms = [PODS_ONLY] if pods else []
    if selector is None:
        return " && ".join(terms)
    if not pods and not selector.match_labels and not selector.match_expressions:
        return "all()"
    for key in sorted(selector.match_labels):
        terms.append(f"{key} == '{selector.match_labels[key]}'")
    for expression in selector.match_expressions:
        values = "', '".join(expression.values)
        if expression.operator == "In":
            terms.append(f"{expression.key} in {{ '{values}' }}")
        elif expression.operator == "NotIn":
            terms.append(f"{expression.key} not in {{ '{values}' }}")
        elif expression.operator == "Exists":
            terms.append(f"has({expression.key})")
        elif expression.operator == "DoesNotExist":
            terms.append(f"! has({expression.key})")
    return " && ".join(terms)


def _network(cidr: str) -> str:
    """Go's ParseCIDR written back: the masked network."""
    try:
        return str(ipaddress.ip_network(cidr, strict=False))
    except ValueError as exc:
        raise ConversionError(f"invalid CIDR {cidr!r}") from exc


def _peer(peer: NetworkPolicyPeer | None) -> EntityRule:
    if peer is None:
        return EntityRule()
    if peer.ip_block is not None:
        return EntityRule(
            nets=(_network(peer.ip_block.cidr),),
            not_nets=tuple(_network(cidr) for cidr in peer.ip_block.except_),
        )
    return EntityRule(
        selector=k8s_selector(peer.pod_selector, pods=True),
        namespace_selector=k8s_selector(peer.namespace_selector, pods=False),
    )


def _port(port: NetworkPolicyPort) -> tuple[str, Port | None]:
    """(protocol, port) of one port entry; port None means every port of the protocol."""
    protocol = (port.protocol or "TCP").upper()
    if port.port is None:
        return protocol, None
    text = str(port.port)
    if port.end_port is not None:
        text = f"{text}:{port.end_port}"
    try:
        return protocol, Port.parse(text)
    except ValueError as exc:
        raise ConversionError(str(exc)) from exc


def _by_protocol(entries: Sequence[tuple[str | None, Port | None]]) -> dict[str, list[Port] | None]:
    """Calico's grouping of a rule's ports by protocol (its unpack of ports): each protocol's
    ports, None for all of them; no entries, or one with neither protocol nor port, is any
    protocol and port (key "")."""
    grouped: dict[str, list[Port] | None] = {}
    for protocol, port in entries or ((None, None),):
        if protocol is None:
            return {"": None}
        if port is None:
            grouped[protocol] = None
        elif protocol not in grouped:
            grouped[protocol] = [port]
        elif (known := grouped[protocol]) is not None:
            known.append(port)
    return grouped


def simplify_ports(ports: Sequence[Port]) -> tuple[Port, ...]:
    """Calico's SimplifyPorts: named ports first, then numbers and ranges merged into the
    fewest ranges, in order; left as given when there is nothing to merge."""
    if len(ports) <= 1:
        return tuple(ports)
    named = [p for p in ports if p.is_named]
    numbers = sorted(
        {n for p in ports if not p.is_named for n in range(p.min_port, p.max_port + 1)}
    )
    if len(numbers) <= 1:
        return tuple(ports)
    merged: list[Port] = []
    start = previous = numbers[0]
    for number in numbers[1:]:
        if number != previous + 1:
            merged.append(Port(start, previous))
            start = number
        previous = number
    merged.append(Port(start, previous))
    return (*named, *merged)


def _rules(
    peers: Sequence[NetworkPolicyPeer], ports: Sequence[NetworkPolicyPort], ingress: bool
) -> list[Rule]:
    """One Kubernetes rule as Calico's: a rule per protocol (sorted) and peer (in order)."""
    by_protocol = _by_protocol([_port(port) for port in ports])
    sides = [_peer(p) for p in peers] or [_peer(None)]
    rules = []
    for protocol in sorted(by_protocol):
        numbers = by_protocol[protocol]
        matched = simplify_ports(numbers) if numbers else ()
        for side in sides:
            if ingress:
                source, destination = side, EntityRule(ports=matched)
            else:
                source, destination = EntityRule(), attrs.evolve(side, ports=matched)
            rules.append(
                Rule(
                    action="Allow",
                    protocol=protocol or None,
                    source=source,
                    destination=destination,
                )
            )
    return rules


def _converted_rules(
    rules: Sequence[tuple[Sequence[NetworkPolicyPeer], Sequence[NetworkPolicyPort]]],
    ingress: bool,
) -> tuple[Rule, ...]:
    out: list[Rule] = []
    for peers, ports in rules:
        try:
            out += _rules(peers, ports, ingress)
        except ConversionError:
            continue  # Calico drops the rule; validation named it
    return tuple(out)


def network_policy(policy: KubernetesNetworkPolicy) -> NetworkPolicy:
    """The Calico NetworkPolicy Calico makes of a Kubernetes one (same name and namespace)."""
    converted = _converted_spec(policy.spec)
    metadata = ObjectMeta(
        name=policy.name,
        namespace=policy.namespace,
        uid=policy.metadata.uid,
        resource_version=policy.metadata.resource_version,
        creation_timestamp=policy.metadata.creation_timestamp,
    )
    return NetworkPolicy(metadata=metadata, spec=converted)


#: How many Kubernetes NetworkPolicy specs are kept converted (a cluster repeats a few, such
#: as a default deny, in every namespace).
SPEC_CACHE = 4096


@functools.lru_cache(maxsize=SPEC_CACHE)
def _converted_spec(spec: KubernetesNetworkPolicySpec) -> NetworkPolicySpec:
    """A Kubernetes NetworkPolicy's spec as Calico's: it does not depend on the policy's
    namespace or name (the processors scope the selectors), so equal specs share it."""
    types = [t for t in ("Ingress", "Egress") if t in spec.policy_types] or ["Ingress"]
    return NetworkPolicySpec(
        tier=KNP_TIER,
        order=KNP_ORDER,
        selector=k8s_selector(spec.pod_selector, pods=True),
        types=tuple(types),
        ingress=_converted_rules([(r.peers, r.ports) for r in spec.ingress], ingress=True),
        egress=_converted_rules([(r.peers, r.ports) for r in spec.egress], ingress=False),
    )


# ------------------------------------------------------------------------ pods

POD_IP_ANNOTATION = "cni.projectcalico.org/podIP"
POD_IPS_ANNOTATION = "cni.projectcalico.org/podIPs"
AWS_POD_IPS_ANNOTATION = "vpc.amazonaws.com/pod-ips"
CONTAINER_ID_ANNOTATION = "cni.projectcalico.org/containerID"
FLOATING_IPS_ANNOTATION = "cni.projectcalico.org/floatingIPs"
SOURCE_PREFIXES_ANNOTATION = "cni.projectcalico.org/allowedSourcePrefixes"
FINISHED_PHASES = frozenset({"Failed", "Succeeded", "Completed"})
PORT_PROTOCOLS = {"": "TCP", "TCP": "TCP", "UDP": "UDP", "SCTP": "SCTP"}


def workload_endpoint_name(node: str, pod: str, endpoint: str = "eth0") -> str:
    """Calico's ``<node>-k8s-<pod>-<endpoint>``, each part's dashes doubled."""
    return "-".join(part.replace("-", "--") for part in (node, "k8s", pod, endpoint))


def veth_name(namespace: str, pod: str) -> str:
    """The host side of the pod's veth as Calico's CNI plugin names it: the first prefix of
    FELIX_INTERFACEPREFIX (cali) and 11 hex digits of SHA-1 over ``<namespace>.<pod>``."""
    prefix = os.environ.get("FELIX_INTERFACEPREFIX", "").split(",")[0] or "cali"
    digest = hashlib.sha1(f"{namespace}.{pod}".encode(), usedforsecurity=False).hexdigest()
    return prefix + digest[:11]


def _finished(pod: Pod) -> bool:
    """Done, or being deleted with its address released: such a pod has no addresses."""
    if pod.status is not None and pod.status.phase in FINISHED_PHASES:
        return True
    annotations = pod.metadata.annotations
    released = annotations.get(POD_IP_ANNOTATION) == "" or (
        annotations.get(AWS_POD_IPS_ANNOTATION) == ""
    )
    return bool(pod.metadata.deletion_timestamp) and released


def pod_ip_source(pod: Pod) -> tuple[tuple[str | int, ...], list[str]]:
    """Where Calico takes a pod's addresses from, as libcalico-go's ``getPodIPs`` does
    (``ip_source`` of its status and annotations)."""
    status = pod.status
    if status is None:
        return ip_source((), "", pod.metadata.annotations)
    return ip_source([ip.ip for ip in status.pod_ips], status.pod_ip, pod.metadata.annotations)


def ip_source(
    pod_ips: Sequence[str], pod_ip: str, annotations: Mapping[str, str]
) -> tuple[tuple[str | int, ...], list[str]]:
    """The first of status.podIPs, status.podIP, Calico's plural and singular annotations and
    AWS's that is not empty, taken whole (the field's path, and its entries); ``((), [])``
    for a pod without any. The sources after the one taken are never read."""
    if pod_ips:
        return ("status", "podIPs"), list(pod_ips)
    if pod_ip:
        return ("status", "podIP"), [pod_ip]
    for key, plural in (
        (POD_IPS_ANNOTATION, True),
        (POD_IP_ANNOTATION, False),
        (AWS_POD_IPS_ANNOTATION, True),
    ):
        text = annotations.get(key, "")
        if text:
            return ("metadata", "annotations", key), text.split(",") if plural else [text]
    return (), []


def pod_addresses(pod: Pod) -> tuple[str, ...]:
    """The pod's addresses (``pod_ip_source``), each a CIDR or an IP as Calico's CNI plugin
    and the kubelet write them, as networks: ``10.244.36.68`` is ``10.244.36.68/32``, and a
    CIDR keeps its prefix with its host bits cleared, as Go's ``net.ParseCIDR`` gives it."""
    return tuple(_network_of(a) for a in pod_ip_source(pod)[1])


def _network_of(address: str) -> str:
    try:
        return canonical_network(address)
    except ValueError as exc:
        raise ConversionError(f"invalid pod IP {address!r}") from exc


def _json_list(text: str, what: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConversionError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConversionError(f"{what} must be a JSON list of strings")
    return value


def _ports(pod: Pod) -> tuple[WorkloadEndpointPort, ...]:
    """Named (or host-mapped) container ports, containers before init containers."""
    ports = []
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        for port in container.ports:
            protocol = PORT_PROTOCOLS.get(port.protocol)
            if not port.container_port or not (port.host_port or port.name) or not protocol:
                continue
            ports.append(
                WorkloadEndpointPort(
                    name=port.name,
                    protocol=protocol,
                    port=port.container_port,
                    host_port=port.host_port,
                    host_ip=port.host_ip,
                )
            )
    return tuple(ports)


def _floating_ips(pod: Pod, networks: Sequence[str]) -> tuple[IPNAT, ...]:
    text = pod.metadata.annotations.get(FLOATING_IPS_ANNOTATION)
    if not text:
        return ()
    nats = []
    for external in _json_list(text, FLOATING_IPS_ANNOTATION):
        family = ":" in external
        internal = next((n for n in networks if (":" in n) == family), "")
        if not internal:
            raise ConversionError(f"no pod IP of the family of floating IP {external!r}")
        nats.append(IPNAT(internal.split("/")[0], external.split("/")[0]))
    return tuple(nats)


def _addressing(pod: Pod) -> tuple[tuple[str, ...], tuple[IPNAT, ...], tuple[str, ...]] | None:
    """What of a pod's conversion can fail (ConversionError): its addresses, floating IPs
    and allowed source prefixes; None for a pod that is no endpoint."""
    if pod.spec.host_network or not pod.spec.node_name:
        return None
    networks = () if _finished(pod) else pod_addresses(pod)
    nats = _floating_ips(pod, networks)
    prefixes = pod.metadata.annotations.get(SOURCE_PREFIXES_ANNOTATION)
    allowed = tuple(_json_list(prefixes, SOURCE_PREFIXES_ANNOTATION) if prefixes else ())
    return networks, nats, allowed


def check_pod_conversion(pod: Pod) -> None:
    """Raise the ConversionError ``workload_endpoint(pod)`` would, without building the
    endpoint (validation's question, asked of every pod of a dump)."""
    _addressing(pod)


def workload_endpoint(pod: Pod) -> WorkloadEndpoint | None:
    """The WorkloadEndpoint Calico's Kubernetes datastore makes of a pod; None for a pod that
    is not one (host networking, not scheduled yet). A finished pod has no addresses, so
    Felix leaves it out."""
    addressing = _addressing(pod)
    if addressing is None:
        return None
    networks, nats, allowed = addressing
    spec = pod.spec
    namespace, account = pod.namespace, spec.service_account_name
    annotations = pod.metadata.annotations
    endpoint_spec = WorkloadEndpointSpec(
        orchestrator="k8s",
        node=spec.node_name,
        pod=pod.name,
        endpoint="eth0",
        container_id=annotations.get(CONTAINER_ID_ANNOTATION, ""),
        service_account_name=account,
        ip_networks=networks,
        ip_nats=nats,
        profiles=endpoint_profiles(namespace, account),
        interface_name=veth_name(namespace, pod.name),
        ports=_ports(pod),
        allow_spoofed_source_prefixes=allowed,
        qos_controls=_qos_controls(annotations),
    )
    metadata = ObjectMeta(
        name=workload_endpoint_name(spec.node_name, pod.name),
        namespace=namespace,
        labels=FrozenMap(endpoint_labels(pod.labels, namespace, account)),
        uid=pod.metadata.uid,
        resource_version=pod.metadata.resource_version,
        creation_timestamp=pod.metadata.creation_timestamp,
        generate_name=pod.metadata.generate_name,
    )
    return WorkloadEndpoint(metadata=metadata, spec=endpoint_spec)


def endpoint_labels(labels: Mapping[str, str], namespace: str, account: str) -> dict[str, str]:
    """A pod's endpoint's labels: the pod's, with Calico's namespace and orchestrator labels
    and its service account's (a name Kubernetes' label values can hold)."""
    out = dict(labels)
    out[NAMESPACE_LABEL] = namespace
    out[ORCHESTRATOR_LABEL] = "k8s"
    if 0 < len(account) < 63:
        out[SERVICE_ACCOUNT_LABEL] = account
    return out


def endpoint_profiles(namespace: str, account: str) -> tuple[str, ...]:
    """A pod's endpoint's profiles: its namespace's, then its service account's."""
    return (f"kns.{namespace}", f"ksa.{namespace}.{account}") if account else (f"kns.{namespace}",)


#: The pod annotations Calico's converter reads into the endpoint's qosControls, and the
#: field each sets (the Kubernetes bandwidth plugin's two, then Calico's own).
QOS_ANNOTATIONS = {
    "kubernetes.io/ingress-bandwidth": "ingressBandwidth",
    "kubernetes.io/egress-bandwidth": "egressBandwidth",
    **{
        f"qos.projectcalico.org/{name}": name
        for name in (
            "ingressBandwidth",
            "egressBandwidth",
            "ingressBurst",
            "egressBurst",
            "ingressPeakrate",
            "egressPeakrate",
            "ingressMinburst",
            "egressMinburst",
            "ingressPacketRate",
            "egressPacketRate",
            "ingressPacketBurst",
            "egressPacketBurst",
            "ingressMaxConnections",
            "egressMaxConnections",
        )
    },
    "qos.projectcalico.org/dscp": "dscp",
}


def _qos_controls(annotations: Mapping[str, str]) -> JSON:
    """The QoS controls the pod's annotations ask for, as given (None: none): pyfelix does
    not program them, and names each in a warning (syncer.processors)."""
    found = {
        field: annotations[key] for key, field in QOS_ANNOTATIONS.items() if key in annotations
    }
    return FrozenMap(found) if found else None


# ------------------------------------------------------------------------ cluster-scoped

#: ClusterNetworkPolicy's tiers as Calico's (3.32): both end in Pass.
CLUSTER_TIERS = {"Admin": "kube-admin", "Baseline": "kube-baseline"}
CLUSTER_ACTIONS = {"Accept": "Allow", "Deny": "Deny", "Pass": "Pass"}


def _cluster_protocol(protocol: ClusterProtocol) -> tuple[str | None, Port | None]:
    """(protocol, port) of one entry; (None, None) for an empty one (anything at all)."""
    if protocol.destination_named_port is not None:
        # No protocol: Felix matches the name under any protocol.
        return "", Port(name=protocol.destination_named_port)
    for name, ports in (("TCP", protocol.tcp), ("UDP", protocol.udp), ("SCTP", protocol.sctp)):
        if ports is None:
            continue
        port = ports.destination_port
        if port is None:
            return name, None
        if port.number is not None:
            return name, Port(port.number, port.number)
        if port.range is not None:
            return name, Port(port.range.start, port.range.end)
        return name, None
    return None, None


def _cluster_rules(
    action: str,
    peers: Sequence[ClusterPeer | AdminPeer],
    entries: Sequence[tuple[str | None, Port | None]],
    rule_name: str,
    ingress: bool,
) -> list[Rule]:
    """One cluster-scoped rule as Calico's: a rule per protocol (sorted; a named port has
    none) and peer (in order). ``entries`` are (protocol, port) pairs; (None, None) is any."""
    by_protocol = _by_protocol(entries)
    metadata = RuleMetadata(FrozenMap({"name": rule_name})) if rule_name else None
    rules = []
    for protocol_name in sorted(by_protocol):
        listed = by_protocol[protocol_name]
        ports = simplify_ports(listed) if listed else ()
        for peer in peers:
            selector = namespace_selector = ""
            nets: tuple[str, ...] = ()
            if peer.namespaces is not None:
                namespace_selector = k8s_selector(peer.namespaces, pods=False)
            if peer.pods is not None:
                selector = k8s_selector(peer.pods.pod_selector, pods=True)
                namespace_selector = k8s_selector(peer.pods.namespace_selector, pods=False)
            if peer.networks and not ingress:
                nets = tuple(_network(n) for n in peer.networks)
            if not (peer.namespaces is not None or peer.pods is not None or nets):
                raise ConversionError("a peer sets none of the supported fields")
            if isinstance(peer, AdminPeer) and (peer.nodes is not None or peer.domain_names):
                raise ConversionError("node and domain name peers are not supported")
            side = EntityRule(selector=selector, namespace_selector=namespace_selector, nets=nets)
            rules.append(
                Rule(
                    action=action,
                    protocol=protocol_name or None,
                    source=side if ingress else EntityRule(),
                    destination=EntityRule(ports=ports)
                    if ingress
                    else attrs.evolve(side, ports=ports),
                    metadata=metadata,
                )
            )
    return rules


def _admin_port(port: AdminPolicyPort) -> tuple[str | None, Port | None]:
    """An AdminNetworkPolicy port; a named port was never supported (Calico 3.29-3.31 read
    it as any protocol and port, which is kept: that is what those nodes enforced)."""
    if port.port_number is not None:
        number = port.port_number
        return (number.protocol or "TCP").upper(), Port(number.port, number.port)
    if port.port_range is not None:
        ranged = port.port_range
        return (ranged.protocol or "TCP").upper(), Port(ranged.start, ranged.end)
    return None, None


ClusterRule = ClusterIngressRule | ClusterEgressRule | AdminIngressRule | AdminEgressRule


def _entries(rule: ClusterRule) -> list[tuple[str | None, Port | None]]:
    if isinstance(rule, ClusterIngressRule | ClusterEgressRule):
        return [_cluster_protocol(p) for p in rule.protocols]
    return [_admin_port(p) for p in rule.ports or ()]


def _cluster_direction(
    rules: Sequence[ClusterRule],
    ingress: bool,
    actions: Mapping[str, str],
    fail_closed: Collection[str],
) -> tuple[Rule, ...]:
    """Each rule converted; one that cannot be is left out, or (an action in
    ``fail_closed``) replaced by a bare Deny, as Calico does."""
    out: list[Rule] = []
    for rule in rules:
        action = actions.get(rule.action)
        try:
            if action is not None:
                out += _cluster_rules(action, rule.peers, _entries(rule), rule.name, ingress)
                continue
        except ConversionError:
            pass
        if rule.action in fail_closed:
            out.append(Rule(action="Deny"))
    return tuple(out)


def _subject_selectors(subject: ClusterSubject) -> tuple[str, str] | None:
    """(selector, namespaceSelector) of a subject; None when it has none."""
    if subject.namespaces is not None:
        return k8s_selector(None, pods=True), k8s_selector(subject.namespaces, pods=False)
    if subject.pods is not None:
        return (
            k8s_selector(subject.pods.pod_selector, pods=True),
            k8s_selector(subject.pods.namespace_selector, pods=False),
        )
    return None


def _global_policy(
    resource: Resource,
    *,
    name: str,
    tier: str,
    order: float,
    subject: tuple[str, str],
    ingress: tuple[Rule, ...],
    egress: tuple[Rule, ...],
) -> GlobalNetworkPolicy:
    selector, namespace_selector = subject
    types = (("Ingress",) if ingress else ()) + (("Egress",) if egress else ())
    metadata = ObjectMeta(
        name=name,
        uid=resource.metadata.uid,
        resource_version=resource.metadata.resource_version,
        creation_timestamp=resource.metadata.creation_timestamp,
    )
    spec = GlobalNetworkPolicySpec(
        tier=tier,
        order=order,
        namespace_selector=namespace_selector,
        selector=selector,
        ingress=ingress,
        egress=egress,
        types=types,
    )
    return GlobalNetworkPolicy(metadata=metadata, spec=spec)


ADMIN_TIER = "adminnetworkpolicy"
BASELINE_TIER = "baselineadminnetworkpolicy"
ADMIN_PREFIX = f"kanp.{ADMIN_TIER}."
BASELINE_PREFIX = f"kbanp.{BASELINE_TIER}."
ADMIN_ACTIONS = {"Allow": "Allow", "Deny": "Deny", "Pass": "Pass"}
BASELINE_ACTIONS = {"Allow": "Allow", "Deny": "Deny"}
#: BaselineAdminNetworkPolicy's order: fixed, as Calico 3.30-3.31 set it.
BASELINE_ORDER = 1000.0


def admin_network_policy(policy: AdminNetworkPolicy) -> GlobalNetworkPolicy | None:
    """Calico 3.29-3.31's conversion: ``kanp.adminnetworkpolicy.<name>`` in tier
    adminnetworkpolicy, order its priority; Allow, Deny and Pass as they are."""
    subject = _subject_selectors(policy.spec.subject)
    if subject is None:
        return None
    fail = ("Deny", "Pass")
    return _global_policy(
        policy,
        name=ADMIN_PREFIX + policy.name,
        tier=ADMIN_TIER,
        order=float(policy.spec.priority),
        subject=subject,
        ingress=_cluster_direction(policy.spec.ingress, True, ADMIN_ACTIONS, fail),
        egress=_cluster_direction(policy.spec.egress, False, ADMIN_ACTIONS, fail),
    )


def baseline_admin_network_policy(
    policy: BaselineAdminNetworkPolicy,
) -> GlobalNetworkPolicy | None:
    """``kbanp.baselineadminnetworkpolicy.<name>`` in tier baselineadminnetworkpolicy at
    order 1000; Allow and Deny (a failed Deny rule fails closed)."""
    subject = _subject_selectors(policy.spec.subject)
    if subject is None:
        return None
    fail = ("Deny",)
    return _global_policy(
        policy,
        name=BASELINE_PREFIX + policy.name,
        tier=BASELINE_TIER,
        order=BASELINE_ORDER,
        subject=subject,
        ingress=_cluster_direction(policy.spec.ingress, True, BASELINE_ACTIONS, fail),
        egress=_cluster_direction(policy.spec.egress, False, BASELINE_ACTIONS, fail),
    )


def cluster_network_policy(policy: KubernetesClusterNetworkPolicy) -> GlobalNetworkPolicy | None:
    """The Calico policy Calico makes of a ClusterNetworkPolicy: same name, tier kube-admin or
    kube-baseline, order its priority; None (no policy) for an unknown tier or no subject."""
    spec = policy.spec
    tier = CLUSTER_TIERS.get(spec.tier)
    subject = _subject_selectors(spec.subject)
    if tier is None or subject is None:
        return None
    fail = ("Deny", "Pass")
    return _global_policy(
        policy,
        name=policy.name,
        tier=tier,
        order=float(spec.priority),
        subject=subject,
        ingress=_cluster_direction(spec.ingress, True, CLUSTER_ACTIONS, fail),
        egress=_cluster_direction(spec.egress, False, CLUSTER_ACTIONS, fail),
    )


# ------------------------------------------------------------------------ nodes

#: What calico-node writes on a v1 Node (libcalico-go's k8s backend, resources/node.go).
NODE_ANNOTATION = "projectcalico.org/"
NODE_LABELS_ANNOTATION = "projectcalico.org/labels"
NODE_ANNOTATIONS_ANNOTATION = "projectcalico.org/annotations"
WIREGUARD_KEY_ANNOTATION = "projectcalico.org/WireguardPublicKey"
WIREGUARD_KEY_V6_ANNOTATION = "projectcalico.org/WireguardPublicKeyV6"
_MAC_GROUPS = {6, 8, 20}


def _cidr_of_version(text: str, version: int) -> bool:
    """libcalico-go's ValidateCIDRv4/v6: an IP or CIDR of that family."""
    try:
        return parse_network(text).version == version
    except ValueError:
        return False


def _network_of_version(text: str, version: int) -> bool:
    """ValidateIPv4Network/IPv6Network: an IP, or a CIDR naming its network address."""
    try:
        network = parse_network(text)
    except ValueError:
        return False
    return network.version == version and str(network.network_address) == text.partition("/")[0]


def _mac(text: str) -> bool:
    """Go's net.ParseMAC: 6, 8 or 20 bytes as hex pairs split by ``:`` or ``-``, or as
    groups of four hex digits split by ``.``."""
    for separator, width in ((":", 2), ("-", 2), (".", 4)):
        parts = text.split(separator)
        if len(parts) > 1:
            hexes = all(
                len(p) == width and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts
            )
            return hexes and len(parts) * width // 2 in _MAC_GROUPS
    return False


def _as_number(text: str) -> int | None:
    """numorstring.ASNumberFromString: a 32-bit number, or the ``high.low`` dotted form."""
    high, dot, low = text.partition(".")
    try:
        if not dot:
            value = int(text, 10)
            return value if text.isdigit() and value < 1 << 32 else None
        if high.isdigit() and low.isdigit() and int(high) < 1 << 16 and int(low) < 1 << 16:
            return (int(high) << 16) + int(low)
    except ValueError:
        pass
    return None


def _json_map(text: str | None) -> dict[str, str] | None:
    """A JSON object of strings, or None (unset, or not such an object: ignored, as Calico
    logs and ignores it)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return value
    return None


def _interfaces(text: str | None) -> tuple[NodeInterface, ...]:
    """The ``projectcalico.org/Interfaces`` annotation: a JSON list of names and addresses
    (addresses that are not IPs dropped; the whole ignored if it is not such a list)."""
    if not text:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(value, list):
        return ()
    interfaces = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name", ""), str):
            return ()
        addresses = [a for a in item.get("addresses") or () if isinstance(a, str)]
        kept = tuple(a for a in addresses if _cidr_of_version(a, 4) or _cidr_of_version(a, 6))
        interfaces.append(NodeInterface(name=item.get("name", ""), addresses=kept))
    return tuple(interfaces)


def pod_cidr_tunnel_address(node: KubernetesNode) -> str:
    """The tunnel address a host-local IPAM node has: its pod CIDR's first host address
    (10.244.1.0/24 gives 10.244.1.1), IPv4 only, as libcalico-go's static tunnel address."""
    try:
        network = ipaddress.ip_network(node.spec.pod_cidr, strict=False)
    except ValueError:
        return ""
    if network.version != 4 or network.num_addresses < 2:
        return ""
    return str(network.network_address + 1)


def calico_node(node: KubernetesNode, pod_cidr: bool = False) -> Node:
    """The Calico Node libcalico-go's Kubernetes datastore makes of a v1 Node (K8sNodeToCalico).
    With Calico IPAM tunnel addresses come from the annotations; with ``pod_cidr`` (usePodCIDR,
    host-local IPAM) the IPIP address, and the WireGuard one of a node with a WireGuard key,
    are the pod CIDR's first address instead. VXLAN addresses come from annotations either way.

    Its labels are those of the ``projectcalico.org/labels`` annotation with the Node's own
    laid over them; each address annotation is taken only when it is valid, as Calico ignores
    an invalid one (logging it)."""
    annotations = node.metadata.annotations
    static = pod_cidr and bool(node.spec.pod_cidr)
    tunnel = pod_cidr_tunnel_address(node) if static else ""
    has_key = bool(annotations.get(WIREGUARD_KEY_ANNOTATION))

    def annotation(suffix: str, valid: Callable[[str], bool]) -> str:
        value = annotations.get(NODE_ANNOTATION + suffix, "")
        return value if value and valid(value) else ""

    labels = _json_map(annotations.get(NODE_LABELS_ANNOTATION)) or {}
    labels.update(node.labels)
    as_text = annotations.get(NODE_ANNOTATION + "ASNumber")
    bgp = NodeBGPSpec(
        as_number=_as_number(as_text) if as_text is not None else None,
        ipv4_address=annotation("IPv4Address", lambda v: _cidr_of_version(v, 4)),
        ipv6_address=annotation("IPv6Address", lambda v: _cidr_of_version(v, 6)),
        ipv4_ipip_tunnel_addr=tunnel
        if static
        else annotation("IPv4IPIPTunnelAddr", lambda v: _network_of_version(v, 4)),
        route_reflector_cluster_id=annotation(
            "RouteReflectorClusterID", lambda v: _network_of_version(v, 4)
        ),
    )
    wireguard = NodeWireguardSpec(
        interface_ipv4_address=(tunnel if has_key else "")
        if static
        else annotation("IPv4WireguardInterfaceAddr", lambda v: _network_of_version(v, 4)),
        interface_ipv6_address=annotation(
            "IPv6WireguardInterfaceAddr", lambda v: _network_of_version(v, 6)
        ),
    )
    addresses = [NodeAddress(a, "CalicoNodeIP") for a in (bgp.ipv4_address, bgp.ipv6_address) if a]
    k8s_status = node.status
    for address in k8s_status.addresses if k8s_status is not None else ():
        if address.type in ("InternalIP", "ExternalIP"):
            addresses.append(NodeAddress(address.address, address.type))
    spec = NodeSpec(
        bgp=bgp if bgp != NodeBGPSpec() else None,
        ipv4_vxlan_tunnel_addr=annotation(
            "IPv4VXLANTunnelAddr", lambda v: _network_of_version(v, 4)
        ),
        vxlan_tunnel_mac_addr=annotation("VXLANTunnelMACAddr", _mac),
        ipv6_vxlan_tunnel_addr=annotation(
            "IPv6VXLANTunnelAddr", lambda v: _network_of_version(v, 6)
        ),
        vxlan_tunnel_mac_addr_v6=annotation("VXLANTunnelMACAddrV6", _mac),
        orch_refs=(OrchRef(node_name=node.name, orchestrator="k8s"),),
        wireguard=wireguard if wireguard != NodeWireguardSpec() else None,
        addresses=tuple(addresses),
        interfaces=_interfaces(annotations.get(NODE_ANNOTATION + "Interfaces")),
    )
    status = NodeStatus(
        wireguard_public_key=annotations.get(WIREGUARD_KEY_ANNOTATION, ""),
        wireguard_public_key_v6=annotations.get(WIREGUARD_KEY_V6_ANNOTATION, ""),
        pod_cidrs=node.spec.pod_cidrs,
    )
    metadata = ObjectMeta(
        name=node.name,
        labels=FrozenMap(labels),
        annotations=FrozenMap(_json_map(annotations.get(NODE_ANNOTATIONS_ANNOTATION)) or {}),
        uid=node.metadata.uid,
        resource_version=node.metadata.resource_version,
        creation_timestamp=node.metadata.creation_timestamp,
    )
    return Node(metadata=metadata, spec=spec, status=status if status != NodeStatus() else None)
