"""A topic deleted and created again under its name starts empty on every replica (KIP-516):
while the brokers run (the old directory is renamed at once, so the new log cannot open the
old files or lose its own to the old one's removal), when a broker misses the deletion and the
creation together (a paused broker gets both in one metadata batch) and when it was down
through both (its old log is removed when the new topic's metadata arrives)."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from minibroker.bench.catchup import wait_isr
from minibroker.client import Admin, Consumer, Producer
from minibroker.errors import KafkaError
from minibroker.records import build_batch, iter_records
from minibroker.storage import LogConfig
from minibroker.storage.log import PartitionLog
from minibroker.storage.manager import PARTITION_METADATA_FILE, LogManager, read_topic_id
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401
from minibroker.testing.wait import until

# As the bench's end-to-end topic: segments removed at once, so a slow removal cannot hide the race.
CONFIGS = {"segment.bytes": str(1 << 20), "file.delete.delay.ms": "0"}


async def _produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> None:
    async with Producer(bootstrap, {"acks": acks, "linger.ms": "0"}) as p:
        await p.partitions_for(topic)
        for v in values:
            await p.send_and_wait(topic, v, partition=0)


async def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[bytes]:
    out: list[bytes] = []
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest"}) as c:
        await c.assign_topic(topic, [0])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out += [r.value for r in await c.poll(timeout_ms=200)]
            if len(out) >= expected and c.caught_up():
                break
    return out


async def _gone(admin: Admin, topic: str) -> None:
    async def unlisted() -> bool:
        return topic not in await admin.list_topics()
    await until(unlisted, f"{topic} no longer listed after its deletion", timeout_s=30)


async def _described(admin: Admin, topic: str, not_id: str | None = None):
    """The topic's description once the broker that answers knows it (and, with `not_id`, knows the topic
    created after the one with that id): any broker may answer, and broker metadata is eventually consistent,
    as Kafka's, so a broker may not have replayed a creation yet."""
    async def known():
        try:
            (t,) = await admin.describe_topics([topic])
        except KafkaError:
            return None
        return t if t.topic_id != not_id else None
    return await until(known, f"{topic} in the metadata", timeout_s=30)


def _local_values(data_dir: str, topic: str) -> list[bytes]:
    """The records of a stopped broker's replica, read from its files."""
    lg = PartitionLog(os.path.join(data_dir, f"{topic}-0"), LogConfig())
    try:
        raw = lg.read(0, 1 << 30, lg.log_end_offset)
    finally:
        lg.close()
    return [r.value for r in iter_records(raw)]


@pytest.mark.cluster
async def test_a_topic_created_again_at_once_holds_only_its_own_records(cluster):
    async with Admin(cluster.bootstrap) as admin:
        for i in range(4):
            await admin.create_topic("again", assignments=[[1, 2, 3]], configs=CONFIGS)
            values = [f"round-{i}-{j}".encode() for j in range(20 + 10 * i)]
            await _produce(cluster.bootstrap, "again", values)
            assert await _read_all(cluster.bootstrap, "again", len(values)) == values
            await admin.delete_topics(["again"])
            await _gone(admin, "again")
    dirs = [os.path.join(cluster.layout.node_dir(f"broker-{b}"), "data") for b in (1, 2, 3)]

    def left() -> list[str]:                     # (the renamed directories are removed off the loop)
        return [n for d in dirs for n in os.listdir(d) if n.startswith("again-")]
    await until(lambda: not left(), "the deleted partitions' directories removed", timeout_s=30)


