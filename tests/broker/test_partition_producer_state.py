"""The idempotent producer on a real PartitionLog: the leader dedups from the
batch header, followers rebuild the state from the batches they replicate,
recovery rebuilds it from the snapshot plus the headers after it (or from
the headers alone), and truncation forgets what it removed."""
from __future__ import annotations

import os

import pytest

from minibroker.broker.partition import Partition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.metadata import PartitionRecord
from minibroker.records import build_batch, iter_records
from minibroker.replication import KAFKA
from minibroker.storage import LogConfig, PartitionLog
from minibroker.storage.producer_snapshot import read_snapshot, snapshot_path, write_snapshot

PID = 4242


def open_partition(directory: str, node_id: int = 1) -> Partition:
    return Partition("t", 0, node_id=node_id, log=PartitionLog(directory, LogConfig()), hw=0, sink=lambda e: None)


def lead(p: Partition, epoch: int = 1) -> None:
    p.make_leader(PartitionRecord("t", 0, (1, 2), (1, 2), p.node_id, epoch, 0), 0, profile=KAFKA,
                  lag_max_ms=30_000, min_isr=1, broker_epoch=1, eligibility=[])


def batch(seq: int, *values: bytes, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(list(values), timestamp_ms=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def values(p: Partition) -> list[bytes | None]:
    lg = p.log
    return [r.value for r in iter_records(lg.read(lg.log_start_offset, 1 << 30))] if lg.log_end_offset else []


def test_a_retried_batch_is_answered_with_its_first_offset_and_not_stored_again(tmp_path):
    p = open_partition(str(tmp_path / "t-0"))
    lead(p)
    first, last, d, _ = p.append_as_leader(batch(0, b"a", b"b"), 0)
    assert (first, last) == (0, 1) and d is not None
    p.append_as_leader(batch(2, b"c"), 0)
    assert p.append_as_leader(batch(0, b"a", b"b"), 0) == (0, 1, None, 1)     # its stored max timestamp
    assert values(p) == [b"a", b"b", b"c"]


def test_a_duplicate_on_a_log_append_time_topic_answers_the_time_its_original_was_given(tmp_path):
    p = Partition("t", 0, node_id=1, log=PartitionLog(str(tmp_path / "t-0"),
                                                      LogConfig(message_timestamp_type="LogAppendTime")),
                  hw=0, sink=lambda e: None)
    lead(p)
    assert p.append_as_leader(batch(0, b"a"), 5_000).log_append_time == 5_000
    assert p.append_as_leader(batch(0, b"a"), 9_000) == (0, 0, None, 5_000)
    assert p.append_as_leader(batch(1, b"b"), 9_000).log_append_time == 9_000
    assert p.append_as_leader(batch(1, b"b"), 9_500) == (1, 1, None, 9_000)
    p.log.close()
    again = Partition("t", 0, node_id=1, log=PartitionLog(str(tmp_path / "t-0"), LogConfig()), hw=0,
                      sink=lambda e: None)                        # recovery reads the stored time
    lead(again, epoch=2)
    assert again.append_as_leader(batch(0, b"a"), 10_000) == (0, 0, None, 5_000)


def test_a_duplicate_is_validated_first_and_gets_the_validations_error(tmp_path):
    """Kafka validates a batch (here the KIP-937 window) before its producer-state check:
    a retry whose timestamp has fallen out of the window is refused, not answered as a duplicate."""
    hour = 3_600_000
    p = Partition("t", 0, node_id=1, log=PartitionLog(str(tmp_path / "t-0"),
                                                      LogConfig(message_timestamp_before_max_ms=hour)),
                  hw=0, sink=lambda e: None)
    lead(p)
    now = 1_700_000_000_000
    retried = build_batch([b"a"], timestamp_ms=now, producer_id=PID, producer_epoch=0, base_sequence=0)
    assert p.append_as_leader(retried, now)[:2] == (0, 0)
    assert p.append_as_leader(retried, now + hour) == (0, 0, None, now)
    with pytest.raises(KafkaError) as late:
        p.append_as_leader(retried, now + 2 * hour)
    assert late.value.code == ErrorCode.INVALID_TIMESTAMP
    assert values(p) == [b"a"]


def test_a_sequence_gap_and_a_fenced_epoch_are_refused_with_nothing_written(tmp_path):
    p = open_partition(str(tmp_path / "t-0"))
    lead(p)
    p.append_as_leader(batch(0, b"a", epoch=3), 0)
    with pytest.raises(KafkaError) as gap:
        p.append_as_leader(batch(5, b"x", epoch=3), 0)
    assert gap.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(KafkaError) as fenced:
        p.append_as_leader(batch(1, b"x", epoch=2), 0)
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert values(p) == [b"a"]


def test_two_idempotent_batches_in_one_partition_payload_are_an_invalid_record(tmp_path):
    p = open_partition(str(tmp_path / "t-0"))
    lead(p)
    with pytest.raises(KafkaError) as exc:
        p.append_as_leader(batch(0, b"a") + batch(1, b"b"), 0)
    assert exc.value.code == ErrorCode.INVALID_RECORD


def test_a_follower_that_becomes_leader_dedups_what_it_replicated(tmp_path):
    leader = open_partition(str(tmp_path / "a" / "t-0"))
    lead(leader)
    leader.append_as_leader(batch(0, b"a"), 0)
    leader.append_as_leader(batch(1, b"b"), 0)
    follower = open_partition(str(tmp_path / "b" / "t-0"), node_id=2)
    follower.make_follower(PartitionRecord("t", 0, (1, 2), (1, 2), 1, 1, 0), 0)
    follower.append_as_follower(leader.log.read(0, 1 << 20), 0)
    follower.make_follower(PartitionRecord("t", 0, (1, 2), (1, 2), 2, 2, 1), 0)
    follower.node_id = 2
    lead(follower, epoch=2)
    assert follower.append_as_leader(batch(1, b"b"), 0) == (1, 1, None, 1)
    assert follower.append_as_leader(batch(2, b"c"), 0)[:2] == (2, 2)


def test_recovery_rebuilds_the_state_from_batch_headers_without_a_snapshot(tmp_path):
    d = str(tmp_path / "t-0")
    p = open_partition(d)
    lead(p)
    for seq in range(3):
        p.append_as_leader(batch(seq, b"v%d" % seq), 0)
    p.log.close()
    assert read_snapshot(d) is None
    again = open_partition(d)
    lead(again, epoch=2)
    assert again.append_as_leader(batch(2, b"v2"), 0) == (2, 2, None, 1)


def test_recovery_starts_from_the_snapshot_and_scans_only_the_batches_after_it(tmp_path):
    d = str(tmp_path / "t-0")
    p = open_partition(d)
    lead(p)
    p.append_as_leader(batch(0, b"a"), 0)
    write_snapshot(d, p.producers.snapshot())
    p.append_as_leader(batch(1, b"b"), 0)
    p.append_as_leader(batch(0, b"x", pid=7), 0)
    p.log.close()
    again = open_partition(d)
    assert again.producers.snapshot() == p.producers.snapshot()


def leader_with_two_batches(d: str) -> Partition:
    p = open_partition(d)
    lead(p)
    p.append_as_leader(batch(0, b"a"), 0)
    p.append_as_leader(batch(1, b"b"), 0)
    return p


def test_a_snapshot_beyond_the_recovered_log_end_is_cut_back_to_it(tmp_path):
    d = str(tmp_path / "t-0")
    p = leader_with_two_batches(d)
    state = p.producers.snapshot()
    p.log.truncate_to(1)                                # the log lost a tail the snapshot covered
    write_snapshot(d, state)
    p.log.close()
    again = open_partition(d)
    lead(again, epoch=2)
    assert again.append_as_leader(batch(1, b"b"), 0)[:2] == (1, 1)


def test_truncation_forgets_the_removed_batches_and_deletes_the_snapshot(tmp_path):
    d = str(tmp_path / "t-0")
    p = leader_with_two_batches(d)
    write_snapshot(d, p.producers.snapshot())
    p.make_follower(PartitionRecord("t", 0, (1, 2), (1, 2), 2, 2, 1), 0)
    p.truncate_to(1, 0, "diverged")
    assert not os.path.exists(snapshot_path(d))
    lead(p, epoch=3)
    assert p.append_as_leader(batch(1, b"b2"), 0)[:2] == (1, 1)
    assert values(p) == [b"a", b"b2"]
