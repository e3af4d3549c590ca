"""ReplicaManager without sockets: one broker's RM on a real LogManager in a
tmp dir, requests handed straight to its handlers, metadata fed as records,
AlterPartition answered by a scripted controller. Covers fetch-response
assembly and the leader-side rules that do not need a live follower."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import types
from typing import Any

import pytest

from minibroker.broker.metadata_image import MetadataImage
from minibroker.broker.replica_manager import ReplicaManager
from minibroker.clock import wall_ms
from minibroker.config import DEFAULTS, Config, ConfigError
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, TopicRecord
from minibroker.records import build_batch, iter_records
from minibroker.storage import LogManager
from minibroker.storage.checkpoint import RECOVERY_POINT_FILE, OffsetCheckpointFile
from minibroker.testing.wait import until

T = "t"


class ScriptedController:
    """Answers AlterPartition submissions: accepts with its own ISR choice
    (`override`), or fails with `error`; records what was asked."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.error = 0
        self.override: list[int] | None = None
        self.gate: asyncio.Event | None = None
        self.answered = 0        # answers handed back (the submitter resumes in the same step)

    async def submit(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                     new_isr_with_epochs: list[dict], leader_recovery_state: int = 0) -> dict:
        self.calls.append({"leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
                           "isr": new_isr_with_epochs})
        if self.gate is not None:
            await self.gate.wait()
        isr = self.override or [e["broker_id"] for e in new_isr_with_epochs]
        self.answered += 1
        return {"partition": partition, "error": self.error, "leader_id": 1, "leader_epoch": leader_epoch,
                "isr": isr, "partition_epoch": partition_epoch + 1, "leader_recovery_state": 0}


class NoPeers:
    async def get(self, broker_id: int):
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "no peers in this test")

    def drop(self, broker_id: int) -> None:
        pass


class Broker:
    def __init__(self, tmp_path, config: dict[str, str] | None = None, lm: LogManager | None = None,
                 events: list[Event] | None = None) -> None:
        self.config = Config({**DEFAULTS, "node.id": "1", **(config or {})})
        self.image = MetadataImage(self.config)
        self.events: list[Event] = events if events is not None else []
        self.controller = ScriptedController()
        self.lm = lm or LogManager(str(tmp_path / "data"), event_sink=self.events.append)
        self.now = wall_ms()          # the batches carry the real clock's timestamps (KIP-937's window)
        self.rm = ReplicaManager(node_id=1, config=self.config, log_manager=self.lm, image=self.image,
                                 alter_partition=self.controller, peers=NoPeers(),
                                 events=self.events.append, broker_epoch=lambda: 11, clock=lambda: self.now)
        self.offset = 0
        self.aborted: list[str] = []
        self.ctx = types.SimpleNamespace(authenticated=False, conn=types.SimpleNamespace(abort=self.aborted.append))
        self.peer_ctx = types.SimpleNamespace(authenticated=True, conn=None)

    def publish(self, *records: Any) -> None:
        batch = []
        for r in records:
            batch.append((self.offset, r))
            self.offset += 1
        delta = self.image.apply(batch, None, self.offset)
        self.rm.on_metadata(delta.partitions, delta.brokers, self.now)

    def setup(self, replicas=(1, 2), isr=None, *, epoch: int = 0, partitions: int = 1,
              configs: dict[str, str] | None = None, racks: dict[int, str] | None = None) -> None:
        racks = racks or {}
        self.publish(*(BrokerRecord(b, 10 + b, racks.get(b), (Endpoint("PLAINTEXT", "127.0.0.1", 1),),
                                    fenced=False) for b in (1, 2, 3)),
                     TopicRecord(T, "id", partitions, dict(configs or {})),
                     *(PartitionRecord(T, p, tuple(replicas), tuple(isr or replicas), replicas[0], epoch, 0)
                       for p in range(partitions)))

    def part(self, p: int = 0):
        return self.rm.partition(T, p)

    async def produce(self, values: list[bytes], acks: int = 1, *, partition: int = 0, timeout_ms: int = 30_000,
                      records: bytes | None = None) -> dict | None:
        body = {"acks": acks, "timeout_ms": timeout_ms, "topics": [{"topic": T, "partitions": [
            {"partition": partition, "records": records if records is not None else build_batch(values)}]}]}
        return await self.rm.handle_produce(self.ctx, body)

    async def fetch(self, parts: list[dict], *, replica_id: int = -1, max_wait_ms: int = 0, min_bytes: int = 1,
                    max_bytes: int = 50 << 20, rack: str = "", broker_epoch: int = -1) -> dict:
        body = {"replica_id": replica_id, "broker_epoch": broker_epoch, "max_wait_ms": max_wait_ms,
                "min_bytes": min_bytes, "max_bytes": max_bytes, "rack_id": rack,
                "topics": [{"topic": T, "partitions": [
                    {"current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20, **p} for p in parts]}]}
        return await self.rm.handle_fetch(self.peer_ctx if replica_id >= 0 else self.ctx, body)

    async def close(self) -> None:
        await self.rm.shutdown()


async def make_broker(tmp_path, config: dict[str, str] | None = None) -> Broker:
    """A Broker whose LogManager was opened off the event loop (it may fsync)."""
    events: list[Event] = []
    lm = await asyncio.to_thread(LogManager, str(tmp_path / "data"), event_sink=events.append)
    return Broker(tmp_path, config, lm, events)


@pytest.fixture
async def broker(tmp_path):
    b = await make_broker(tmp_path)
    yield b
    await b.close()


def entries(resp: dict) -> list[dict]:
    return [p for t in resp["topics"] for p in t["partitions"]]


# ------------------------------------------------------------------ fetch responses


async def test_fetch_partition_entry_carries_every_field_of_the_contract(broker):
    broker.setup(replicas=(1,))
    await broker.produce([b"a", b"b"])
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 0}]))
    assert set(e) == {"partition", "error", "high_watermark", "last_stable_offset", "log_start_offset",
                      "diverging_epoch", "preferred_read_replica", "current_leader", "records"}
    assert (e["error"], e["high_watermark"], e["last_stable_offset"], e["log_start_offset"]) == (0, 2, 2, 0)
    assert (e["diverging_epoch"], e["preferred_read_replica"], e["current_leader"]) == (None, -1, None)
    assert [r.value for r in iter_records(e["records"])] == [b"a", b"b"]


async def test_follower_fetch_reports_the_hw_from_before_its_own_effect(broker):
    broker.setup()
    await broker.produce([b"a"])
    assert broker.part().hw == 0
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 1, "current_leader_epoch": 0}],
                                      replica_id=2, broker_epoch=12))
    assert e["error"] == 0 and e["high_watermark"] == 0      # F7: the old HW
    assert broker.part().hw == 1                              # ...though this fetch moved it


