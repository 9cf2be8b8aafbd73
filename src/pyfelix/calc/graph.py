"""The calculation graph: the wiring of the calculators, in the seed's order.

Read this module to learn the architecture: each step says, with a small picture, which updates
flow where. Calculators are plain synchronous classes; each registers with the dispatchers for
the keys it consumes (``register_with``, as Felix's calculators do) and writes to the narrow
output interface it needs (calc/outputs.py), which the event sequencer implements. The async
calc loop flushes the graph.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from pyfelix import model
from pyfelix.calc.active_rules import ActiveRulesCalculator
from pyfelix.calc.config_batcher import ConfigBatcher
from pyfelix.calc.dispatcher import Dispatcher
from pyfelix.calc.encapsulation import EncapsulationResolver
from pyfelix.calc.ipsets import IPSetMemberIndex
from pyfelix.calc.passthru import DataplanePassthru
from pyfelix.calc.policy_resolver import PolicyResolver
from pyfelix.calc.profile_decoder import ProfileDecoder
from pyfelix.calc.routes import L3RouteResolver
from pyfelix.calc.rule_scanner import IPSetData, RuleScanner
from pyfelix.calc.sequencer import EventSequencer
from pyfelix.calc.service_index import ServiceIndex
from pyfelix.calc.stats_collector import StatsCollector
from pyfelix.calc.vxlan import VXLANResolver
from pyfelix.config import FelixConfig, NFTablesMode, RouteSource
from pyfelix.syncer.api import SyncStatus, Update


@attrs.frozen
class GraphSettings:
    """What the graph is built with, from the start-up configuration (a change restarts the
    agent, as in Felix): RouteSource, and whether members nested in a wider one are left out
    of IP sets (NFTablesMode other than Disabled)."""

    route_source: RouteSource = RouteSource.CALICO_IPAM
    suppress_nested_members: bool = True

    @classmethod
    def of(cls, config: FelixConfig) -> GraphSettings:
        return cls(
            route_source=config.route_source,
            suppress_nested_members=config.nftables_mode is not NFTablesMode.DISABLED,
        )


class CalcGraph:
    """Feed it datastore updates; flush it to get dataplane messages in a consistent order."""

    def __init__(
        self,
        hostname: str,
        sequencer: EventSequencer,
        *,
        settings: GraphSettings = GraphSettings(),
    ) -> None:
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

        def local_only(update: Update) -> None:
            key = update.key
            assert isinstance(key, model.EndpointKey)
            if key.hostname == hostname:
                local_updates.on_update(update)

        all_updates.register(model.WorkloadEndpointKey, local_only)
        all_updates.register(model.HostEndpointKey, local_only)

        #   all endpoints, network sets, profile labels --> IPSetMemberIndex --> IP set members
        #   EndpointSlices                              --> ServiceIndex     --> IP set members
        self.member_index = members = IPSetMemberIndex(
            seq.on_ipset_member_added,
            seq.on_ipset_member_removed,
            suppress_nested=settings.suppress_nested_members,
        )
        members.register_with(all_updates)
        self.service_index = services = ServiceIndex(
            seq.on_ipset_member_added, seq.on_ipset_member_removed
        )
        services.register_with(all_updates)

        #   tiers, policies, local endpoints --> PolicyResolver --> endpoints with their tiers
        #                                            ^
        #                                            | match start/stop
        #   policies, profiles, local endpoints --> ActiveRulesCalculator
        #                                            |
        #                                            | active policies and profiles
        #                                            v
        #                                        RuleScanner --> parsed rules --> sequencer
        #                                            |
        #                                            | IP set active/inactive
        #                                            v
        #                        sequencer, IPSetMemberIndex, ServiceIndex
        self.policy_resolver = resolver = PolicyResolver(seq)
        resolver.register_with(all_updates, local_updates)
        self.ipsets: dict[str, IPSetData] = {}

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

        self.rule_scanner = scanner = RuleScanner(ipset_active, ipset_inactive, seq)
        self.active_rules = arc = ActiveRulesCalculator(
            on_policy_active=scanner.on_policy_active,
            on_policy_inactive=scanner.on_policy_inactive,
            on_profile_active=scanner.on_profile_active,
            on_profile_inactive=scanner.on_profile_inactive,
            on_match_started=resolver.on_match_started,
            on_match_stopped=resolver.on_match_stopped,
            on_endpoint_matches_started=resolver.on_matches_started,
            on_policy_matches_started=resolver.on_policy_matches_started,
        )
        arc.register_with(all_updates, local_updates)
        resolver.reads_matches_from(arc)

        #   kns./ksa. profile labels --> ProfileDecoder --> namespaces, service accounts
        self.profile_decoder = decoder = ProfileDecoder(seq)
        decoder.register_with(all_updates)

        #   host IPs, pools, WireGuard keys, Services --> DataplanePassthru --> sequencer
        self.passthru = passthru = DataplanePassthru(seq)
        passthru.register_with(all_updates)

        #   pools, blocks, host IPs, tunnels, local workloads --> L3RouteResolver --> routes
        self.routes = routes = L3RouteResolver(hostname, seq, settings.route_source)
        routes.register_with(all_updates, local_updates)

        #   host IPs, tunnel addresses and MACs --> VXLANResolver --> VTEPs
        self.vxlan = vxlan = VXLANResolver(seq)
        vxlan.register_with(all_updates)

        #   pools, FelixConfiguration --> EncapsulationResolver --> encapsulation (restart check)
        self.encapsulation = encapsulation = EncapsulationResolver(seq)
        encapsulation.register_with(all_updates)

        #   global and this node's configuration, ready flag --> ConfigBatcher --> ConfigUpdate
        self.config = config = ConfigBatcher(hostname, seq)
        config.register_with(all_updates)

        #   nodes, endpoints, tiers, policies, profiles --> StatsCollector --> cluster metrics
        self.stats = stats = StatsCollector()
        stats.register_with(all_updates)

    # Inputs and output.
    def on_updates(self, updates: Sequence[Update]) -> None:
        self.all_updates.on_updates(updates)

    def on_status(self, status: SyncStatus) -> None:
        """IN_SYNC (the first only) reaches every calculator that waits for it."""
        if status is SyncStatus.IN_SYNC and not self.in_sync:
            self.in_sync = True
            self.all_updates.on_status(status)

    def work_ahead(self) -> None:
        """Do now what later updates would have the graph do anyway, and emit nothing: for a
        caller that would otherwise wait for its input (the dry-run, for its next file)."""
        self.member_index.work_ahead()

    def flush(self) -> None:
        """Let the deferred calculators emit, then flush the sequencer in dependency order."""
        self.member_index.flush()
        self.routes.flush()
        self.policy_resolver.flush()
        self.sequencer.flush()
