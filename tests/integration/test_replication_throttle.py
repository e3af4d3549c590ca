"""Replication throttles (KIP-73, docs/rules.md RQ1-RQ5) on a live cluster: a replica being added
by a reassignment copies the log only as fast as the throttle lets it, the throttled side says so
(ReplicaStatus, metrics), and the move completes once the throttle is lifted. Each test throttles to
1,000 B/s after more than one Fetch's worth of log (replica.fetch.max.bytes, 1 MiB), so the first Fetch
takes 1 MiB and the quota then holds the rest back for the quota's 11 windows, far longer than the
test looks."""
from __future__ import annotations

import pytest

from minibroker.client import Admin, Producer
from minibroker.client.types import TopicPartition
from minibroker.dynamic_config import ResourceType
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster

RECORDS, SIZE = 1600, 1000          # 1.6 MB: more than one Fetch of the partition


async def fill(bootstrap: str, topic: str) -> None:
    async with Producer(bootstrap, {"acks": "all", "linger.ms": "5"}) as p:
        for i in range(RECORDS):
            await p.send(topic, b"%06d" % i + b"x" * (SIZE - 6), partition=0)
        await p.flush()


async def replica(admin: Admin, c, broker: int, topic: str) -> dict:
    status = await admin.replica_status(c.broker_address(broker), [topic])
    return next(p for p in status["partitions"] if p["topic"] == topic)


async def completed(admin: Admin, tp: TopicPartition) -> bool:
    return tp not in await admin.list_partition_reassignments()


async def throttled_topic(admin: Admin, c, topic: str, side: str, replicas: str, broker: int) -> int:
    """`topic` on broker 1 alone, filled, with `side`'s throttle (leader or follower) on `replicas` and
    a rate of 1,000 B/s on `broker`; returns its log end offset."""
    await admin.create_topic(topic, assignments=[[1]])
    await fill(c.bootstrap, topic)
    await admin.incremental_alter_configs((ResourceType.TOPIC, topic),
                                          {f"{side}.replication.throttled.replicas": replicas})
    await admin.incremental_alter_configs((ResourceType.BROKER, str(broker)),
                                          {f"{side}.replication.throttled.rate": "1000"})
    return (await replica(admin, c, 1, topic))["leo"]


async def test_a_throttled_follower_leaves_the_partition_out_until_the_throttle_is_lifted(shared_cluster):
    c = shared_cluster
    topic, tp = "follower-throttled", TopicPartition("follower-throttled", 0)
    async with Admin(c.bootstrap) as admin:
        leo = await throttled_topic(admin, c, topic, "follower", "0:2", 2)
        try:
            await admin.alter_partition_reassignments({tp: [1, 2]})

            async def held_back() -> dict | None:
                r = await replica(admin, c, 2, topic)
                return r if (r.get("fetch_state") or {}).get("throttled") else None
            r = await until(held_back, timeout_s=30, what="broker 2 leaving the throttled partition out of its Fetch")
            assert 0 < r["leo"] < leo, "one Fetch's worth came before the quota was used up, not the whole log"
            assert not await completed(admin, tp)
            status = await admin.replica_status(c.broker_address(2))
            follower = status["throttles"]["follower"]
            assert follower["bound"] == 1000 and follower["byte_rate"] > 1000
            assert follower["throttled"] == {topic: [0]}
        finally:
            await admin.incremental_alter_configs((ResourceType.BROKER, "2"), {},
                                                  ["follower.replication.throttled.rate"])
        await until(lambda: completed(admin, tp), timeout_s=60, what="the move completing once unthrottled")
        r = await replica(admin, c, 2, topic)
        assert r["leo"] == leo and r["role"] == "follower"


async def test_a_throttled_leader_withholds_records_from_a_replica_outside_the_isr(shared_cluster):
    c = shared_cluster
    topic, tp = "leader-throttled", TopicPartition("leader-throttled", 0)
    async with Admin(c.bootstrap) as admin:
        leo = await throttled_topic(admin, c, topic, "leader", "0:1", 1)
        try:
            before = (await admin.replica_status(c.broker_address(1)))["throttles"]["leader"]["withheld"]
            await admin.alter_partition_reassignments({tp: [1, 3]})

            async def withheld() -> dict | None:
                leader = (await admin.replica_status(c.broker_address(1)))["throttles"]["leader"]
                return leader if leader["withheld"] > before else None
            leader = await until(withheld, timeout_s=30, what="broker 1 reading no records for broker 3")
            assert leader["bound"] == 1000 and leader["byte_rate"] > 1000
            assert (await replica(admin, c, 3, topic))["leo"] < leo
            lead = await replica(admin, c, 1, topic)
            assert 3 not in lead["isr"] and not await completed(admin, tp)
        finally:
            await admin.incremental_alter_configs((ResourceType.BROKER, "1"), {},
                                                  ["leader.replication.throttled.rate"])
        await until(lambda: completed(admin, tp), timeout_s=60, what="the move completing once unthrottled")
        assert (await replica(admin, c, 3, topic))["leo"] == leo
