"""message.timestamp.type on a real cluster, and topic log configs altered at runtime.

A LogAppendTime topic: the leader gives each batch its own clock's time (Kafka's LogValidator), the
produce answer carries it, every record reads as it, ListOffsets by time finds it, and the followers
store the leader's bytes. A topic altered from CreateTime to LogAppendTime (or its compression.type
changed) takes the new value on its existing logs without a restart, as Kafka's TopicConfigHandler, and so
does a topic without its own value when the cluster-wide default changes (Kafka's DynamicLogConfig)."""
import asyncio
import os
import time

import pytest

from minibroker.client import Admin, Consumer, Producer, TopicPartition
from minibroker.dynamic_config import ResourceType
from minibroker.records import TIMESTAMP_TYPE_LOG_APPEND, parse_header
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.verify.replicas import read_partition

pytestmark = pytest.mark.cluster
OLD = 1_000_000          # a CreateTime far in the past: a LogAppendTime topic must not keep it


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    async def setup():
        async with Admin(shared_cluster.bootstrap) as admin:
            await admin.create_topic("lat", assignments=[[1, 2, 3]],
                                     configs={"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"})
            await admin.create_topic("lat-altered", assignments=[[2, 3, 1]], configs={"min.insync.replicas": "2"})
            await admin.create_topic("lat-default", assignments=[[3, 1, 2]], configs={"min.insync.replicas": "2"})
            await admin.create_topic("lat-own", assignments=[[3, 1, 2]],
                                     configs={"min.insync.replicas": "2", "message.timestamp.type": "CreateTime"})
    asyncio.run(setup())
    return shared_cluster


async def send(bootstrap: str, topic: str, values: list[bytes], **cfg: str) -> list:
    """Each value with the CreateTime OLD, acks=all, in one batch; their RecordMetadata."""
    async with Producer(bootstrap, {"acks": "all", "linger.ms": "20", **cfg}) as p:
        futs = [await p.send(topic, v, timestamp_ms=OLD, partition=0) for v in values]
        await p.flush()
        return [await f for f in futs]


async def timestamps(bootstrap: str, topic: str, n: int) -> dict[int, tuple[int, int]]:
    """offset -> (timestamp, timestamp type) of the first n records of partition 0."""
    got: dict[int, tuple[int, int]] = {}
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TopicPartition(topic, 0)])

        async def everything():
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = (r.timestamp, r.timestamp_type)
            return len(got) >= n
        await wait_for(everything, timeout_s=30, interval_s=0, what=f"{n} records of {topic}")
    return got


async def replicas_alike(cluster, topic: str, n: int) -> list:
    """Partition 0's batches once every replica holds n records, byte for byte alike."""
    async def replicated():
        lay = cluster.layout
        files = [read_partition(os.path.join(lay.node_dir(lay.broker(b).name), "data", f"{topic}-0"))
                 for b in (1, 2, 3)]
        return all(sum(x[1] - x[0] + 1 for x in f) == n for f in files) and files
    files = await wait_for(replicated, timeout_s=30, what=f"every replica of {topic} to hold {n} records")
    assert files[0] == files[1] == files[2]
    return files[0]


async def test_a_log_append_time_topic_stamps_each_batch_with_the_leaders_time(cluster):
    before = int(time.time() * 1000)
    metas = await send(cluster.bootstrap, "lat", [b"a", b"b", b"c"])
    after = int(time.time() * 1000)
    stamped = {m.timestamp for m in metas}
    assert len(stamped) == 1 and before <= stamped.pop() <= after          # the produce answer's log_append_time
    got = await timestamps(cluster.bootstrap, "lat", 3)
    assert sorted(got.values()) == [(metas[0].timestamp, 1)] * 3             # every record reads as it, LogAppendTime
    (batch,) = await replicas_alike(cluster, "lat", 3)
    h = parse_header(batch[3])
    assert h.attributes & TIMESTAMP_TYPE_LOG_APPEND and h.max_timestamp == metas[0].timestamp
    tp = TopicPartition("lat", 0)
    async with Admin(cluster.bootstrap) as admin:
        found = (await admin.list_offsets({tp: before}))[tp]                 # by time: the append time, not OLD
        assert (found.offset, found.timestamp) == (0, metas[0].timestamp)
        assert (await admin.list_offsets({tp: metas[0].timestamp + 1}))[tp].offset == -1


async def test_altered_topic_configs_reach_the_existing_logs_without_a_restart(cluster):
    first = await send(cluster.bootstrap, "lat-altered", [b"create-time"])
    assert first[0].timestamp == OLD
    async with Admin(cluster.bootstrap) as admin:
        await admin.incremental_alter_configs((ResourceType.TOPIC, "lat-altered"),
                                              {"message.timestamp.type": "LogAppendTime", "compression.type": "lz4"})
    sent = 1

    async def append_time_applied():
        nonlocal sent
        meta = (await send(cluster.bootstrap, "lat-altered", [b"after the alter"]))[0]
        sent += 1
        return meta.timestamp != OLD
    await wait_for(append_time_applied, timeout_s=30, what="the leader to apply LogAppendTime")
    last = parse_header((await replicas_alike(cluster, "lat-altered", sent))[-1][3])
    assert last.attributes & TIMESTAMP_TYPE_LOG_APPEND and last.attributes & 7 == 3      # lz4, as altered
    got = await timestamps(cluster.bootstrap, "lat-altered", sent)
    assert got[0] == (OLD, 0) and got[sent - 1][0] > OLD and got[sent - 1][1] == 1   # stored batches keep theirs


async def test_a_dynamic_cluster_default_reaches_the_logs_of_topics_without_their_own_value(cluster):
    async with Admin(cluster.bootstrap) as admin:
        default = (ResourceType.BROKER, "")                                 # kafka-configs --entity-default
        await admin.incremental_alter_configs(default, {"log.message.timestamp.type": "LogAppendTime"})
        try:
            async def default_applied():
                return (await send(cluster.bootstrap, "lat-default", [b"x"]))[0].timestamp != OLD
            await wait_for(default_applied, timeout_s=30, what="the cluster default to reach the leader of lat-default")
            own = await send(cluster.bootstrap, "lat-own", [b"y"])
            assert own[0].timestamp == OLD                                   # its own CreateTime wins
        finally:
            await admin.incremental_alter_configs(default, {}, ["log.message.timestamp.type"])

        async def default_gone():
            return (await send(cluster.bootstrap, "lat-default", [b"z"]))[0].timestamp == OLD
        await wait_for(default_gone, timeout_s=30, what="the deleted default to leave lat-default")