async def test_consumers_read_to_the_hw_and_followers_to_the_leo(broker):
    broker.setup()
    await broker.produce([b"a"])
    (c,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 0}]))
    assert c["records"] == b"" and c["error"] == 0            # HW 0: nothing committed yet
    (f,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}],
                                      replica_id=2))
    assert [r.value for r in iter_records(f["records"])] == [b"a"]


async def test_consumer_offset_between_hw_and_leo_is_empty_and_beyond_leo_out_of_range(broker):
    broker.setup()
    await broker.produce([b"a", b"b"])
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 1}]))
    assert (e["error"], e["records"]) == (0, b"")
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 3}]))
    assert e["error"] == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_first_partition_may_exceed_max_bytes_and_later_ones_get_the_remaining_budget(broker):
    broker.setup(replicas=(1,), partitions=2)
    big = [b"x" * 500]
    await broker.produce(big, partition=0)
    await broker.produce(big, partition=1)
    resp = await broker.fetch([{"partition": 0, "fetch_offset": 0}, {"partition": 1, "fetch_offset": 0}],
                              max_bytes=100)
    e0, e1 = entries(resp)
    assert len(e0["records"]) > 100 and e1["records"] == b""                  # KIP-74


async def test_an_error_answers_at_once_even_with_a_long_max_wait(broker):
    broker.setup()
    resp = await asyncio.wait_for(
        broker.fetch([{"partition": 0, "fetch_offset": 0}, {"partition": 5, "fetch_offset": 0}],
                     max_wait_ms=60_000), 5)
    assert [e["error"] for e in entries(resp)] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


async def test_a_diverging_epoch_answer_holds_no_records_and_leaves_follower_state(broker):
    broker.setup(epoch=0)
    await broker.produce([b"a", b"b"])
    broker.publish(dataclasses.replace(broker.image.partitions[(T, 0)], leader_epoch=1, partition_epoch=1))
    before = broker.part().core.followers[2]
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 3, "current_leader_epoch": 1,
                                        "last_fetched_epoch": 0}], replica_id=2))
    assert e["diverging_epoch"] == {"epoch": 0, "end_offset": 2} and e["records"] == b""
    assert broker.part().core.followers[2] == before


