"""Authentication on a live cluster: without proving the cluster secret in the current
SCRAM exchange, nobody registers a broker, heartbeats for one, or fetches as a replica."""
from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest

from minibroker.client import Admin
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection
from minibroker.net.credentials import read_secret_file
from minibroker.net.scram import ScramClient
from minibroker.protocol.api import ApiKey
from minibroker.testing.cluster import LocalCluster
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster

REGISTER = {"broker_id": 42, "incarnation_id": "fake", "rack": None,
            "listeners": [{"name": "EXTERNAL", "host": "127.0.0.1", "port": 1}]}


def _fetch_as_replica(topic: str) -> dict:
    return {"replica_id": 2, "broker_epoch": 1, "max_wait_ms": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0}]}]}


@pytest.fixture(scope="module")
def live(shared_cluster):
    async def setup():
        async with Admin(shared_cluster.bootstrap) as admin:
            await admin.create_topic("auth", assignments=[[1, 2, 3]])
    asyncio.run(setup())
    return shared_cluster


async def _observed_exchange(c: LocalCluster) -> tuple[bytes, bytes]:
    """A legitimate broker's exchange with the controller, as a network observer records it."""
    host, port = c.layout.controller
    conn = await Connection.open(host, port)
    assert (await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"}))["error"] == 0
    client = ScramClient("broker-1-lifecycle", read_secret_file(c.layout.secret_file), "observed-nonce")
    first = client.first_message()
    resp = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": first})
    final = client.final_message(resp["auth_bytes"])
    assert (await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final}))["error"] == 0
    conn.close()
    return first, final


async def test_an_unauthenticated_client_cannot_register_a_broker_or_heartbeat(live):
    conn = await Connection.open(*live.layout.controller)
    resp = await conn.request(ApiKey.BROKER_REGISTRATION, REGISTER)
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    resp = await conn.request(ApiKey.BROKER_HEARTBEAT, {"broker_id": 1, "broker_epoch": 1,
                                                        "current_metadata_offset": 0, "want_fence": True})
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    conn.close()


async def test_a_wrong_secret_is_refused_and_disconnected(live):
    with pytest.raises(KafkaError) as e:
        await Connection.open(*live.layout.controller, secret="minibroker-dev-secret")
    assert e.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED


async def test_a_replayed_scram_exchange_cannot_register_a_broker(live):
    first, final = await _observed_exchange(live)
    thief = await Connection.open(*live.layout.controller)
    assert (await thief.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-256"}))["error"] == 0
    assert (await thief.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": first}))["error"] == 0
    resp = await thief.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": final})
    assert resp["error"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    with pytest.raises(KafkaError) as e:
        await thief.request(ApiKey.BROKER_REGISTRATION, REGISTER, timeout_ms=5000)
    assert e.value.code == ErrorCode.NETWORK_EXCEPTION          # the controller closed the connection
    thief.close()


async def test_nobody_without_the_secret_can_fetch_as_a_replica(live):
    leader = live.layout.broker(1)
    plain = await Connection.open(leader.host, leader.port)
    resp = await plain.request(ApiKey.FETCH, _fetch_as_replica("auth"))
    assert resp["error"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    plain.close()
    # A PLAIN login with the real secret (the old mechanism) gets nothing either.
    legacy = await Connection.open(leader.host, leader.port)
    resp = await legacy.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})
    assert resp["error"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    legacy.close()


async def test_the_clusters_own_brokers_still_replicate(live):
    async with live.producer({"acks": "all"}) as p:
        await p.send_and_wait("auth", b"replicated")


def test_the_secret_is_private_and_only_in_its_file(live, tmp_path):
    path = live.layout.secret_file
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret = read_secret_file(path)
    assert len(secret) >= 40
    for name in ("cluster.json", "controller/controller.properties", "broker-1/broker.properties"):
        with open(os.path.join(live.data_dir, name), encoding="utf-8") as f:
            assert secret not in f.read()
    with open(os.path.join(live.data_dir, "cluster.json"), encoding="utf-8") as f:
        assert "secret" not in json.load(f)["layout"]
    other = LocalCluster.create(str(tmp_path / "other"), free_ports=True)      # laid out, not started
    assert read_secret_file(other.layout.secret_file) != secret
