"""TLS listeners and clients by Kafka's property names, over real sockets."""
from __future__ import annotations

import os
import stat
from typing import Any

import pytest

from minibroker.client.config import ADMIN_DEFAULTS, client_config
from minibroker.client.network import ClientNetwork
from minibroker.config import Config, ConfigError
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection
from minibroker.net.server import Dispatcher, HandlerSpec, serve
from minibroker.net.tls import client_context, listener_protocol, server_context
from minibroker.protocol.api import ApiKey
from minibroker.testing.local_ca import create_cluster_certificates

SECRET = "tls-test-secret-0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    create_cluster_certificates(str(d), ["127.0.0.1"], {"security.protocol": "SSL",
                                                        "ssl.truststore.location": str(d / "ca.pem")})
    return d


def _server_config(certs) -> Config:
    return Config({"ssl.certificate.location": str(certs / "server.pem"),
                   "ssl.key.location": str(certs / "server.key")})


async def _serve(tls: Any, host: str = "127.0.0.1") -> tuple[Any, int]:
    async def privileged(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        return {"error": 0}

    async def metadata(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        return {"error": 0, "brokers": [], "topics": [], "controller_id": -1, "cluster_id": "c"}

    d = Dispatcher({ApiKey.ALTER_PARTITION: HandlerSpec(privileged, privileged=True),
                    ApiKey.METADATA: HandlerSpec(metadata)}, secret=SECRET, role="broker")
    srv = await serve(d, host, 0, "SSL", ssl_context=tls)
    return srv, srv.sockets[0].getsockname()[1]


def test_the_local_ca_keeps_the_key_0600_and_writes_no_ca_key(certs):
    assert stat.S_IMODE(os.stat(certs / "server.key").st_mode) == 0o600
    assert sorted(os.listdir(certs)) == ["ca.pem", "client.properties", "server.key", "server.pem"]
    assert "security.protocol=SSL" in (certs / "client.properties").read_text()


async def test_scram_over_tls_with_the_clusters_ca(certs):
    srv, port = await _serve(server_context(_server_config(certs), "SSL"))
    ctx = client_context(Config({"security.protocol": "SSL", "ssl.truststore.location": str(certs / "ca.pem")}))
    conn = await Connection.open("127.0.0.1", port, secret=SECRET, ssl_context=ctx)
    assert (await conn.request(ApiKey.ALTER_PARTITION, {"broker_id": 1, "broker_epoch": 1, "topics": []}))["error"] == 0
    assert conn._transport.get_extra_info("ssl_object") is not None
    conn.close()
    srv.close()


async def test_a_plaintext_client_against_an_ssl_listener_fails_clearly_and_is_not_retried(certs):
    srv, port = await _serve(server_context(_server_config(certs), "SSL"))
    net = ClientNetwork(client_config(ADMIN_DEFAULTS, {"bootstrap.servers": f"127.0.0.1:{port}"}, {}))
    with pytest.raises(KafkaError) as e:
        await net.request_address(("127.0.0.1", port), ApiKey.METADATA, {"topics": []})
    assert e.value.code == ErrorCode.INVALID_CONFIG and not e.value.retriable
    assert "is an SSL listener" in e.value.message and "security.protocol=SSL" in e.value.message
    await net.close()
    srv.close()


async def test_a_tls_client_against_a_plaintext_listener_fails_clearly(certs):
    srv, port = await _serve(None)
    ctx = client_context(Config({"security.protocol": "SSL", "ssl.truststore.location": str(certs / "ca.pem")}))
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.1", port, ssl_context=ctx)
    assert e.value.code == ErrorCode.INVALID_CONFIG and "is a PLAINTEXT listener" in e.value.message
    srv.close()


async def test_a_client_that_does_not_trust_the_ca_is_refused_by_certificate_verification(certs):
    srv, port = await _serve(server_context(_server_config(certs), "SSL"))
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.1", port, ssl_context=client_context(Config({"security.protocol": "SSL"})))
    assert e.value.code == ErrorCode.INVALID_CONFIG and "certificate" in e.value.message
    srv.close()


async def test_a_host_name_the_certificate_does_not_name_is_refused_unless_checking_is_off(tmp_path):
    create_cluster_certificates(str(tmp_path), ["127.0.0.5"], {})      # names 127.0.0.5, 127.0.0.1, localhost
    srv, port = await _serve(server_context(_server_config(tmp_path), "SSL"), host="127.0.0.9")
    trust = {"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "ca.pem")}
    with pytest.raises(KafkaError) as e:
        await Connection.open("127.0.0.9", port, ssl_context=client_context(Config(trust)))
    assert e.value.code == ErrorCode.INVALID_CONFIG and "127.0.0.9" in e.value.message
    off = client_context(Config({**trust, "ssl.endpoint.identification.algorithm": ""}))
    conn = await Connection.open("127.0.0.9", port, ssl_context=off)
    conn.close()
    srv.close()


def test_listener_protocols_follow_the_name_or_the_security_protocol_map():
    cfg = Config({"listener.security.protocol.map": "EXTERNAL:SSL,INTERNAL:PLAINTEXT,CTL:SASL_SSL"})
    assert listener_protocol(cfg, "EXTERNAL") == "SSL"
    assert listener_protocol(cfg, "CTL") == "SSL"
    assert listener_protocol(cfg, "INTERNAL") == "PLAINTEXT"
    assert listener_protocol(Config({}), "SSL") == "SSL"
    assert listener_protocol(Config({}), "PLAINTEXT") == "PLAINTEXT"
    with pytest.raises(ConfigError, match="listener.security.protocol.map"):
        listener_protocol(Config({"listener.security.protocol.map": "EXTERNAL:TLS"}), "EXTERNAL")


def test_an_ssl_listener_without_a_certificate_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        server_context(Config({}), "EXTERNAL")
    with pytest.raises(ConfigError, match="no such file"):
        server_context(Config({"ssl.keystore.location": str(tmp_path / "missing.pem")}), "EXTERNAL")
    with pytest.raises(ConfigError, match="security.protocol"):
        client_context(Config({"security.protocol": "TLS"}))


def test_a_keystore_pem_holding_key_and_chain_works_as_kafkas_pem_keystore(certs, tmp_path):
    both = tmp_path / "keystore.pem"
    both.write_bytes((certs / "server.key").read_bytes() + (certs / "server.pem").read_bytes())
    assert server_context(Config({"ssl.keystore.location": str(both)}), "SSL") is not None
