"""The etcd JSON-gateway client against a real etcd server."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from pyfelix.datastore.etcd import (
    EtcdClient,
    EtcdCompacted,
    EtcdConfig,
    EtcdTLSError,
    EtcdUnavailable,
    _client_certificate_wanted,
)
from tests.etcd_server import (
    EtcdServer,
    client_tls_env,
    free_port,
    make_certificates,
    running_etcd,
)


async def test_put_get_range_delete(etcd: EtcdServer) -> None:
    """Basic key-value operations round-trip keys and values and report revisions."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        rev = await client.put("/calico/a/1", "one")
        await client.put("/calico/a/2", b"two")
        await client.put("/calico/b", "other")
        kv = await client.get("/calico/a/1")
        assert kv is not None
        assert (kv.value, kv.mod_revision) == (b"one", rev)
        kvs, revision = await client.list_all("/calico/a/", page=1)
        assert [(k.key, k.value) for k in kvs] == [("/calico/a/1", b"one"), ("/calico/a/2", b"two")]
        assert revision >= rev
        assert await client.delete("/calico/a/", prefix=True) == 2
        assert await client.get("/calico/a/1") is None


async def test_conditional_writes(etcd: EtcdServer) -> None:
    """put_if creates only when absent and replaces only at the expected revision."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        created = await client.put_if("/k", "v1", mod_revision=0)
        assert created is not None
        assert await client.put_if("/k", "again", mod_revision=0) is None
        assert await client.put_if("/k", "v2", mod_revision=created) is not None
        assert await client.put_if("/k", "v3", mod_revision=created) is None


async def test_watch_sees_puts_and_deletes(etcd: EtcdServer) -> None:
    """A watch from a revision streams later puts and deletes under the prefix only."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        start = await client.put("/w/seed", "0")
        events = []

        async def watch() -> None:
            async for event in client.watch("/w/", start + 1):
                events.append((event.deleted, event.kv.key, event.kv.value))
                if len(events) == 3:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await client.put("/w/x", "1")
            await client.put("/other", "ignored")
            await client.put("/w/x", "2")
            await client.delete("/w/x")
        assert events == [(False, "/w/x", b"1"), (False, "/w/x", b"2"), (True, "/w/x", b"")]


async def test_watch_from_compacted_revision(etcd: EtcdServer) -> None:
    """Watching from before a compaction raises EtcdCompacted with the compacted revision."""
    async with EtcdClient(EtcdConfig.from_url(etcd.etcd_url)) as client:
        await client.put("/c/1", "a")
        rev = await client.put("/c/1", "b")
        await client.compact(rev)
        with pytest.raises(EtcdCompacted) as info:
            await anext(aiter(client.watch("/c/", 1)))
        assert info.value.compact_revision == rev


async def test_unreachable_endpoint_then_failover(etcd: EtcdServer) -> None:
    """A dead endpoint is skipped in favour of a live one; all dead raises EtcdUnavailable."""
    dead = f"http://127.0.0.1:{free_port()}"
    async with EtcdClient(EtcdConfig(endpoints=(dead, etcd.url))) as client:
        await client.put("/f", "ok")
    async with EtcdClient(EtcdConfig(endpoints=(dead,))) as client:
        with pytest.raises(EtcdUnavailable, match=dead):
            await client.put("/f", "x")


def test_config_from_env_and_url() -> None:
    """Endpoints and TLS files come from calico-node's variables or an etcd:// URL."""
    env = {"ETCD_ENDPOINTS": "https://a:2379, https://b:2379", "ETCD_CA_CERT_FILE": "/ca.pem"}
    config = EtcdConfig.from_env(env)
    assert config.endpoints == ("https://a:2379", "https://b:2379")
    assert config.ca_file == "/ca.pem"
    assert EtcdConfig.from_url("etcd://h1:1,h2:2", {}).endpoints == ("http://h1:1", "http://h2:2")
    assert EtcdConfig.from_url("etcds://h:1", {}).endpoints == ("https://h:1",)


async def test_tls_with_client_certificates(tmp_path: Path) -> None:
    """TLS files configured like calico-node reach an etcd that demands client certificates;
    without a client certificate the connection is refused, and the error says what to set
    (etcd closes such a handshake without a word: it read as a bare ReadError)."""
    make_certificates(tmp_path)
    env = client_tls_env(tmp_path)
    with running_etcd(tls=tmp_path) as server:
        config = EtcdConfig.from_url(server.etcd_url, env)
        assert config.endpoints[0].startswith("https://")
        async with EtcdClient(config) as client:
            await client.put("/tls", "yes")
            kv = await client.get("/tls")
            assert kv is not None
            assert kv.value == b"yes"
        anonymous = EtcdConfig(endpoints=config.endpoints, ca_file=str(tmp_path / "ca.pem"))
        async with EtcdClient(anonymous) as client:
            with pytest.raises(EtcdUnavailable, match="ETCD_CERT_FILE and ETCD_KEY_FILE"):
                await client.put("/tls", "no")


