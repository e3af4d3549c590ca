"""aiokafka (asyncio client; resolves versions at connect) against the Kafka listener."""
from __future__ import annotations

import pytest

aiokafka = pytest.importorskip("aiokafka")
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from minibroker.testing.wait import until  # noqa: E402


pytestmark = pytest.mark.cluster
N = 100_000


async def test_aiokafka_admin_creates_and_describes_topics(shared_cluster):
    admin = AIOKafkaAdminClient(bootstrap_servers=shared_cluster.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("ak-admin", 3, 3)])
        # As in Kafka, CreateTopics answers once the controller has the topic; each broker's Metadata has it
        # a moment later, and aiokafka asks whichever broker is least loaded.

        async def described():
            (d,) = await admin.describe_topics(["ak-admin"])
            return d if d["error_code"] == 0 else None

        async def listed():
            return "ak-admin" in await admin.list_topics()
        desc = await until(described, "aiokafka to describe ak-admin", timeout_s=30)
        assert desc["topic"] == "ak-admin"
        assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1, 2]
        await until(listed, "aiokafka to list ak-admin", timeout_s=30)
    finally:
        await admin.close()


async def test_aiokafka_producer_and_assigned_consumer_round_trip_100k_records(shared_cluster):
    bs = shared_cluster.kafka_bootstrap
    admin = AIOKafkaAdminClient(bootstrap_servers=bs)
    await admin.start()
    await admin.create_topics([NewTopic("ak-100k", 2, 3)])
    await admin.close()
    p = AIOKafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5, max_batch_size=256 * 1024)
    await p.start()
    try:
        futs = [await p.send("ak-100k", key=b"k%d" % i, value=b"v%d" % i) for i in range(N)]
        metas = [await f for f in futs]
    finally:
        await p.stop()
    acked = {(m.partition, m.offset) for m in metas}
    assert len(acked) == N
    c = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest")
    await c.start()
    got = {}
    try:
        c.assign([TopicPartition("ak-100k", 0), TopicPartition("ak-100k", 1)])

        async def more():
            for tp, recs in (await c.getmany(timeout_ms=500, max_records=50_000)).items():
                for r in recs:
                    got[(tp.partition, r.offset)] = r.value
            return len(got) >= N
        await until(more, f"{N} records", timeout_s=180, interval_s=0)
    finally:
        await c.stop()
    assert set(got) == acked
    assert sorted(got.values()) == sorted(b"v%d" % i for i in range(N))
