"""The calculation graph, wired in one place, in the seed's order.

Read this function to learn the architecture: each step says, with a small picture, which
updates flow where. Components are plain synchronous classes; the only output is the event
sequencer, which the async calc loop flushes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.active_rules import ActiveRulesCalculator
from pyfelix.calc.config_batcher import ConfigBatcher
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.encapsulation import EncapsulationResolver
from pyfelix.calc.ipsets import IPSetMemberIndex
from pyfelix.calc.passthru import DataplanePassthru
from pyfelix.calc.policy_resolver import PolicyResolver, policy_id
from pyfelix.calc.profile_decoder import ProfileDecoder
from pyfelix.calc.routes import L3RouteResolver
from pyfelix.calc.rule_scanner import IPSetData, RuleScanner, parse_rules
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.calc.service_index import ServiceIndex
from pyfelix.calc.vxlan import VXLANResolver
from pyfelix.resources import EndpointSlice, Service
from pyfelix.syncer.api import SyncStatus, Update


def _labels(value: Any) -> Any:
    return value.labels if value is not None else None


class CalcGraph:
    """Feed it datastore updates; flush it to get dataplane messages in a consistent order."""

    def __init__(self, hostname: str, sequencer: EventSequencer) -> None:
        self.hostname = hostname
        self.sequencer = seq = sequencer
        self.in_sync = False

        #               Syncer (through decoupler and validation filter)
        #                 ||
        #                 \/
        #      Dispatcher (all updates)  --> fans out by key type
        self.all_updates = all_updates = Dispatcher()

        #      Dispatcher (all updates)
        #                 |
        #                 | workload and host endpoints
        #                 v
        #          hostname filter  --(ours only)-->  Dispatcher (local endpoints)
        self.local_updates = local_updates = Dispatcher()

        def local_only(update: Update) -> bool:
            key = update.key
            assert isinstance(key, model.WorkloadEndpointKey | model.HostEndpointKey)
            if key.hostname == hostname:
                local_updates.on_update(update)
            return False

        all_updates.register(model.WorkloadEndpointKey, local_only)
        all_updates.register(model.HostEndpointKey, local_only)

        #   policies, profiles --> ActiveRulesCalculator <-- local endpoints
        #                            |        |         \
        #          active policies/profiles   |          match start/stop
        #                    v                v                 v
        #              sequencer        RuleScanner       PolicyResolver
        self.policy_resolver = resolver = PolicyResolver(
            self._on_endpoint_update, self._on_endpoint_remove
        )
        self.member_index = members = IPSetMemberIndex(
            seq.on_ipset_member_added, seq.on_ipset_member_removed
        )
        self.service_index = services = ServiceIndex(
            seq.on_ipset_member_added, seq.on_ipset_member_removed
        )

        def ipset_active(data: IPSetData) -> None:
            seq.on_ipset_added(data.id, data.type)
            members.on_ipset_active(data)
            services.on_ipset_active(data)
            self.ipsets[data.id] = data

        def ipset_inactive(data: IPSetData) -> None:
            members.on_ipset_inactive(data)
            services.on_ipset_inactive(data)
            seq.on_ipset_removed(data.id)
            self.ipsets.pop(data.id, None)

        self.ipsets: dict[str, IPSetData] = {}
        self.rule_scanner = scanner = RuleScanner(ipset_active, ipset_inactive)

        def policy_active(key: model.PolicyKey, policy: model.Policy) -> None:
            scanner.on_rules_update(key, policy.inbound_rules + policy.outbound_rules)
            pid = policy_id(key)
            inbound, outbound = (
                parse_rules(policy.inbound_rules),
                parse_rules(policy.outbound_rules),
            )
            seq.policies.update(pid, m.ActivePolicyUpdate(pid, policy, inbound, outbound))

        def policy_inactive(key: model.PolicyKey) -> None:
            seq.policies.remove(policy_id(key))
            scanner.on_rules_remove(key)

        def profile_active(name: str, rules: model.ProfileRules) -> None:
            scanner.on_rules_update(("profile", name), rules.inbound_rules + rules.outbound_rules)
            inbound, outbound = parse_rules(rules.inbound_rules), parse_rules(rules.outbound_rules)
            seq.profiles.update(name, m.ActiveProfileUpdate(name, rules, inbound, outbound))

        def profile_inactive(name: str) -> None:
            seq.profiles.remove(name)
            scanner.on_rules_remove(("profile", name))

        self.active_rules = arc = ActiveRulesCalculator(
            on_policy_active=policy_active,
            on_policy_inactive=policy_inactive,
            on_profile_active=profile_active,
            on_profile_inactive=profile_inactive,
            on_match_started=resolver.on_match_started,
            on_match_stopped=resolver.on_match_stopped,
        )

        def on_policy(update: Update) -> None:
            assert isinstance(update.key, model.PolicyKey)
            value = update.value if isinstance(update.value, model.Policy) else None
            resolver.on_policy(update.key, value)
            arc.on_policy(update.key, value)

        all_updates.register(model.PolicyKey, on_policy)
        all_updates.register(
            model.TierKey,
            lambda u: resolver.on_tier(u.key.name, u.value),  # type: ignore[attr-defined,arg-type]
        )
        all_updates.register(
            model.ProfileRulesKey,
            lambda u: arc.on_profile_rules(u.key.name, u.value),  # type: ignore[attr-defined,arg-type]
        )

        def on_local_endpoint(update: Update) -> None:
            key = update.key
            assert isinstance(key, model.WorkloadEndpointKey | model.HostEndpointKey)
            value = update.value
            assert value is None or isinstance(value, model.WorkloadEndpoint | model.HostEndpoint)
            arc.on_endpoint(key, value)
            resolver.on_endpoint(key, value)
            if isinstance(key, model.WorkloadEndpointKey):
                assert value is None or isinstance(value, model.WorkloadEndpoint)
                routes.on_local_workload(key, value)

        local_updates.register(model.WorkloadEndpointKey, on_local_endpoint)
        local_updates.register(model.HostEndpointKey, on_local_endpoint)

        #   all endpoints, network sets, profile labels --> IPSetMemberIndex --> IP set members
        #   EndpointSlices                              --> ServiceIndex     --> IP set members
        def on_item(update: Update) -> None:
            value = update.value
            assert value is None or isinstance(
                value, model.WorkloadEndpoint | model.HostEndpoint | model.NetworkSet
            )
            members.on_item_update(update.key, value)

        all_updates.register(model.WorkloadEndpointKey, on_item)
        all_updates.register(model.HostEndpointKey, on_item)
        all_updates.register(model.NetworkSetKey, on_item)

        self.profile_decoder = decoder = ProfileDecoder(seq)

        def on_profile_labels(update: Update) -> None:
            assert isinstance(update.key, model.ProfileLabelsKey)
            labels = _labels(update.value)
            arc.on_profile_labels(update.key.name, labels)
            members.on_parent_labels(update.key.name, labels)
            decoder.on_profile_labels(update.key.name, labels)

        all_updates.register(model.ProfileLabelsKey, on_profile_labels)

        #   host IPs, pools, WireGuard keys, Services --> DataplanePassthru --> sequencer
        #   pools, blocks, host IPs, tunnels, local workloads --> L3RouteResolver --> routes
        #   host IPs, tunnel addresses and MACs --> VXLANResolver --> VTEPs
        self.passthru = passthru = DataplanePassthru(seq)
        self.routes = routes = L3RouteResolver(hostname, seq)
        self.vxlan = vxlan = VXLANResolver(seq)
        self.encapsulation = encap = EncapsulationResolver(seq)
        self.config = config = ConfigBatcher(hostname, seq)

        def on_host_ip(update: Update) -> None:
            assert isinstance(update.key, model.HostIPKey)
            value = update.value if isinstance(update.value, model.ConfigValue) else None
            passthru.on_host_ip(update.key.hostname, value)
            routes.on_host_ip(update.key.hostname, value)
            vxlan.on_host_ip(update.key.hostname, value)

        def on_host_config(update: Update) -> None:
            key = update.key
            assert isinstance(key, model.HostConfigKey)
            value = update.value if isinstance(update.value, model.ConfigValue) else None
            routes.on_host_config(key.hostname, key.name, value)
            vxlan.on_host_config(key.hostname, key.name, value)
            config.on_host(key.hostname, key.name, value)

        def on_global_config(update: Update) -> None:
            assert isinstance(update.key, model.GlobalConfigKey)
            value = update.value if isinstance(update.value, model.ConfigValue) else None
            config.on_global(update.key.name, value)
            encap.on_global_config(update.key.name, value)

        def on_pool(update: Update) -> None:
            assert isinstance(update.key, model.IPPoolKey)
            value = update.value if isinstance(update.value, model.IPPool) else None
            passthru.on_ip_pool(update.key.cidr, value)
            routes.on_pool(update.key.cidr, value)
            encap.on_pool(update.key.cidr, value)

        def on_block(update: Update) -> None:
            assert isinstance(update.key, model.BlockKey)
            value = update.value if isinstance(update.value, model.AllocationBlock) else None
            routes.on_block(update.key.cidr, value)

        def on_resource(update: Update) -> None:
            key = update.key
            assert isinstance(key, model.ResourceKey)
            resource = (
                update.value.resource if isinstance(update.value, model.Passthrough) else None
            )
            if key.kind == "Service":
                assert resource is None or isinstance(resource, Service)
                passthru.on_service(key.namespace, key.name, resource)
            elif key.kind == "EndpointSlice":
                assert resource is None or isinstance(resource, EndpointSlice)
                services.on_endpoint_slice(key.namespace, key.name, resource)

        all_updates.register(model.HostIPKey, on_host_ip)
        all_updates.register(model.HostConfigKey, on_host_config)
        all_updates.register(model.GlobalConfigKey, on_global_config)
        all_updates.register(model.IPPoolKey, on_pool)
        all_updates.register(model.BlockKey, on_block)
        all_updates.register(model.ResourceKey, on_resource)
        all_updates.register(
            model.WireguardKey,
            lambda u: passthru.on_wireguard(u.key.hostname, u.value),  # type: ignore[attr-defined,arg-type]
        )
        all_updates.register(
            model.ReadyFlagKey,
            lambda u: config.on_ready_flag(u.value),  # type: ignore[arg-type]
        )

    # The sequencer's endpoint buffers, typed per endpoint kind.
    def _on_endpoint_update(self, message: m.WorkloadEndpointUpdate | m.HostEndpointUpdate) -> None:
        if isinstance(message, m.WorkloadEndpointUpdate):
            self.sequencer.workloads.update(message.id, message)
        else:
            self.sequencer.hosts.update(message.id, message)

    def _on_endpoint_remove(self, key: model.WorkloadEndpointKey | model.HostEndpointKey) -> None:
        if isinstance(key, model.WorkloadEndpointKey):
            self.sequencer.workloads.remove(key)
        else:
            self.sequencer.hosts.remove(key)

    # Inputs and output.
    def on_updates(self, updates: Sequence[Update]) -> None:
        self.all_updates.on_updates(updates)

    def on_status(self, status: SyncStatus) -> None:
        if status is SyncStatus.IN_SYNC and not self.in_sync:
            self.in_sync = True
            self.policy_resolver.on_in_sync()
            self.config.on_in_sync()
            self.encapsulation.on_in_sync()

    def flush(self) -> None:
        """Let the deferred calculators emit, then flush the sequencer in dependency order."""
        self.routes.flush()
        self.policy_resolver.flush()
        self.sequencer.flush()