async def test_follower_fetch_below_the_log_start_is_out_of_range_and_not_recorded(broker):
    broker.setup(replicas=(1, 2))
    await broker.produce([b"a", b"b", b"c"])
    await broker.fetch([{"partition": 0, "fetch_offset": 3, "current_leader_epoch": 0}], replica_id=2)
    broker.part().log.maybe_increment_log_start_offset(2)          # e.g. retention, which tells the partition
    broker.part().on_log_start_moved()
    before = broker.part().core.followers[2]
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 1, "current_leader_epoch": 0}],
                                      replica_id=2))
    assert e["error"] == ErrorCode.OFFSET_OUT_OF_RANGE and e["log_start_offset"] == 2
    assert broker.part().core.followers[2] == before


async def test_parked_consumer_fetch_completes_at_max_wait_with_the_current_hw(broker):
    broker.setup()
    await broker.produce([b"a"])
    (e,) = entries(await broker.fetch([{"partition": 0, "fetch_offset": 0}], max_wait_ms=20))
    assert (e["error"], e["records"], e["high_watermark"]) == (0, b"", 0)
    assert len(broker.rm.purgatory) == 0


async def test_parked_fetch_answers_not_leader_when_leadership_moves_away(broker):
    broker.setup()
    parked = asyncio.ensure_future(broker.fetch([{"partition": 0, "fetch_offset": 0}], max_wait_ms=60_000))
    await until(lambda: len(broker.rm.purgatory) == 1, "the fetch to park")
    broker.publish(dataclasses.replace(broker.image.partitions[(T, 0)], leader=2, leader_epoch=1,
                                       partition_epoch=1))
    (e,) = entries(await asyncio.wait_for(parked, 5))
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert e["current_leader"] == {"leader_id": 2, "leader_epoch": 1}


async def test_replica_fetch_needs_an_authenticated_connection(broker):
    broker.setup()
    body = {"replica_id": 2, "broker_epoch": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "rack_id": "", "topics": []}
    with pytest.raises(KafkaError) as exc:
        await broker.rm.handle_fetch(broker.ctx, body)
    assert exc.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# ------------------------------------------------------------------ produce


async def test_acks_all_completes_when_the_follower_fetch_moves_the_hw(broker):
    broker = broker
    broker.setup(replicas=(1, 2), configs={"min.insync.replicas": "2"})
    core = broker.part().core
    pending = asyncio.ensure_future(broker.produce([b"a"], acks=-1))
    await asyncio.sleep(0)
    assert core.waiting == 1
    await broker.fetch([{"partition": 0, "fetch_offset": 1, "current_leader_epoch": 0}], replica_id=2)
    e = entries(await asyncio.wait_for(pending, 5))[0]
    assert (e["error"], e["base_offset"]) == (0, 0)


