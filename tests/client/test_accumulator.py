import pytest

from minibroker.client.accumulator import (BATCH_OVERHEAD, AppendResult, BufferFull, RecordAccumulator,
                                           record_size)
from minibroker.client.retry import Backoff
from minibroker.client.types import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
LEADERS = {A0: 1, A1: 2, B0: 1}


def leader_of(tp):
    return LEADERS.get(tp)


class Acc(RecordAccumulator):
    def append(self, *args, **kw):
        return AppendResult(*super().append(*args, **kw))


def acc(**kw):
    kw.setdefault("batch_size", 1000)
    kw.setdefault("linger_ms", 5)
    kw.setdefault("backoff", Backoff(100, 1000, jitter=0.0))
    return Acc(**kw)


def test_records_of_one_partition_share_the_open_batch():
    a = acc()
    r1 = a.append(A0, None, b"x" * 10, (), 1, now_ms=0)
    r2 = a.append(A0, None, b"y" * 10, (), 1, now_ms=0)
    assert r1.new_batch and not r2.new_batch
    assert r1.batch is r2.batch and (r1.index, r2.index) == (0, 1)


def test_a_batch_decoded_while_open_takes_no_more_records():
    a = acc()
    r1 = a.append(A0, None, b"x" * 10, (), 1, now_ms=0)
    assert [v for _k, v, _t, _h in r1.batch.records] == [b"x" * 10]     # builds its bytes: the batch is closed
    r2 = a.append(A0, None, b"y" * 10, (), 1, now_ms=0)
    assert r2.new_batch and r2.batch is not r1.batch and len(r1.batch) == 1
    assert a.open_batches[A0] is r2.batch


def test_batch_is_not_ready_before_linger():
    a = acc(linger_ms=5)
    a.append(A0, None, b"x", (), 1, now_ms=100)
    r = a.ready(103, leader_of)
    assert r.nodes == frozenset() and r.next_delay_ms == 2


def test_batch_is_ready_when_linger_passes():
    a = acc(linger_ms=5)
    a.append(A0, None, b"x", (), 1, now_ms=100)
    assert a.ready(105, leader_of).nodes == {1}


def test_full_batch_is_ready_before_linger():
    a = acc(batch_size=BATCH_OVERHEAD + 2 * record_size(None, b"x" * 50, ()), linger_ms=1000)
    a.append(A0, None, b"x" * 50, (), 1, now_ms=0)
    r = a.append(A0, None, b"x" * 50, (), 1, now_ms=0)
    assert r.batch_full
    assert a.ready(0, leader_of).nodes == {1}


def test_record_that_does_not_fit_opens_a_new_batch_and_makes_the_old_one_ready():
    a = acc(batch_size=BATCH_OVERHEAD + record_size(None, b"x" * 50, ()) + 10, linger_ms=1000)
    first = a.append(A0, None, b"x" * 50, (), 1, now_ms=0)
    second = a.append(A0, None, b"x" * 50, (), 1, now_ms=0)
    assert second.new_batch and second.batch is not first.batch
    assert first.batch.closed
    assert a.ready(0, leader_of).nodes == {1}


def test_oversized_single_record_still_gets_a_batch():
    a = acc(batch_size=100)
    r = a.append(A0, None, b"x" * 500, (), 1, now_ms=0)
    assert r.index == 0 and r.batch_full


def test_flush_makes_lingering_batches_ready():
    a = acc(linger_ms=1000)
    a.append(A0, None, b"x", (), 1, now_ms=0)
    a.flushing += 1
    assert a.ready(0, leader_of).nodes == {1}


def test_unknown_leader_is_reported_by_topic():
    a = acc(linger_ms=0)
    a.append(TopicPartition("c", 0), None, b"x", (), 1, now_ms=0)
    r = a.ready(10, leader_of)
    assert r.nodes == frozenset() and r.unknown_leader_topics == {"c"}


def test_drain_groups_one_batch_per_partition_by_leader():
    a = acc(linger_ms=0)
    for tp in (A0, A1, B0):
        a.append(tp, None, b"x", (), 1, now_ms=0)
    a.append(A0, None, b"x" * 2000, (), 1, now_ms=0)      # a second batch for A0
    out = a.drain(0, {1, 2}, leader_of, max_request_size=1 << 20)
    assert sorted(b.tp for b in out[1]) == [A0, B0]
    assert [b.tp for b in out[2]] == [A1]
    assert all(b.attempts == 1 and b.closed for bs in out.values() for b in bs)
    assert a.queued_batches(A0) == 1


def test_drain_respects_max_request_size_but_always_sends_one_batch():
    a = acc(linger_ms=0, batch_size=10_000)
    a.append(A0, None, b"x" * 3000, (), 1, now_ms=0)
    a.append(B0, None, b"x" * 3000, (), 1, now_ms=0)
    out = a.drain(0, {1}, leader_of, max_request_size=3500)
    assert len(out[1]) == 1
    assert a.has_queued()


