"""KIP-937's timestamp window on a real cluster: a CreateTime record more than
message.timestamp.after.max.ms ahead of the leader's clock (one hour by default, as Kafka 4.0) or more
than message.timestamp.before.max.ms behind it (unbounded by default) is refused with INVALID_TIMESTAMP,
nothing of its batch is written, and the configs apply from the next append when altered at runtime."""
import asyncio
import time

import pytest

from minibroker.client import Admin, Producer, TopicPartition
from minibroker.dynamic_config import ResourceType
from minibroker.errors import ErrorCode, KafkaError
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster
HOUR = 3_600_000
WEEK = 7 * 24 * HOUR


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    async def setup():
        async with Admin(shared_cluster.bootstrap) as admin:
            await admin.create_topic("tsw", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
            await admin.create_topic("tsw-recent", assignments=[[2, 3, 1]],
                                     configs={"min.insync.replicas": "2", "message.timestamp.before.max.ms": "60000"})
            await admin.create_topic("tsw-altered", assignments=[[3, 1, 2]], configs={"min.insync.replicas": "2"})
    asyncio.run(setup())
    return shared_cluster


async def send(bootstrap: str, topic: str, timestamp_ms: int) -> int:
    """One acks=all record with this CreateTime: its offset, or the KafkaError the produce got."""
    async with Producer(bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
        return (await p.send_and_wait(topic, b"v", timestamp_ms=timestamp_ms, partition=0)).offset


async def end_offset(bootstrap: str, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap) as admin:
        return (await admin.list_offsets({tp: -1}))[tp].offset


async def test_a_record_an_hour_ahead_is_refused_and_a_week_old_one_is_kept_by_default(cluster):
    now = int(time.time() * 1000)
    assert await send(cluster.bootstrap, "tsw", now - WEEK) == 0
    with pytest.raises(KafkaError) as ei:
        await send(cluster.bootstrap, "tsw", now + 2 * HOUR)
    assert ei.value.code == ErrorCode.INVALID_TIMESTAMP and not ei.value.retriable
    assert "invalid timestamp" in ei.value.message
    assert await end_offset(cluster.bootstrap, "tsw") == 1                  # nothing of it was written
    assert await send(cluster.bootstrap, "tsw", int(time.time() * 1000)) == 1


async def test_before_max_ms_refuses_a_record_older_than_it(cluster):
    with pytest.raises(KafkaError) as ei:
        await send(cluster.bootstrap, "tsw-recent", int(time.time() * 1000) - HOUR)
    assert ei.value.code == ErrorCode.INVALID_TIMESTAMP
    assert await send(cluster.bootstrap, "tsw-recent", int(time.time() * 1000)) == 0


async def test_an_altered_after_max_ms_applies_from_the_next_append(cluster):
    future = int(time.time() * 1000) + 2 * HOUR
    with pytest.raises(KafkaError):
        await send(cluster.bootstrap, "tsw-altered", future)
    async with Admin(cluster.bootstrap) as admin:
        await admin.incremental_alter_configs((ResourceType.TOPIC, "tsw-altered"),
                                              {"message.timestamp.after.max.ms": str(2**63 - 1)})

    async def accepted():
        try:
            return await send(cluster.bootstrap, "tsw-altered", future) >= 0
        except KafkaError as exc:
            assert exc.code == ErrorCode.INVALID_TIMESTAMP
            return False
    await wait_for(accepted, timeout_s=30, what="the leader to apply message.timestamp.after.max.ms")