async def test_delete_records_waits_for_the_followers_log_start_and_refuses_offsets_above_the_hw(broker):
    """Kafka's DelayedDeleteRecords: the leader's log start moves at once; the answer (the low watermark)
    waits until the follower's Fetch reports its log start there; -1 is the HW; above it, out of range."""
    broker.setup(replicas=(1, 2))
    for v in (b"a", b"b", b"c", b"d"):
        await broker.produce([v])
    await broker.fetch([{"partition": 0, "fetch_offset": 4, "current_leader_epoch": 0, "log_start_offset": 0}],
                       replica_id=2)                                  # HW 4, the follower's log start 0
    part = broker.part()

    def delete(offset: int, timeout_ms: int = 30_000) -> asyncio.Future:
        return asyncio.ensure_future(broker.rm.handle_delete_records(
            {"topics": [{"topic": T, "partitions": [{"partition": 0, "offset": offset}]}], "timeout_ms": timeout_ms}))
    assert entries(await delete(5))[0]["error"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert part.log.log_start_offset == 0
    pending = delete(2)
    await until(lambda: part.log.log_start_offset == 2, what="the leader's log start to move")
    assert not pending.done()
    await broker.fetch([{"partition": 0, "fetch_offset": 4, "current_leader_epoch": 0, "log_start_offset": 2}],
                       replica_id=2)
    assert entries(await asyncio.wait_for(pending, 5))[0] == {"partition": 0, "low_watermark": 2, "error": 0}
    late = entries(await delete(-1, timeout_ms=50))[0]                # up to the HW; the follower stays at 2
    assert (late["error"], part.log.log_start_offset) == (ErrorCode.REQUEST_TIMED_OUT, 4)
    assert broker.rm._low_watermark_waits == {}
    waiting = delete(4)                                               # the follower still reports 2
    await until(lambda: broker.rm._low_watermark_waits, what="the DeleteRecords to wait")
    broker.publish(PartitionRecord(T, 0, (1, 2), (1, 2), 2, 1, 1))   # broker 2 leads now
    moved = entries(await asyncio.wait_for(waiting, 5))[0]           # at once, not at the 30 s timeout
    assert moved["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and broker.rm._low_watermark_waits == {}


async def test_acks_all_times_out_while_the_follower_is_missing_and_the_record_stays(broker):
    broker.setup(replicas=(1, 2))
    e = entries(await broker.produce([b"a"], acks=-1, timeout_ms=20))[0]
    assert e["error"] == ErrorCode.REQUEST_TIMED_OUT and e["base_offset"] == 0
    assert broker.part().leo == 1 and broker.part().core.waiting == 0


async def test_leadership_loss_fails_parked_acks_all_with_not_leader(broker):
    broker.setup(replicas=(1, 2))
    pending = asyncio.ensure_future(broker.produce([b"a"], acks=-1))
    await asyncio.sleep(0)
    broker.publish(dataclasses.replace(broker.image.partitions[(T, 0)], leader=2, leader_epoch=1,
                                       partition_epoch=1))
    e = entries(await asyncio.wait_for(pending, 5))[0]
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_0_returns_nothing_and_acks_0_failure_aborts_the_connection(broker):
    broker.setup(replicas=(1,))
    assert await broker.produce([b"a"], acks=0) is None and not broker.aborted
    assert await broker.produce([b"a"], acks=0, partition=9) is None
    assert broker.aborted


async def test_fsync_before_ack_flushes_the_log_before_answering(tmp_path):
    b = await make_broker(tmp_path, {"minibroker.fsync.before.ack": "true"})
    try:
        b.setup(replicas=(1,))
        e = entries(await b.produce([b"a"], acks=1))[0]
        assert e["error"] == 0 and b.part().log.recovery_point >= 1
    finally:
        await b.close()


# ------------------------------------------------------------------ ISR changes


async def test_expansion_is_proposed_with_broker_epochs_and_the_controllers_answer_is_adopted(broker):
    broker.setup(replicas=(1, 2, 3), isr=(1,))
    broker.controller.override = [1, 3]           # the controller may answer differently (I6)
    await broker.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}], replica_id=2,
                       broker_epoch=12)
    core = broker.part().core
    assert core.maximal_isr == (1, 2)             # counts at once, before the answer
    await until(lambda: broker.controller.calls, "the AlterPartition request")
    assert broker.controller.calls[0]["isr"] == [{"broker_id": 1, "broker_epoch": 11},
                                                {"broker_id": 2, "broker_epoch": 12}]
    await until(lambda: core.pending is None, "the controller's answer")
    assert core.isr == (1, 3) and core.partition_epoch == 1


async def test_rejected_expansion_reverts_to_the_committed_isr(broker):
    broker.setup(replicas=(1, 2), isr=(1,))
    broker.controller.error = int(ErrorCode.INELIGIBLE_REPLICA)
    await broker.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}], replica_id=2)
    core = broker.part().core
    assert core.maximal_isr == (1, 2)
    await until(lambda: core.pending is None, "the rejection")
    assert core.maximal_isr == (1,)


async def test_stale_alter_partition_answer_after_new_metadata_is_ignored(broker):
    broker.setup(replicas=(1, 2), isr=(1,))
    broker.controller.gate = asyncio.Event()
    await broker.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}], replica_id=2)
    broker.publish(dataclasses.replace(broker.image.partitions[(T, 0)], isr=(1,), partition_epoch=3))
    broker.controller.gate.set()
    await until(lambda: broker.controller.answered, "the stale answer to arrive")
    core = broker.part().core
    assert core.isr == (1,) and core.partition_epoch == 3


async def test_follower_in_controlled_shutdown_stops_fetching_once_out_of_the_isr(broker):
    broker.setup(replicas=(2, 1), isr=(2, 1))
    assert broker.rm.fetchers.state((T, 0)) is not None          # a follower of 2, fetching
    rec = broker.image.partitions[(T, 0)]
    broker.publish(BrokerRecord(1, 11, None, (Endpoint("PLAINTEXT", "127.0.0.1", 1),), fenced=False,
                                in_controlled_shutdown=True),
                   dataclasses.replace(rec, isr=(2,), partition_epoch=rec.partition_epoch + 1))
    assert broker.rm.fetchers.state((T, 0)) is None              # T2: stopped, not restarted


async def test_follower_of_a_leaderless_partition_does_not_fetch(broker):
    broker.setup(replicas=(2, 1), isr=(2, 1))
    rec = broker.image.partitions[(T, 0)]
    broker.publish(dataclasses.replace(rec, leader=-1, leader_epoch=rec.leader_epoch + 1,
                                       partition_epoch=rec.partition_epoch + 1))
    assert broker.rm.fetchers.state((T, 0)) is None


