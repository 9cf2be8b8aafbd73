"""Drive the whole calculation graph from datastore states into a strict fake dataplane; and
the recorder and resource builders the calculators' state tables share (each calculator
writes to a recorder implementing its output interface, calc/outputs.py, so the tables state
the content, not only that two runs agree)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.graph import CalcGraph
from pyfelix.calc.pipeline import Pipeline, build_pipeline
from pyfelix.resources import Resource, load_paths, load_text
from pyfelix.syncer.api import SyncStatus, Update
from pyfelix.syncer.processors import Converter
from pyfelix.validation import ValidationContext
from pyfelix.values import FrozenMap
from tests.conftest import REPO
from tests.fake_dataplane import StrictDataplane

Identity = tuple[str, str, str]
State = Mapping[Identity, Resource]


def example_state() -> dict[Identity, Resource]:
    result = load_paths([REPO / "examples"])
    assert result.ok, result.problems
    return {item.key: item.resource for item in result.resources}


def identity(resource: Resource) -> Identity:
    return (resource.KIND, resource.namespace, resource.name)


@attrs.define
class Harness:
    hostname: str = "node-a"
    dataplane: StrictDataplane = attrs.Factory(StrictDataplane)
    current: dict[Identity, Resource] = attrs.Factory(dict)
    pipeline: Pipeline = attrs.field(init=False)
    in_sync_sent: bool = False

    def __attrs_post_init__(self) -> None:
        self.pipeline = build_pipeline(
            self.hostname, self.dataplane.apply, ValidationContext("Any")
        )

    @property
    def graph(self) -> CalcGraph:
        return self.pipeline.graph

    @property
    def converter(self) -> Converter:
        return self.pipeline.converter

    def diff(self, state: State) -> list[Update]:
        """The updates that move the datastore from the current state to ``state``."""
        updates = []
        for key in list(self.current) + [k for k in state if k not in self.current]:
            if self.current.get(key) != state.get(key):
                updates.extend(self.converter.update(key, state.get(key)))
        self.current = dict(state)
        return updates

    def feed(self, updates: Iterable[Update], flush_every: int = 0) -> None:
        batch: list[Update] = []
        for update in updates:
            batch.append(update)
            if flush_every and len(batch) >= flush_every:
                self.pipeline.on_updates(batch)
                batch = []
                self.flush()
        if batch:
            self.pipeline.on_updates(batch)

    def flush(self) -> None:
        self.graph.flush()
        if self.graph.in_sync and not self.in_sync_sent:
            self.in_sync_sent = True
            self.dataplane.apply(m.InSync())

    def in_sync(self) -> None:
        self.pipeline.on_status(SyncStatus.IN_SYNC)

    def run(self, state: State) -> dict[str, Any]:
        """Snapshot, in sync, flush: the view of ``state`` applied on its own."""
        self.feed(self.diff(state))
        self.in_sync()
        self.flush()
        return self.dataplane.view()


def final_view(state: State, hostname: str = "node-a") -> dict[str, Any]:
    return Harness(hostname).run(state)


Mutation = Callable[[dict[Identity, Resource]], None]


def mutate(state: State, *changes: Mutation) -> dict[Identity, Resource]:
    out = dict(state)
    for change in changes:
        change(out)
    return out


def load_manifest(text: str) -> Resource:
    (item,) = load_text(text).resources
    return item.resource


@attrs.define
class Recorder:
    """Every output interface, kept as the current state the dataplane would hold."""

    routes: dict[str, m.RouteUpdate] = attrs.Factory(dict)
    endpoints: dict[Any, Any] = attrs.Factory(dict)
    passthru: dict[tuple[str, Any], Any] = attrs.Factory(dict)
    namespaces: dict[Any, Any] = attrs.Factory(dict)
    encapsulation: m.Encapsulation | None = None

    def on_route_update(self, update: m.RouteUpdate) -> None:
        self.routes[update.dst] = update

    def on_route_remove(self, dst: str) -> None:
        del self.routes[dst]

    def on_endpoint_update(self, update: Any) -> None:
        self.endpoints[update.id] = update

    def on_endpoint_remove(self, key: Any) -> None:
        del self.endpoints[key]

    def on_encapsulation(self, encapsulation: m.Encapsulation) -> None:
        self.encapsulation = encapsulation

    def on_host_metadata_update(self, update: m.HostMetadataUpdate) -> None:
        address = update.ipv4_addr
        self.passthru[("host", update.hostname)] = (
            f"{address} {update.ipv6_addr}" if update.ipv6_addr else address
        )

    def on_host_metadata_remove(self, hostname: str) -> None:
        self.passthru.pop(("host", hostname))

    def on_pool_update(self, update: m.IPAMPoolUpdate) -> None:
        self.passthru[("pool", update.id)] = update.pool.masquerade

    def on_pool_remove(self, cidr: str) -> None:
        self.passthru.pop(("pool", cidr))

    def on_wireguard_update(self, update: m.WireguardEndpointUpdate) -> None:
        self.passthru[("wireguard", update.hostname)] = update.public_key

    def on_wireguard_remove(self, hostname: str) -> None:
        self.passthru.pop(("wireguard", hostname), None)

    def on_service_update(self, update: m.ServiceUpdate) -> None:
        self.passthru[("service", f"{update.namespace}/{update.name}")] = update.cluster_ips

    def on_service_remove(self, namespace: str, name: str) -> None:
        self.passthru.pop(("service", f"{namespace}/{name}"))

    def on_global_bgp_config(self, update: m.GlobalBGPConfigUpdate) -> None:
        self.passthru[("bgp", "default")] = update

    def on_namespace_update(self, update: m.NamespaceUpdate) -> None:
        self.namespaces[update.id] = dict(update.labels)

    def on_namespace_remove(self, namespace: str) -> None:
        del self.namespaces[namespace]

    def on_service_account_update(self, update: m.ServiceAccountUpdate) -> None:
        self.namespaces[update.id] = dict(update.labels)

    def on_service_account_remove(self, account: m.ServiceAccountID) -> None:
        del self.namespaces[account]


def orders(updates: Sequence[Update]) -> list[list[Update]]:
    """The updates as given, reversed, and a few other permutations (at most six in all)."""
    found = [list(updates), list(reversed(updates))]
    for permutation in itertools.islice(itertools.permutations(updates), 1, 20, 5):
        found.append(list(permutation))
    return found[:6]


def wep(name: str, ip: str, labels: dict[str, str] | None = None) -> model.WorkloadEndpoint:
    return model.WorkloadEndpoint("active", name, "", ("open",), (ip,), (), FrozenMap(labels or {}))


def local(workload: str) -> model.WorkloadEndpointKey:
    return model.WorkloadEndpointKey("node-a", "k8s", f"ns/{workload}", "eth0")


def pool(cidr: str, vxlan: str = "", nat: bool = False) -> model.IPPool:
    return model.IPPool(cidr, "", vxlan, nat, False)


def config(value: str) -> model.ConfigValue:
    return model.ConfigValue(value)


#: A VXLAN pool with NAT outgoing, and node-b's host IP: inputs of several tables.
VXLAN_POOL = Update(model.IPPoolKey("10.65.0.0/16"), pool("10.65.0.0/16", "Always", nat=True))


NODE_B_IP = Update(model.HostIPKey("node-b"), config("192.0.2.2"))