@pytest.mark.parametrize(
    ("reason", "wanted"),
    [
        ("ReadError", True),
        ("TLS: TLSV13_ALERT_CERTIFICATE_REQUIRED", True),
        ("TLS: SSLV3_ALERT_BAD_CERTIFICATE", True),
        ("TLS: WRONG_VERSION_NUMBER", False),
        ("Connection refused", False),
    ],
)
def test_refused_handshakes_read_as_client_certificate_wanted(reason: str, wanted: bool) -> None:
    """etcd refuses a client without a certificate in whichever way its TLS stack and ours
    agree on: silence, or an alert; each is told as a missing client certificate."""
    assert _client_certificate_wanted(reason) is wanted


def test_tls_file_problems_name_the_file(tmp_path: Path) -> None:
    """A missing CA file or a key that does not match its certificate is a sentence naming
    the file, not a traceback."""
    make_certificates(tmp_path)
    missing = EtcdConfig(endpoints=("https://127.0.0.1:1",), ca_file=str(tmp_path / "nope.pem"))
    with pytest.raises(EtcdTLSError, match=r"nope\.pem \(ETCD_CA_CERT_FILE\): No such file"):
        missing.ssl_context()
    mismatched = EtcdConfig(
        endpoints=("https://127.0.0.1:1",),
        ca_file=str(tmp_path / "ca.pem"),
        cert_file=str(tmp_path / "client.pem"),
        key_file=str(tmp_path / "server-key.pem"),
    )
    with pytest.raises(EtcdTLSError, match=r"does not match its certificate: .*client\.pem"):
        mismatched.ssl_context()
    not_a_ca = EtcdConfig(endpoints=("https://127.0.0.1:1",), ca_file=str(tmp_path / "ca.ext"))
    (tmp_path / "ca.ext").write_text("not a certificate\n")
    with pytest.raises(EtcdTLSError, match=r"ca\.ext \(ETCD_CA_CERT_FILE\)"):
        not_a_ca.ssl_context()


async def test_a_wrong_ca_says_the_server_is_not_trusted(tmp_path: Path) -> None:
    """An etcd whose certificate another CA signed: "etcd down" would mislead; the error says
    the certificate is not trusted and points at ETCD_CA_CERT_FILE."""
    server_certs, other = tmp_path / "server", tmp_path / "other"
    server_certs.mkdir()
    other.mkdir()
    make_certificates(server_certs)
    make_certificates(other)
    with running_etcd(tls=server_certs) as server:
        config = EtcdConfig(
            endpoints=(server.url,),
            ca_file=str(other / "ca.pem"),
            cert_file=str(other / "client.pem"),
            key_file=str(other / "client-key.pem"),
        )
        async with EtcdClient(config) as client:
            with pytest.raises(EtcdUnavailable, match=r"not trusted.*ETCD_CA_CERT_FILE"):
                await client.get("/x")


def test_endpoints_as_calico_node_and_felix_spell_them() -> None:
    """ETCD_ENDPOINTS, else FELIX_ETCDENDPOINTS, else FELIX_ETCDSCHEME + FELIX_ETCDADDR; TLS
    files from ETCD_* or FELIX_ETCD*; the agent's URL names every endpoint, so its client
    fails over (test_unreachable_endpoint_then_failover)."""
    both = {"ETCD_ENDPOINTS": "http://a:2379,http://b:2379", "FELIX_ETCDENDPOINTS": "http://c:1"}
    assert EtcdConfig.env_url(both) == "etcd://a:2379,b:2379"
    felix = {"FELIX_ETCDENDPOINTS": "https://c:1, https://d:2/", "FELIX_ETCDCAFILE": "/ca"}
    assert EtcdConfig.env_url(felix) == "etcds://c:1,d:2"
    assert EtcdConfig.from_env(felix).ca_file == "/ca"
    addr = {"FELIX_ETCDADDR": "e:2379", "FELIX_ETCDSCHEME": "https", "FELIX_ETCDKEYFILE": "/k"}
    assert EtcdConfig.from_env(addr).endpoints == ("https://e:2379",)
    assert EtcdConfig.from_env(addr).key_file == "/k"
    assert EtcdConfig.env_url({}) == ""