async def test_isr_check_shrinks_a_follower_that_stopped_catching_up(broker):
    broker.setup(replicas=(1, 2))
    await broker.produce([b"a"])
    broker.now += 30_001
    broker.rm._isr_check()
    await until(lambda: broker.controller.calls, "the shrink proposal")
    assert [e["broker_id"] for e in broker.controller.calls[0]["isr"]] == [1]


async def test_fenced_broker_is_not_isr_eligible(broker):
    broker.setup(replicas=(1, 2), isr=(1,))
    broker.publish(BrokerRecord(2, 12, None, (Endpoint("PLAINTEXT", "127.0.0.1", 1),), fenced=True))
    await broker.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}], replica_id=2)
    assert not broker.controller.calls and broker.part().core.isr == (1,)


async def test_lesson_profile_commits_isr_changes_at_once_and_tells_the_controller(tmp_path):
    b = await make_broker(tmp_path, {"minibroker.semantics": "lesson"})
    try:
        b.setup(replicas=(1, 2), isr=(1,))
        assert b.part().core.profile.name == "lesson"
        await b.fetch([{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 0}], replica_id=2)
        assert b.part().core.isr == (1, 2)
        await until(lambda: b.controller.calls, "the controller to be told")
        assert b.controller.calls[0]["partition_epoch"] == 0
    finally:
        await b.close()


def test_unknown_semantics_or_selector_is_a_config_error(tmp_path):
    for bad in ({"minibroker.semantics": "raft"}, {"replica.selector.class": "Nope"}):
        with pytest.raises(ConfigError):
            Broker(tmp_path, bad)


# ------------------------------------------------------------------ metadata


async def test_stale_partition_epoch_is_ignored(broker):
    broker.setup(replicas=(1, 2))
    rec = broker.image.partitions[(T, 0)]
    broker.publish(dataclasses.replace(rec, isr=(1,), partition_epoch=2))
    broker.rm.on_metadata([dataclasses.replace(rec, isr=(1, 2), partition_epoch=1)], [], broker.now)
    assert broker.part().core.isr == (1,)


async def test_reassigned_away_replica_is_stopped_and_its_log_deleted(broker):
    broker.setup(replicas=(1, 2))
    await broker.produce([b"a"])
    broker.publish(dataclasses.replace(broker.image.partitions[(T, 0)], replicas=(2, 3), isr=(2, 3),
                                       leader=2, leader_epoch=1, partition_epoch=1))
    assert broker.part() is None
    await until(lambda: (T, 0) not in broker.lm, "the log to be deleted")


async def test_replica_status_reports_the_leaders_view(broker):
    broker.setup(replicas=(1, 2))
    await broker.produce([b"a"])
    (s,) = broker.rm.replica_status(None)["partitions"]
    assert (s["role"], s["leo"], s["hw"], s["isr"], s["pending"]) == ("leader", 1, 0, [1, 2], None)
    assert [r["broker_id"] for r in s["replicas"]] == [1, 2] and s["replicas"][1]["leo"] == -1
    assert broker.rm.leaderships() == [(T, 0)] and broker.rm.high_watermark(T, 0) == 0


# ------------------------------------------------------------------ replica fetch sessions (KS3)


async def session_fetch(broker: Broker, parts: list[dict], session_id: int, epoch: int, *,
                        max_wait_ms: int = 0) -> dict:
    body = {"replica_id": 2, "broker_epoch": 12, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 50 << 20, "rack_id": "", "session_id": session_id, "session_epoch": epoch,
            "forgotten_topics": None,
            "topics": [{"topic": T, "partitions": [
                {"current_leader_epoch": 0, "last_fetched_epoch": -1, "log_start_offset": 0,
                 "partition_max_bytes": 1 << 20, **p} for p in parts]}] if parts else []}
    return await broker.rm.handle_fetch(broker.peer_ctx, body)


def watch_stamps(monkeypatch, reads: list[tuple[str, int]]) -> None:
    """Record each partition whose state a replica read takes or compares (its stamp)."""
    from minibroker.broker import replica_manager
    stamp = replica_manager._stamp
    monkeypatch.setattr(replica_manager, "_stamp", lambda part: reads.append(part.key) or stamp(part))


