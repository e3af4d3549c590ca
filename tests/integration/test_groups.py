"""minibroker's own group members (msgpack listener) on a real 3-broker cluster:
rebalances on join and leave, fencing answers from the coordinator only."""
from __future__ import annotations

import asyncio

import pytest

from minibroker.client import Admin
from minibroker.client.group import GroupConsumer
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode
from minibroker.protocol.api import ApiKey
from minibroker.testing.fixtures import cluster_factory  # noqa: F401
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster

MEMBER = {"heartbeat.interval.ms": "300", "session.timeout.ms": "6000", "auto.offset.reset": "earliest"}


@pytest.fixture
def gc(cluster_factory):
    return cluster_factory(overrides={"group.initial.rebalance.delay.ms": "0"})


async def keep_polling(members: list[GroupConsumer], stop: asyncio.Event) -> None:
    """Each member polls in its own loop, as separate applications would."""
    async def one(m: GroupConsumer) -> None:
        while not stop.is_set():
            await m.poll(timeout_ms=100)
    await asyncio.gather(*(one(m) for m in members))


async def test_members_share_partitions_after_a_join_and_take_them_back_after_a_leave(gc):
    async with Admin(gc.bootstrap) as admin:
        await admin.create_topic("grp", 4, 3)
    a = GroupConsumer(gc.bootstrap, {**MEMBER, "group.id": "g", "client.id": "a"})
    b = GroupConsumer(gc.bootstrap, {**MEMBER, "group.id": "g", "client.id": "b"})
    await a.consumer.start()
    await b.consumer.start()
    a.subscribe(["grp"])
    b.subscribe(["grp"])
    stop = asyncio.Event()
    task = asyncio.ensure_future(keep_polling([a], stop))
    try:
        await until(lambda: len(a.assigned) == 4, "a alone owns the four partitions", timeout_s=60)
        stop.set()
        await task
        stop = asyncio.Event()
        task = asyncio.ensure_future(keep_polling([a, b], stop))
        await until(lambda: len(a.assigned) == 2 and len(b.assigned) == 2 and a.generation == b.generation,
                    "a and b own two partitions each in one generation", timeout_s=60)
        assert set(a.assigned) | set(b.assigned) == {TopicPartition("grp", p) for p in range(4)}
        stop.set()
        await task
        await b.close()
        stop = asyncio.Event()
        task = asyncio.ensure_future(keep_polling([a], stop))
        await until(lambda: len(a.assigned) == 4, "a owns the four partitions again after b left", timeout_s=60)
    finally:
        stop.set()
        await task
        await a.close()
        await b.close()


async def test_only_the_coordinator_answers_for_a_group_others_say_not_coordinator(gc):
    async with Admin(gc.bootstrap) as admin:
        async def coordinator_found():             # the offsets topic is created on first use
            _, resp = await admin.net.request_any(ApiKey.FIND_COORDINATOR, {"key": "g2"})
            return None if resp["error"] else resp
        found = await until(coordinator_found, "a coordinator for g2", timeout_s=60, interval_s=0.1)
        other = next(b for b in gc.broker_ids if b != found["node_id"])
        host, port = gc.broker_address(other).rsplit(":", 1)
        resp = await admin.net.request_address((host, int(port)), ApiKey.HEARTBEAT,
                                               {"group_id": "g2", "generation_id": 1, "member_id": "m"})
        assert resp["error"] == ErrorCode.NOT_COORDINATOR
        join = {"group_id": "g2", "session_timeout_ms": 6000, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        addr = (found["host"], found["port"])
        async def loaded_join():
            resp = await admin.net.request_address(addr, ApiKey.JOIN_GROUP, join)
            return None if resp["error"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else resp
        first = await until(loaded_join, "the coordinator to finish loading", timeout_s=60, interval_s=0.1)
        assert first["error"] == ErrorCode.MEMBER_ID_REQUIRED and first["member_id"]
        joined = await admin.net.request_address(addr, ApiKey.JOIN_GROUP, {**join, "member_id": first["member_id"]})
        assert joined["error"] == 0 and joined["leader"] == first["member_id"] and joined["generation_id"] == 1
        stale = await admin.net.request_address(addr, ApiKey.HEARTBEAT, {
            "group_id": "g2", "generation_id": 0, "member_id": first["member_id"]})
        assert stale["error"] == ErrorCode.ILLEGAL_GENERATION
        unknown = await admin.net.request_address(addr, ApiKey.SYNC_GROUP, {
            "group_id": "g2", "generation_id": 1, "member_id": "nobody"})
        assert unknown["error"] == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_commit_to_a_partition_the_metadata_lacks_is_refused_and_the_rest_committed(gc):
    """Kafka's KafkaApis answers UNKNOWN_TOPIC_OR_PARTITION for a topic or partition its metadata
    lacks and commits the others (librdkafka's test 0030 commits to a topic that does not exist)."""
    async with Admin(gc.bootstrap) as admin:
        await admin.create_topic("known", 2, 3)

        async def coordinator_found():
            _, resp = await admin.net.request_any(ApiKey.FIND_COORDINATOR, {"key": "g3"})
            return None if resp["error"] else resp
        found = await until(coordinator_found, "a coordinator for g3", timeout_s=60, interval_s=0.1)
        addr = (found["host"], found["port"])
        commit = {"group_id": "g3", "topics": [
            {"topic": "known", "partitions": [{"partition": 1, "offset": 7}, {"partition": 5, "offset": 8}]},
            {"topic": "nowhere", "partitions": [{"partition": 0, "offset": 9}]}]}

        async def loaded_commit():
            resp = await admin.net.request_address(addr, ApiKey.OFFSET_COMMIT, commit)
            errors = {(t["topic"], p["partition"]): p["error"] for t in resp["topics"] for p in t["partitions"]}
            return None if errors[("known", 1)] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else errors
        errors = await until(loaded_commit, "the coordinator to finish loading", timeout_s=60, interval_s=0.1)
        assert errors == {("known", 1): ErrorCode.NONE, ("known", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ("nowhere", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        fetched = await admin.net.request_address(addr, ApiKey.OFFSET_FETCH, {"group_id": "g3", "topics": None})
        assert [(t["topic"], p["partition"], p["offset"]) for t in fetched["topics"] for p in t["partitions"]] \
            == [("known", 1, 7)]