def test_reenqueued_batch_goes_first_and_waits_its_backoff():
    a = acc(linger_ms=0)
    a.append(A0, None, b"first", (), 1, now_ms=0)
    (batch,) = a.drain(0, {1}, leader_of, 1 << 20)[1]
    a.append(A0, None, b"second", (), 1, now_ms=5)
    a.reenqueue(batch, now_ms=10)
    assert batch.retry_at_ms == 110
    r = a.ready(50, leader_of)
    assert r.nodes == frozenset() and r.next_delay_ms == 60
    assert a.drain(50, {1}, leader_of, 1 << 20) == {}
    (again,) = a.drain(110, {1}, leader_of, 1 << 20)[1]
    assert again is batch and again.attempts == 2


def test_retry_backoff_grows_with_attempts():
    a = acc(linger_ms=0)
    a.append(A0, None, b"x", (), 1, now_ms=0)
    (batch,) = a.drain(0, {1}, leader_of, 1 << 20)[1]
    a.reenqueue(batch, now_ms=0)
    (batch,) = a.drain(100, {1}, leader_of, 1 << 20)[1]
    a.reenqueue(batch, now_ms=100)
    assert batch.retry_at_ms == 300


def test_queued_batches_expire_after_delivery_timeout():
    a = acc(delivery_timeout_ms=1000, linger_ms=10_000)
    a.append(A0, None, b"x", (), 1, now_ms=0)
    assert a.expired(999) == []
    (b,) = a.expired(1000)
    assert b.tp == A0 and not a.has_queued()


def test_buffer_memory_is_bounded_and_released():
    a = acc(buffer_memory=BATCH_OVERHEAD + 2 * record_size(None, b"x" * 100, ()), linger_ms=0)
    a.append(A0, None, b"x" * 100, (), 1, now_ms=0)
    a.append(A0, None, b"x" * 100, (), 1, now_ms=0)
    with pytest.raises(BufferFull):
        a.append(A0, None, b"x" * 100, (), 1, now_ms=0)
    (batch,) = a.drain(0, {1}, leader_of, 1 << 20)[1]
    a.release(batch)
    assert a.buffered_bytes == 0
    a.append(A0, None, b"x" * 100, (), 1, now_ms=0)


def test_muted_partition_is_neither_ready_nor_drained():
    a = acc(linger_ms=0)
    a.append(A0, None, b"x", (), 1, now_ms=0)
    a.mute(A0)
    assert a.ready(10, leader_of).nodes == frozenset()
    assert a.drain(10, {1}, leader_of, 1 << 20) == {}
    a.unmute(A0)
    assert a.ready(10, leader_of).nodes == {1}


def test_a_held_partition_sends_its_batches_sequenced_under_the_old_producer_id_and_holds_the_new_ones():
    """After a new producer id, a partition's new batches wait until those sequenced under the old id are
    done (Kafka's RecordAccumulator: no draining next to in-flight batches of a stale producer id)."""
    a = acc(linger_ms=0)
    old = a.append(A0, None, b"x", (), 1, now_ms=0).batch
    (taken,) = a.drain(10, {1}, leader_of, 1 << 20)[1]
    taken.set_producer_state(7, 0, 5)                  # written under producer id 7, sequence 5
    a.append(A0, None, b"y", (), 1, now_ms=10)           # a new batch, not sequenced yet
    a.reenqueue(old, now_ms=10)                        # the old one comes back to be retried
    a.hold(A0)
    assert not a.sendable_alone(a.open_batches[A0], 200)
    (retried,) = a.drain(200, {1}, leader_of, 1 << 20)[1]
    assert retried is old                              # the old batch goes: it has its sequence
    assert a.ready(300, leader_of).nodes == frozenset() and a.drain(300, {1}, leader_of, 1 << 20) == {}
    a.release_hold(A0)
    assert a.ready(300, leader_of).nodes == {1}


def test_waiter_factory_gives_each_batch_its_own_waiter():
    made = []
    a = acc(new_waiter=lambda: made.append(object()) or made[-1], batch_size=BATCH_OVERHEAD + 20)
    r1 = a.append(A0, None, b"x" * 10, (), 1, now_ms=0)
    r2 = a.append(A0, None, b"x" * 10, (), 1, now_ms=0)
    assert r1.batch.waiter is made[0] and r2.batch.waiter is made[1]


def test_has_room_tells_whether_the_open_batch_takes_a_record():
    a = acc(batch_size=BATCH_OVERHEAD + 100, linger_ms=0)
    assert not a.has_room(A0, 10)
    a.append(A0, None, b"x" * 50, (), 1, now_ms=0)
    assert a.has_room(A0, 10) and not a.has_room(A0, 60)
    a.drain(0, {1}, leader_of, 1 << 20)
    assert not a.has_room(A0, 10)


def test_records_go_straight_into_the_batch_builder_and_are_encoded_once():
    from minibroker.client.producer import encode
    from minibroker.records import iter_records
    a = acc()
    a.append(A0, b"k", b"v1", [("h", b"x")], 1000, now_ms=0)
    r = a.append(A0, None, b"v2", (), 1007, now_ms=0)
    recs = list(iter_records(encode(r.batch), with_headers=True))
    assert [(x.offset, x.timestamp, x.key, x.value, x.headers) for x in recs] == [
        (0, 1000, b"k", b"v1", (("h", b"x"),)), (1, 1007, None, b"v2", ())]
    assert r.batch.records[1] == (None, b"v2", 1007, ())
    assert r.batch.timestamp(1) == 1007
    assert encode(r.batch) is encode(r.batch) and r.batch.closed
