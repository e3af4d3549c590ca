"""The data path in a real cluster: controller and three broker processes on
127.x addresses, the fault proxy between them, killed with SIGKILL.
Checks what must survive (no acknowledged acks=all record lost) and what
must not (a dead leader's unreplicated tail), end to end through the client."""
from __future__ import annotations

import asyncio

import pytest

from minibroker.client.admin import NewTopic
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.records import build_batch, iter_records
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401

pytestmark = pytest.mark.cluster

TOPIC = "orders"


async def replica_view(admin, c, broker: int) -> dict:
    st = await admin.replica_status(c.broker_address(broker), [TOPIC])
    return st["partitions"][0] if st["partitions"] else {}


async def consume_all(c, expected: int) -> list[bytes]:
    out: list[bytes] = []
    async with c.consumer({"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(TOPIC, 0)])
        consumer.seek((TOPIC, 0), 0)

        async def enough() -> bool:
            for r in await consumer.poll(500):
                out.append(r.value)
            return len(out) >= expected
        await wait_for(enough, timeout_s=20, what=f"{expected} records")
        for r in await consumer.poll(300):      # nothing beyond what was committed
            out.append(r.value)
    return out


async def test_leader_crash_keeps_acked_writes_and_the_old_leaders_tail_is_truncated(cluster):
    c = cluster
    async with c.admin() as admin:
        await admin.create_topics([NewTopic(TOPIC, assignments=[[1, 2, 3]],
                                            configs={"min.insync.replicas": "2"})])
        await admin.wait_for_leaders(TOPIC)
        async with c.producer({"acks": "all"}) as producer:
            for f in [await producer.send(TOPIC, f"a{i}".encode(), partition=0) for i in range(50)]:
                await f                                  # acknowledged: must survive
        await wait_for(lambda: _all_hw(admin, c, 50), what="every replica at HW 50")
        # Followers lose their path to leader 1; it takes acks=1 writes nobody replicates.
        c.block(2, 1)
        c.block(3, 1)
        host, port = c.broker_address(1).rsplit(":", 1)
        raw = await Connection.open(host, int(port))
        for i in range(3):
            resp = await raw.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "records": build_batch([f"z{i}".encode()])}]}]})
            assert resp["topics"][0]["partitions"][0]["error"] == 0
        raw.close()
        c.kill(1)
        c.heal()
        await wait_for(lambda: _leader_is(admin, 2), timeout_s=20, what="broker 2 to lead")
        async with c.producer({"acks": "all"}) as producer:
            for f in [await producer.send(TOPIC, f"a{i}".encode(), partition=0) for i in range(50, 100)]:
                await f
        c.start_broker(1)
        await wait_for(lambda: _isr_is(admin, [1, 2, 3]), timeout_s=30, what="broker 1 to rejoin the ISR")
        await wait_for(lambda: _all_hw(admin, c, 100), timeout_s=10, what="every replica at HW 100")
        v1 = await replica_view(admin, c, 1)
        assert (v1["role"], v1["leo"]) == ("follower", 100)
        events = await admin.events(c.broker_address(1), 0, 0, 10_000)
        trunc = [e for e in events["events"] if e["kind"] == "truncation" and e.get("side") == "end"]
        assert [(e["before"], e["after"]) for e in trunc] == [(53, 50)]
    values = await consume_all(c, 100)
    assert values == [f"a{i}".encode() for i in range(100)]


async def test_consumer_in_a_followers_rack_is_sent_to_that_follower(cluster):
    c = cluster
    async with c.admin() as admin:
        await admin.create_topics([NewTopic(TOPIC, assignments=[[1, 2, 3]])])
        await admin.wait_for_leaders(TOPIC)
        async with c.producer({"acks": "all"}) as producer:
            for f in [await producer.send(TOPIC, f"v{i}".encode(), partition=0) for i in range(5)]:
                await f
        await wait_for(lambda: _all_hw(admin, c, 5), what="every replica at HW 5")
        desc = await admin.describe_cluster()
        racks = {b.node_id: b.rack for b in desc.brokers}
    assert racks[1] != racks[2]
    host, port = c.broker_address(1).rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    body = {"replica_id": -1, "max_wait_ms": 0, "rack_id": racks[2], "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0}]}]}
    e = (await conn.request(ApiKey.FETCH, body))["topics"][0]["partitions"][0]
    conn.close()
    assert (e["error"], e["preferred_read_replica"], e["records"]) == (0, 2, b"")
    host, port = c.broker_address(2).rsplit(":", 1)
    conn = await Connection.open(host, int(port))
    e = (await conn.request(ApiKey.FETCH, body))["topics"][0]["partitions"][0]
    conn.close()
    assert e["error"] == 0 and [r.value for r in iter_records(e["records"])] == [f"v{i}".encode() for i in range(5)]


async def _all_hw(admin, c, hw: int) -> bool:
    views = await asyncio.gather(*(replica_view(admin, c, b) for b in (1, 2, 3)))
    return all(v.get("hw") == hw and v.get("leo") == hw for v in views)


async def _leader_is(admin, broker: int) -> bool:
    (t,) = await admin.describe_topics([TOPIC])
    return t.partitions[0].leader == broker


async def _isr_is(admin, isr: list[int]) -> bool:
    (t,) = await admin.describe_topics([TOPIC])
    return sorted(t.partitions[0].isr) == isr