@pytest.mark.cluster
async def test_a_broker_that_missed_the_deletion_and_the_creation_drops_the_old_replica(cluster):
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("paused", assignments=[[1, 2, 3]], configs=CONFIGS)
        await _produce(cluster.bootstrap, "paused", [f"old-{j}".encode() for j in range(30)])
        assert await wait_isr(admin, "paused", {1, 2, 3})
        cluster.pause(3)                          # both changes reach it in one metadata batch
        try:
            assert await wait_isr(admin, "paused", None, without=3)     # (fenced: the new topic's ISR lacks it)
            await admin.delete_topics(["paused"])
            await _gone(admin, "paused")
            await admin.create_topic("paused", assignments=[[1, 2, 3]], configs=CONFIGS)
            await admin.wait_for_leaders("paused", timeout_ms=30_000)
            new = [f"new-{j}".encode() for j in range(12)]
            await _produce(cluster.bootstrap, "paused", new, acks="1")
        finally:
            cluster.resume(3)
        assert await wait_isr(admin, "paused", {1, 2, 3})     # caught up with the new topic's leader
        new.append(b"new-last")                                 # (acks=all: broker 3 has it too)
        await _produce(cluster.bootstrap, "paused", new[-1:])
    cluster.stop(3)
    data = os.path.join(cluster.layout.node_dir("broker-3"), "data")
    assert await asyncio.to_thread(_local_values, data, "paused") == new


@pytest.mark.cluster
async def test_a_broker_down_through_the_deletion_and_the_creation_removes_its_old_log(cluster):
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("down", assignments=[[1, 2, 3]], configs=CONFIGS)
        before = await _described(admin, "down")
        await _produce(cluster.bootstrap, "down", [f"old-{j}".encode() for j in range(25)])
        assert await wait_isr(admin, "down", {1, 2, 3})
        cluster.stop(3)
        data = os.path.join(cluster.layout.node_dir("broker-3"), "data")
        assert read_topic_id(os.path.join(data, "down-0")) == before.topic_id
        await admin.delete_topics(["down"])
        await _gone(admin, "down")
        await admin.create_topic("down", assignments=[[1, 2, 3]], configs=CONFIGS)
        await admin.wait_for_leaders("down", timeout_ms=30_000)
        after = await _described(admin, "down", not_id=before.topic_id)
        assert after.topic_id != before.topic_id
        new = [f"new-{j}".encode() for j in range(10)]
        await _produce(cluster.bootstrap, "down", new, acks="1")
        cluster.start_broker(3)
        await cluster.wait_running(brokers=[3])
        assert await wait_isr(admin, "down", {1, 2, 3})
        new.append(b"new-last")
        await _produce(cluster.bootstrap, "down", new[-1:])
    cluster.stop(3)
    assert read_topic_id(os.path.join(data, "down-0")) == after.topic_id
    assert await asyncio.to_thread(_local_values, data, "down") == new
    assert not [n for n in os.listdir(data) if n.endswith("-delete")]


def test_partition_metadata_is_kafkas_format(tmp_path):
    m = LogManager(str(tmp_path))
    m.get_or_create("t", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
    with open(tmp_path / "t-0" / PARTITION_METADATA_FILE, encoding="utf-8") as f:
        assert f.read() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"
    assert m.topic_id("t", 0) == "AAAAAAAAAAAAAAAAAAAAAA"
    gone = m.retire_log("t", 0)
    assert gone is not None and gone.endswith("-delete") and os.path.isdir(gone)
    assert not (tmp_path / "t-0").exists() and m.topic_id("t", 0) is None
    fresh = m.get_or_create("t", 0, topic_id="BBBBBBBBBBBBBBBBBBBBBB")
    assert fresh.log_end_offset == 0 and m.topic_id("t", 0) == "BBBBBBBBBBBBBBBBBBBBBB"
    m.shutdown({})
    again = LogManager(str(tmp_path))            # a `-delete` directory left by a stop is removed at start
    assert not os.path.exists(gone) and again.topic_id("t", 0) == "BBBBBBBBBBBBBBBBBBBBBB"
    again.shutdown({})


def test_a_retired_log_refuses_appends_and_its_flush_is_quiet(tmp_path):
    m = LogManager(str(tmp_path))
    lg = m.get_or_create("t", 0)
    lg.append_as_leader(build_batch([b"x"]), leader_epoch=0)
    gone = m.retire_log("t", 0)
    assert lg.closed and gone is not None
    assert lg.flush() == 0                        # nothing to make durable, no error
    with pytest.raises(KafkaError):
        lg.append_as_leader(build_batch([b"y"]), leader_epoch=0)
    m.purge(gone)
    assert not os.path.exists(gone)
    m.shutdown({})
