"""The network-namespace fixture later tests depend on: real, isolated and always removed."""

from __future__ import annotations

import pytest

from tests.netns import namespace_exists, run_in, temporary_netns

pytestmark = pytest.mark.netns


def test_fixture_gives_an_isolated_namespace(netns: str) -> None:
    """The namespace exists, has only loopback, and loopback is up."""
    assert namespace_exists(netns)
    links = run_in(netns, "ip", "-o", "link", "show")
    assert links.returncode == 0
    assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]
    assert "UP" in links.stdout
    ping = run_in(netns, "ip", "route", "get", "127.0.0.1")
    assert ping.returncode == 0


def test_namespace_is_removed_even_when_the_test_fails() -> None:
    """Cleanup happens on success and on error alike."""
    with temporary_netns("ok") as name:
        assert namespace_exists(name)
    assert not namespace_exists(name)
    with pytest.raises(RuntimeError), temporary_netns("boom") as failing:
        raise RuntimeError("test body failed")
    assert not namespace_exists(failing)


def test_namespaces_do_not_share_interfaces(netns: str) -> None:
    """A veth created inside one test namespace is invisible in another."""
    with temporary_netns("other") as other:
        made = run_in(netns, "ip", "link", "add", "pft0", "type", "veth", "peer", "name", "pft1")
        assert made.returncode == 0, made.stderr
        assert "pft0" in run_in(netns, "ip", "link", "show").stdout
        assert "pft0" not in run_in(other, "ip", "link", "show").stdout
