"""RecordAccumulator.take_alone: append + sendable_alone + take in one, or nothing changed."""
from minibroker.client.accumulator import RecordAccumulator, record_size
from minibroker.client.types import TopicPartition
from minibroker.records import decode_rows

TP = TopicPartition("t", 0)


def test_a_lone_record_is_taken_as_append_then_take_would_take_it() -> None:
    acc = RecordAccumulator(linger_ms=0)
    size = record_size(b"k", b"v", None)
    taken = acc.take_alone(TP, b"k", b"v", 1000, size)
    assert taken is not None
    batch, encoded = taken
    assert (batch.count, batch.attempts, batch.closed, batch.first_ts) == (1, 1, True, 1000)
    assert acc.queued_count == 0 and acc.buffered_bytes == batch.size and TP not in acc.open_batches
    ref = RecordAccumulator(linger_ms=0)
    b, _, _, _ = ref.append(TP, b"k", b"v", None, 1000, 1000, size)
    assert ref.sendable_alone(b, 1000)
    ref.take(b)
    assert b.encoded() == encoded and decode_rows(encoded) == decode_rows(b.encoded())
    acc.release(batch)
    assert acc.buffered_bytes == 0


def test_nothing_changes_when_it_would_not_go_alone_at_once() -> None:
    size = record_size(None, b"v", None)
    lingering = RecordAccumulator(linger_ms=5)
    assert lingering.take_alone(TP, None, b"v", 1000, size) is None
    queued = RecordAccumulator(linger_ms=0)
    queued.append(TopicPartition("t", 1), None, b"v", None, 1000, 1000, size)
    before = queued.buffered_bytes
    assert queued.take_alone(TP, None, b"v", 1000, size) is None
    assert (queued.queued_count, queued.buffered_bytes) == (1, before)
    muted = RecordAccumulator(linger_ms=0)
    muted.mute(TP)
    assert muted.take_alone(TP, None, b"v", 1000, size) is None
    full = RecordAccumulator(linger_ms=0, buffer_memory=10)
    full.buffered_bytes = 5
    assert full.take_alone(TP, None, b"v", 1000, size) is None and full.buffered_bytes == 5
