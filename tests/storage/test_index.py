"""Sparse offset and time indexes (D3)."""
from __future__ import annotations

import os

from minibroker.storage import LogConfig, PartitionLog
from minibroker.storage.index import OffsetIndex, TimeIndex

from .helpers import ManualClock, stamped


def test_entries_are_added_only_after_index_interval_bytes(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=300), clock=ManualClock())
    sizes = []
    for _ in range(12):
        b = stamped(2, log.log_end_offset, 0)
        sizes.append(len(b))
        log.append_as_follower(b)
    idx = log._segments[0].index
    # the first batch is never indexed; then one entry whenever > 300 bytes passed
    expected, since, pos = [], 0, 0
    for i, size in enumerate(sizes):
        if since > 300:
            expected.append((2 * i + 1, pos))
            since = 0
        since += size
        pos += size
    assert [(r, p) for r, p in zip(idx.rel_offsets, idx.positions, strict=True)] == expected


def test_lookup_gives_last_indexed_batch_at_or_below_target(tmp_path):
    idx = OffsetIndex(str(tmp_path / "x.index"), 100)
    for last, pos in ((104, 0), (109, 500), (130, 900)):
        idx.append(last, pos)
    assert idx.lookup(99) == 0
    assert idx.lookup(104) == 0
    assert idx.lookup(105) == 0
    assert idx.lookup(109) == 500
    assert idx.lookup(129) == 500
    assert idx.lookup(10_000) == 900
    assert idx.floor_position(899) == 500 and idx.floor_position(900) == 900


def test_index_file_round_trips_and_truncates_by_position(tmp_path):
    path = str(tmp_path / "x.index")
    idx = OffsetIndex(path, 100)
    for last, pos in ((104, 0), (109, 500), (130, 900)):
        idx.append(last, pos)
    idx.truncate_to_position(500)
    idx.close()
    again = OffsetIndex(path, 100)
    assert again.load() is None
    assert list(again.rel_offsets) == [4] and list(again.positions) == [0]


def test_out_of_order_or_ragged_index_file_fails_its_sanity_check(tmp_path):
    path = tmp_path / "x.index"
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x01\x00" + b"\x00\x00\x00\x04\x00\x00\x02\x00")
    assert "out of order" in OffsetIndex(str(path), 0).load()
    path.write_bytes(b"\x00" * 9)
    assert "multiple of 8" in OffsetIndex(str(path), 0).load()
    path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x01\x00")
    idx = OffsetIndex(str(path), 0)
    assert idx.load() is None
    assert "beyond the segment size" in idx.sanity_check(segment_size=0x100, next_offset=10)
    assert "not below" in idx.sanity_check(segment_size=0x1000, next_offset=5)


def test_time_index_keeps_only_increasing_max_timestamps(tmp_path):
    t = TimeIndex(str(tmp_path / "x.timeindex"), 10)
    t.maybe_append(1000, 12)
    t.maybe_append(900, 14)
    t.maybe_append(1000, 15)
    t.maybe_append(1500, 20)
    assert list(t.timestamps) == [1000, 1500] and t.last_timestamp == 1500
    t.truncate_to_offset(20)
    assert list(t.timestamps) == [1000]


def test_an_index_write_that_fails_mid_append_rolls_the_segment_back(tmp_path, monkeypatch):
    """D3 with an I/O error: an append whose index entry cannot be written leaves the segment, its
    indexes and its max timestamp as they were, and raises KAFKA_STORAGE_ERROR; the next append goes on."""
    import pytest

    from minibroker.errors import ErrorCode, KafkaError
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=100), clock=ManualClock())
    seg = log._segments[-1]
    while not seg.index.positions or seg._bytes_since_index <= 100:     # the next append adds an entry
        log.append_as_follower(stamped(2, log.log_end_offset, 0))
    before = (seg.size, seg.next_offset, seg.max_timestamp, list(seg.index.positions), list(seg.time_index.timestamps),
              seg._bytes_since_index)
    assert before[3], "the appends so far were indexed"

    def fail(data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(seg.index, "_write", fail)
    nxt = stamped(2, log.log_end_offset, 0)
    with pytest.raises(KafkaError) as ei:
        log.append_as_follower(nxt)
    assert ei.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert (seg.size, seg.next_offset, seg.max_timestamp, list(seg.index.positions),
            list(seg.time_index.timestamps), seg._bytes_since_index) == before
    assert os.path.getsize(seg.log_path) == before[0]
    monkeypatch.undo()
    log.append_as_follower(nxt)
    assert log.read(before[1], 1 << 20) == nxt