async def test_an_idle_session_fetch_skips_the_quiet_partitions_and_still_keeps_the_follower_caught_up(
        broker, monkeypatch):
    broker.setup(replicas=(1, 2), partitions=3)
    opened = await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0)
    sid = opened["session_id"]
    assert sid and len(entries(opened)) == 3
    assert entries(await session_fetch(broker, [], sid, 1)) == []      # every partition quiet from here on
    reads: list[tuple[str, int]] = []
    watch_stamps(monkeypatch, reads)
    broker.now += 5_000
    assert entries(await session_fetch(broker, [], sid, 2)) == []
    assert reads == [], "nothing moved: no quiet partition is read again"
    for p in range(3):                                                  # I3/L1: the fetch still counts
        f = broker.part(p).core.followers[2]
        assert (f.last_fetch_ms, f.last_caught_up_ms) == (broker.now, broker.now)


async def test_a_write_to_a_quiet_partition_wakes_the_parked_session_fetch_with_its_records(broker):
    broker.setup(replicas=(1, 2), partitions=3)
    sid = (await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0))["session_id"]
    await session_fetch(broker, [], sid, 1)
    parked = asyncio.ensure_future(session_fetch(broker, [], sid, 2, max_wait_ms=30_000))
    await until(lambda: broker.rm.purgatory.watching((T, 1)), "the session fetch to park on every partition")
    await broker.produce([b"x"], partition=1)
    (e,) = entries(await asyncio.wait_for(parked, 10))
    assert e["partition"] == 1 and [r.value for r in iter_records(e["records"])] == [b"x"]
    (e,) = entries(await session_fetch(broker, [{"partition": 1, "fetch_offset": 1}], sid, 3))
    assert (e["partition"], e["high_watermark"], e["records"]) == (1, 0, b"")    # F7: the HW before its effect
    assert broker.part(1).hw == 1
    (e,) = entries(await session_fetch(broker, [], sid, 4))
    assert (e["partition"], e["high_watermark"]) == (1, 1), "the HW it moved is news for the follower (KS4)"
    assert entries(await session_fetch(broker, [], sid, 5)) == []


async def test_the_next_session_fetch_reads_only_the_quiet_partitions_that_moved_since(broker, monkeypatch):
    broker.setup(replicas=(1, 2), partitions=3)
    sid = (await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0))["session_id"]
    await session_fetch(broker, [], sid, 1)
    await broker.produce([b"x"], partition=0)             # the follower has not fetched it yet
    reads: list[tuple[str, int]] = []
    watch_stamps(monkeypatch, reads)
    (e,) = entries(await session_fetch(broker, [], sid, 2))
    assert e["partition"] == 0 and [r.value for r in iter_records(e["records"])] == [b"x"]
    assert set(reads) == {(T, 0)}, "the purgatory's change log names only partition 0"
    broker.rm.purgatory.complete_all()                    # no change count before this is answered for
    reads.clear()
    await session_fetch(broker, [], sid, 3)
    assert set(reads) == {(T, 0), (T, 1), (T, 2)}, "every quiet partition's state is compared again"


# ------------------------------------------------------------------ durability timers


async def test_flush_timer_rewrites_the_recovery_point_checkpoint_soon_after_a_truncation_below_it(broker):
    broker.setup(replicas=(1,))
    for v in (b"a", b"b", b"c"):
        await broker.produce([v])
    lg = broker.part().log
    await asyncio.to_thread(lg.flush)
    await asyncio.to_thread(broker.lm.checkpoint_offsets)
    rp_file = OffsetCheckpointFile(os.path.join(broker.lm.data_dir, RECOVERY_POINT_FILE))
    assert rp_file.read() == {(T, 0): 3}
    lg.truncate_to(1)                              # nothing left to flush, epoch cache unchanged
    assert lg.recovery_point_lowered and not lg.needs_flush(broker.now) and not lg.epoch_cache_dirty
    await broker.rm._flush_due()
    assert rp_file.read() == {(T, 0): 1}
    assert not lg.recovery_point_lowered


