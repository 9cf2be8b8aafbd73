"""The dataplane connector: forwarding, readiness, and the restart rules."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from pyfelix import messages as m
from pyfelix.connector import DataplaneConnector
from pyfelix.errors import FatalShutdown, RestartRequired
from pyfelix.values import FrozenMap


def connector() -> DataplaneConnector:
    _, receive = trio.open_memory_channel[m.Flush](0)
    _, from_driver = trio.open_memory_channel[m.FromDataplane](0)

    async def sink(message: m.ToDataplane) -> None:
        return None

    return DataplaneConnector(receive, sink, from_driver)


def config(**values: str) -> m.ConfigUpdate:
    return m.ConfigUpdate(FrozenMap(values))


def test_in_sync_makes_ready() -> None:
    """InSync marks the agent ready."""
    c = connector()
    assert not c.ready
    c.check(m.InSync())
    assert c.ready


def test_config_changes() -> None:
    """Live-reloadable fields change quietly; anything else requires a restart."""
    c = connector()
    c.check(config(LogSeverityScreen="Info", ClusterGUID="a"))
    c.check(config(LogSeverityScreen="Info", ClusterGUID="b", HealthTimeoutOverrides="x=1s"))
    with pytest.raises(RestartRequired, match="LogSeverityScreen"):
        c.check(config(LogSeverityScreen="Debug", ClusterGUID="b"))
    assert RestartRequired.exit_code == 129


def test_encapsulation_and_datastore_readiness() -> None:
    """A different encapsulation than at start-up restarts (129); a not-ready datastore is
    Felix's fatal exit (1), not a restart."""
    c = connector()
    c.check(m.Encapsulation(False, True))
    c.check(m.Encapsulation(False, True))
    with pytest.raises(RestartRequired, match="encapsulation"):
        c.check(m.Encapsulation(False, False))
    with pytest.raises(FatalShutdown, match="not ready") as fatal:
        c.check(m.DatastoreNotReady())
    assert fatal.value.exit_code == 1


async def test_forwards_and_routes_status_back() -> None:
    """Every message reaches the driver; status from the driver reaches its sinks."""
    to_send, to_receive = trio.open_memory_channel[m.Flush](10)
    from_send, from_receive = trio.open_memory_channel[m.FromDataplane](10)
    delivered: list[m.ToDataplane] = []
    keys: list[tuple[str, int]] = []
    reports: list[object] = []

    class Sink:
        async def report_process(self, status: m.ProcessStatusUpdate) -> None:
            reports.append(status)

        async def report_endpoint(self, key: object, status: str | None) -> None:
            reports.append((key, status))

    async def deliver(message: m.ToDataplane) -> None:
        delivered.append(message)

    c = DataplaneConnector(
        to_receive,
        deliver,
        from_receive,
        Sink(),
        on_wireguard_key=lambda key, version: keys.append((key, version)),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        await to_send.send((m.IPSetRemove("s:x"), m.InSync()))
        await from_send.send(m.ProcessStatusUpdate("2026-01-01T00:00:00+00:00", 5.0))
        await from_send.send(m.WireguardStatusUpdate("key"))
        await from_send.send(m.WireguardStatusUpdate("key6", 6))
        await from_send.send(m.DataplaneInSync())
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert delivered == [m.IPSetRemove("s:x"), m.InSync()]
    assert keys == [("key", 4), ("key6", 6)]
    assert reports == [m.ProcessStatusUpdate("2026-01-01T00:00:00+00:00", 5.0)]
    assert c.ready
    assert c.dataplane_in_sync


def test_a_parameter_without_effect_is_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """No silently ignored setting: a parameter pyfelix does not act on is named once, when a
    configuration first sets it; informational ones (ClusterGUID) and acted-on ones are not."""
    c = connector()
    c.check(config(BPFLogLevel="Debug", VXLANPort="4790", ClusterGUID="x"))
    warned = [r.getMessage() for r in caplog.records if "no effect" in r.getMessage()]
    assert warned == [
        "FelixConfiguration parameter BPFLogLevel is accepted for compatibility, "
        "has no effect in pyfelix"
    ]
    c.check(config(BPFLogLevel="Debug", VXLANPort="4790", ClusterGUID="y"))
    assert len([r for r in caplog.records if "no effect" in r.getMessage()]) == 1


def test_a_setting_unsafe_if_ignored_is_refused() -> None:
    """BPFEnabled true: Felix's eBPF dataplane, which pyfelix does not have, would also balance
    services on nodes without kube-proxy; accepting and ignoring it would leave them none."""
    with pytest.raises(FatalShutdown, match="BPFEnabled true is not supported"):
        connector().check(config(BPFEnabled="true"))
    connector().check(config(BPFEnabled="false"))
