"""The Linux driver's refresh schedule: each kernel area is re-read on its own interval."""

import math

from pyfelix.config import parse_config
from pyfelix_dataplane.linux.refresh import RefreshSchedule


def test_areas_fall_due_on_their_own_intervals() -> None:
    config = parse_config(
        {
            "IptablesRefreshInterval": "600",
            "IpsetsRefreshInterval": "5s",
            "NftablesRefreshInterval": "100",
        }
    )
    schedule = RefreshSchedule()
    assert schedule.take_due(0.0, config) == {"iptables", "ipsets", "routes", "nftables"}
    assert schedule.next_due() == 5.0
    assert schedule.take_due(4.0, config) == set()
    assert schedule.take_due(5.0, config) == {"ipsets"}
    assert schedule.take_due(90.0, config) == {"ipsets", "routes"}
    assert schedule.take_due(100.0, config) == {"ipsets", "nftables"}
    assert schedule.take_due(600.0, config) == {"iptables", "ipsets", "routes", "nftables"}


def test_zero_disables_an_area_and_a_failure_makes_all_due() -> None:
    config = parse_config(
        {
            "IptablesRefreshInterval": "0",
            "IpsetsRefreshInterval": "0",
            "RouteRefreshInterval": "0",
            "NftablesRefreshInterval": "0",
        }
    )
    schedule = RefreshSchedule()
    schedule.take_due(0.0, config)
    assert schedule.next_due() == math.inf
    schedule.make_all_due(7.0)
    assert schedule.take_due(7.0, config) == {"iptables", "ipsets", "routes", "nftables"}