async def test_acks_all_is_not_acknowledged_when_leadership_moves_while_the_produce_yields(broker):
    """A Produce yields to the loop every REQUEST_SLICE partitions; if metadata makes another
    broker leader of an already appended partition meanwhile, that partition's acks=all entry
    answers NOT_LEADER_OR_FOLLOWER (no waiter existed yet to be failed), never success."""
    from minibroker.broker.replica_manager import REQUEST_SLICE
    n = REQUEST_SLICE + 1
    broker.setup(replicas=(1, 2), isr=(1,), partitions=n)
    body = {"acks": -1, "timeout_ms": 2000, "topics": [{"topic": T, "partitions": [
        {"partition": p, "records": build_batch([b"v"])} for p in range(n)]}]}
    task = asyncio.ensure_future(broker.rm.handle_produce(broker.ctx, body))
    asyncio.get_running_loop().call_soon(
        broker.publish, PartitionRecord(T, 0, (1, 2), (2,), 2, 1, 1))        # runs during the first yield
    resp = await task
    parts = {e["partition"]: e for e in resp["topics"][0]["partitions"]}
    assert parts[0]["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert all(parts[p]["error"] == 0 for p in range(1, n))
    assert broker.part(0).role == "follower"


async def test_quiet_partitions_get_the_follower_fetch_rule_at_most_every_quiet_refresh_ms(broker):
    """KS3 simplified: an incremental Fetch refreshes the follower's fetch times on the session's
    quiet partitions only when the last refresh is quiet_refresh_ms old, not on every Fetch."""
    broker.setup(replicas=(1, 2), partitions=3)
    sid = (await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0))["session_id"]
    await session_fetch(broker, [], sid, 1)
    interval = broker.rm.quiet_refresh_ms
    assert 0 < interval <= broker.rm.lag_max_ms // 20
    broker.now += 5_000
    await session_fetch(broker, [], sid, 2)
    refreshed = broker.now
    broker.now += interval - 1
    await session_fetch(broker, [], sid, 3)
    assert {broker.part(p).core.followers[2].last_fetch_ms for p in range(3)} == {refreshed}
    broker.now += 1
    await session_fetch(broker, [], sid, 4)
    assert {broker.part(p).core.followers[2].last_caught_up_ms for p in range(3)} == {broker.now}


async def test_a_parked_session_fetch_whose_own_read_moved_a_hw_rereads_only_what_moved(broker, monkeypatch):
    """The Fetch that acknowledges a write moves that partition's HW while it is read: the wake-up
    after it parks re-reads that partition and the one written, not every quiet partition."""
    broker.setup(replicas=(1, 2), partitions=3)
    await broker.produce([b"x"], partition=0)
    sid = (await session_fetch(broker, [{"partition": p, "fetch_offset": 0} for p in range(3)], 0, 0))["session_id"]
    await session_fetch(broker, [], sid, 1)
    reads: list[tuple[str, int]] = []
    watch_stamps(monkeypatch, reads)
    parked = asyncio.ensure_future(session_fetch(broker, [{"partition": 0, "fetch_offset": 1}], sid, 2,
                                                 max_wait_ms=30_000))
    await until(lambda: broker.rm.purgatory.watching((T, 2)), "the session fetch to park")
    assert broker.part(0).hw == 1
    reads.clear()
    await broker.produce([b"y"], partition=2)
    got = {e["partition"] for e in entries(await asyncio.wait_for(parked, 10))}
    assert 2 in got and (T, 1) not in reads


async def test_a_new_empty_partition_gets_no_producer_snapshot_until_it_has_batches(broker):
    """A snapshot of an empty state at the log start spares a recovery nothing: 1,000 new idle
    partitions would cost 3,000 files with two fsyncs each on the first offset checkpoint."""
    from minibroker.storage.producer_snapshot import read_snapshot
    broker.setup(replicas=(1,), partitions=2)
    await broker.produce([b"a"], partition=1)
    await broker.rm._snapshot_producers()
    assert read_snapshot(broker.part(0).log.directory) is None
    assert read_snapshot(broker.part(1).log.directory)["through"] == 1


async def test_idle_producers_expire_on_the_periodic_check_and_their_snapshot_is_rewritten(tmp_path):
    """P-EXPIRE: producer.id.expiration.ms after its last batch's timestamp (a dynamic broker config,
    read at each check), a producer's state goes; its next batch is accepted at any sequence; the snapshot
    written before is rewritten, and a replica loaded later does not bring it back."""
    from minibroker.metadata import CLUSTER_DEFAULT, BrokerConfigRecord
    from minibroker.storage.producer_snapshot import read_snapshot
    b = await make_broker(tmp_path, {"producer.id.expiration.check.interval.ms": "20"})
    b.setup(replicas=(1,))
    pid = 77

    def idem(seq: int) -> bytes:
        return build_batch([b"v%d" % seq], timestamp_ms=b.now, producer_id=pid, producer_epoch=0, base_sequence=seq)
    assert entries(await b.produce([], records=idem(0)))[0]["error"] == 0
    await b.rm._snapshot_producers()
    directory = b.part().log.directory
    assert [p[0] for p in read_snapshot(directory)["producers"]] == [pid]
    await b.rm.start()
    try:
        assert entries(await b.produce([], records=idem(5)))[0]["error"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        b.now += 60_000
        b.publish(BrokerConfigRecord(CLUSTER_DEFAULT, {"producer.id.expiration.ms": "60000"}))
        await until(lambda: b.part().producers.entry(pid) is None, timeout_s=10, what="the producer to expire")
        assert entries(await b.produce([], records=idem(5)))[0]["base_offset"] == 1     # any sequence now
        await b.rm._snapshot_producers()
        assert [p[0] for p in read_snapshot(directory)["producers"]] == [pid]
        b.now += 60_000                                # it expires in its turn, with nothing appended since
        await until(lambda: b.part().producers.entry(pid) is None, timeout_s=10, what="the second expiry")
        await b.rm._snapshot_producers()
        assert read_snapshot(directory)["producers"] == []                       # rewritten without it
    finally:
        await b.close()
    b2 = await make_broker(tmp_path)
    b2.now = b.now
    b2.setup(replicas=(1,))
    try:
        assert b2.part().producers.entry(pid) is None and b2.part().log.log_end_offset == 2
    finally:
        await b2.close()


async def test_a_replica_loaded_after_its_producers_expired_does_not_bring_them_back(tmp_path):
    b = await make_broker(tmp_path)
    b.setup(replicas=(1,))
    old = b.now - 2 * 86_400_000                   # CreateTime two days back: Kafka expires it at once too
    batch = build_batch([b"x"], timestamp_ms=old, producer_id=5, producer_epoch=0, base_sequence=0)
    assert entries(await b.produce([], records=batch))[0]["error"] == 0
    assert b.part().producers.entry(5) is not None           # until the next check
    await b.rm._snapshot_producers()
    await b.close()
    b2 = await make_broker(tmp_path)
    b2.setup(replicas=(1,))
    try:
        assert b2.part().producers.entry(5) is None
    finally:
        await b2.close()


# ------------------------------------------------------------------ retention (D10)


async def test_retention_retires_segments_and_unlinks_them_off_the_loop_after_file_delete_delay_ms(tmp_path):
    b = await make_broker(tmp_path, {"log.retention.check.interval.ms": "20"})
    await b.rm.start()
    try:
        b.setup(replicas=(1,), configs={"segment.bytes": "2000", "retention.bytes": "4000",
                                        "file.delete.delay.ms": "300"})
        for _ in range(20):
            assert entries(await b.produce([b"x" * 200] * 2, acks=1))[0]["error"] == 0
        part_dir = tmp_path / "data" / f"{T}-0"

        def names(suffix: str) -> list[str]:
            return [n for n in os.listdir(part_dir) if n.endswith(suffix)]
        await until(lambda: names(".log.deleted"), "retention to retire a segment")
        assert b.part().log.log_start_offset > 0
        assert all(int(n[:20]) < b.part().log.log_start_offset for n in names(".deleted"))
        await until(lambda: not names(".deleted") and len(b.lm.trash) == 0, "the delayed unlink")
        assert sorted(int(n[:20]) for n in names(".log")) == b.part().log.segment_base_offsets
    finally:
        await b.close()


# ------------------------------------------------------------------ request state


async def test_a_fetch_or_produce_is_freed_when_it_answers_without_the_cyclic_gc(broker):
    """A parked request's state refers to its Reply and the Reply's cancel hook back to it; those
    cycles are cut when it answers, so a fetch's records are freed at once (the broker's cyclic GC
    runs rarely: a cycle per fetch held 128 MiB of responses from a client that never reads)."""
    import gc
    from minibroker.broker.replica_manager import _FetchCall, _ParkedProduce

    def alive() -> int:
        return sum(isinstance(o, (_FetchCall, _ParkedProduce)) for o in gc.get_objects())
    broker.setup(replicas=(1, 2), configs={"min.insync.replicas": "2"})
    gc.collect()
    gc.disable()
    try:
        produced = asyncio.ensure_future(broker.produce([b"a"], acks=-1))          # parks
        await asyncio.sleep(0)
        parked = asyncio.ensure_future(broker.fetch([{"partition": 0, "fetch_offset": 1, "current_leader_epoch": 0}],
                                                    replica_id=2, max_wait_ms=60_000))
        await asyncio.sleep(0)            # the follower's fetch moved the HW: the produce answered, the fetch parked
        assert entries(await asyncio.wait_for(produced, 5))[0]["error"] == 0
        await broker.produce([b"b"], acks=1)                                        # wakes the parked fetch
        assert entries(await asyncio.wait_for(parked, 5))[0]["records"]
        await broker.fetch([{"partition": 0, "fetch_offset": 0}])                  # answered at once
        await broker.fetch([{"partition": 0, "fetch_offset": 1}], max_wait_ms=1)   # answered at max_wait_ms
        assert alive() == 0
    finally:
        gc.enable()
