"""Crash recovery on open (D5/D6, X17): torn tails, corruption, clean shutdown."""
from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from minibroker.records import CRC_POS, EPOCH_POS, HEADER_SIZE, LENGTH_POS, MAGIC_POS
from minibroker.storage import CLEAN_SHUTDOWN_FILE, LogConfig, LogManager, PartitionLog
from minibroker.storage.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile

from .helpers import abandon, read_all, stamped, write_batches

SEG0 = "00000000000000000000.log"


def new_log(path, **cfg) -> PartitionLog:
    return PartitionLog.open(str(path), LogConfig(**cfg))


def reopen(path, **kw) -> PartitionLog:
    return PartitionLog.open(str(path), LogConfig(index_interval_bytes=kw.pop("index_interval_bytes", 4096),
                                                  segment_bytes=kw.pop("segment_bytes", 1 << 30)), **kw)


def test_torn_tail_recovery_x17(tmp_path, events):
    data = tmp_path / "data"
    m = LogManager(str(data))
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 3), (3, 3), (2, 4)])
    assert log.log_end_offset == 8
    abandon(log)
    pdir = data / "orders-0"
    half = stamped(2, 8, 5)
    with open(pdir / SEG0, "ab") as f:
        f.write(half[: len(half) // 2])
    later = stamped(2, 10, 5)
    (pdir / "00000000000000000010.log").write_bytes(later)
    LeaderEpochCheckpointFile(str(pdir / "leader-epoch-checkpoint")).write([(3, 0), (4, 6), (5, 8)])
    OffsetCheckpointFile(str(data / "replication-offset-checkpoint")).write({("orders", 0): 9})
    OffsetCheckpointFile(str(data / "recovery-point-offset-checkpoint")).write({("orders", 0): 0})
    assert not (data / CLEAN_SHUTDOWN_FILE).exists()

    m2 = LogManager(str(data), event_sink=events.append)
    log2 = m2.get("orders", 0)
    assert log2.log_end_offset == 8
    assert log2.segment_base_offsets == [0]
    assert not (pdir / "00000000000000000010.log").exists()
    assert os.path.getsize(pdir / SEG0) == sum(len(stamped(n, b, e)) for n, b, e in [(3, 0, 3), (3, 3, 3), (2, 6, 4)])
    assert log2.epoch_cache.entries == [(3, 0), (4, 6)]
    assert m2.load_high_watermark("orders", 0) == 8
    assert log2.recovery_point == 0
    assert log2.load_info.segments_deleted == [10]
    # the follower's next fetch would be fetch(8, 4)
    assert (log2.log_end_offset, log2.latest_epoch) == (8, 4)
    kinds = [e.kind for e in events]
    assert "recovery" in kinds and "hw_move" in kinds
    rec = next(e for e in events if e.kind == "recovery")
    assert rec.after == 8 and rec.extra["segments_deleted"] == [10]


def test_offset_index_is_rebuilt_identically_by_recovery(tmp_path):
    log = new_log(tmp_path / "t-0", index_interval_bytes=100)
    write_batches(log, [(5, 0)] * 40)
    log.flush()
    idx = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    tidx = (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes()
    assert len(idx) > 8 * 10
    abandon(log)
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(b"\x00" * 37)
    log2 = reopen(tmp_path / "t-0", index_interval_bytes=100)
    assert log2.load_info.batches_scanned == 40
    assert (tmp_path / "t-0" / "00000000000000000000.index").read_bytes() == idx
    assert (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes() == tidx
    assert log2.log_end_offset == 200


def _cut_copy(src, dst, size: int) -> None:
    shutil.copytree(src, dst)
    with open(os.path.join(dst, SEG0), "r+b") as f:
        f.truncate(size)


def test_tear_at_every_byte_of_the_last_batch(tmp_path):
    src = tmp_path / "src" / "t-0"
    log = new_log(src)
    written = write_batches(log, [(3, 0), (2, 0), (4, 1), (1, 1)])
    abandon(log)
    last_start = sum(len(d) for _, _, d in written[:-1])
    end = last_start + len(written[-1][2])
    good = b"".join(d for _, _, d in written[:-1])
    for cut in range(last_start, end):
        dst = tmp_path / f"cut{cut}" / "t-0"
        _cut_copy(src, dst, cut)
        log2 = reopen(dst)
        assert log2.log_end_offset == 9, cut
        assert read_all(log2) == good, cut
        assert os.path.getsize(dst / SEG0) == last_start
        assert log2.epoch_cache.entries == [(0, 0), (1, 5)]
        abandon(log2)
        shutil.rmtree(dst.parent)
    dst = tmp_path / "whole" / "t-0"
    _cut_copy(src, dst, end)
    assert reopen(dst).log_end_offset == 10


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 2)), min_size=1, max_size=8), st.data())
def test_tear_anywhere_keeps_exactly_the_whole_batches_before_it(tmp_path_factory, layout, data):
    layout = sorted(layout, key=lambda x: x[1])
    root = tmp_path_factory.mktemp("tear")
    log = new_log(root / "t-0")
    written = write_batches(log, layout)
    abandon(log)
    total = sum(len(d) for _, _, d in written)
    cut = data.draw(st.integers(0, total))
    with open(root / "t-0" / SEG0, "r+b") as f:
        f.truncate(cut)
    log2 = reopen(root / "t-0")
    kept, pos = [], 0
    for base, last, d in written:
        if pos + len(d) > cut:
            break
        kept.append((base, last, d))
        pos += len(d)
    assert log2.log_end_offset == (kept[-1][1] + 1 if kept else 0)
    assert read_all(log2) == b"".join(d for _, _, d in kept)
    assert all(o < log2.log_end_offset for _, o in log2.epoch_cache.entries)
    abandon(log2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_flipped_byte_stops_recovery_at_that_batch(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("flip")
    log = new_log(root / "t-0")
    written = write_batches(log, [(3, 0), (5, 0), (2, 1), (4, 1), (1, 2)], size=30)
    abandon(log)
    k = data.draw(st.integers(0, len(written) - 1), label="batch")
    start = sum(len(d) for _, _, d in written[:k])
    size = len(written[k][2])
    region = data.draw(st.sampled_from(["crc-covered", "crc", "base_offset", "length", "magic"]), label="field")
    lo, hi = {"crc-covered": (CRC_POS + 4, size), "crc": (CRC_POS, CRC_POS + 4), "base_offset": (0, 8),
              "length": (LENGTH_POS, LENGTH_POS + 4), "magic": (MAGIC_POS, MAGIC_POS + 1)}[region]
    pos = start + data.draw(st.integers(lo, hi - 1), label="pos")
    bit = data.draw(st.integers(0, 7), label="bit")
    with open(root / "t-0" / SEG0, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << bit)]))
    log2 = reopen(root / "t-0")
    assert log2.log_end_offset == written[k][0]
    assert read_all(log2) == b"".join(d for _, _, d in written[:k])
    assert os.path.getsize(root / "t-0" / SEG0) == start
    assert log2.load_info.problem
    abandon(log2)


def test_decreasing_epoch_in_the_log_is_treated_as_corruption(tmp_path):
    log = new_log(tmp_path / "t-0")
    written = write_batches(log, [(2, 3), (2, 4), (2, 4)])
    abandon(log)
    start = len(written[0][2]) + len(written[1][2])
    with open(tmp_path / "t-0" / SEG0, "r+b") as f:
        f.seek(start + EPOCH_POS)
        f.write((2).to_bytes(4, "big"))
    log2 = reopen(tmp_path / "t-0")
    assert log2.log_end_offset == 4
    assert "leader epoch 2 after epoch 4" in log2.load_info.problem


def test_corruption_in_a_middle_segment_deletes_every_later_segment(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=400)
    write_batches(log, [(3, 0)] * 20)
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    abandon(log)
    victim = tmp_path / "t-0" / f"{bases[1]:020d}.log"
    raw = bytearray(victim.read_bytes())
    raw[HEADER_SIZE + 2] ^= 0xFF  # inside the first batch's payload
    victim.write_bytes(bytes(raw))
    log2 = reopen(tmp_path / "t-0", segment_bytes=400)
    assert log2.segment_base_offsets == bases[:2]
    assert log2.log_end_offset == bases[1]
    for b in bases[2:]:
        for suffix in (".log", ".index", ".timeindex"):
            assert not (tmp_path / "t-0" / f"{b:020d}{suffix}").exists()
    assert log2.load_info.segments_deleted == bases[2:]


def test_segments_below_the_recovery_point_are_trusted_not_scanned(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=400)
    write_batches(log, [(3, 0)] * 20)
    bases = log.segment_base_offsets
    abandon(log)
    first = tmp_path / "t-0" / f"{bases[0]:020d}.log"
    raw = bytearray(first.read_bytes())
    raw[HEADER_SIZE + 2] ^= 0xFF
    first.write_bytes(bytes(raw))
    log2 = reopen(tmp_path / "t-0", segment_bytes=400, recovery_point=bases[2] + 1)
    # only the segment holding the recovery point and later ones were scanned
    assert log2.load_info.recovered_from_offset == bases[2]
    assert log2.log_end_offset == 60
    assert log2.recovery_point == bases[2] + 1
    abandon(log2)
    log3 = reopen(tmp_path / "t-0", segment_bytes=400, recovery_point=0)
    assert log3.log_end_offset == 0


def test_clean_shutdown_reopens_without_scanning(tmp_path):
    data = tmp_path / "data"
    m = LogManager(str(data), LogConfig(segment_bytes=400))
    log = m.get_or_create("t", 0)
    write_batches(log, [(3, 0)] * 20)
    log.truncate_to(31)
    assert log.log_end_offset == 30
    m.shutdown({("t", 0): 30})
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    # corrupt a CRC'd byte: a trusting open cannot notice, a scanning one would
    first = data / "t-0" / SEG0
    raw = bytearray(first.read_bytes())
    raw[HEADER_SIZE + 2] ^= 0xFF
    first.write_bytes(bytes(raw))
    m2 = LogManager(str(data), LogConfig(segment_bytes=400))
    log2 = m2.get("t", 0)
    assert log2.load_info.clean_shutdown
    assert log2.load_info.batches_scanned == 0
    assert log2.load_info.segments_recovered == 0
    assert log2.log_end_offset == 30 and log2.recovery_point == 30
    assert not (data / CLEAN_SHUTDOWN_FILE).exists(), "marker is consumed at startup"
    # a crash now (no shutdown) must scan on the next start
    abandon(log2)
    m3 = LogManager(str(data), LogConfig(segment_bytes=400))
    log3 = m3.get("t", 0)
    assert not log3.load_info.clean_shutdown
    assert log3.load_info.batches_scanned > 0


def test_clean_marker_with_torn_tail_falls_back_to_recovery(tmp_path):
    data = tmp_path / "data"
    m = LogManager(str(data))
    write_batches(m.get_or_create("t", 0), [(3, 0)] * 5)
    m.shutdown()
    with open(data / "t-0" / SEG0, "r+b") as f:
        f.truncate(os.path.getsize(data / "t-0" / SEG0) - 5)
    log = LogManager(str(data)).get("t", 0)
    assert log.log_end_offset == 12
    assert log.load_info.segments_recovered == 1


def test_garbage_index_on_clean_open_is_rebuilt(tmp_path):
    data = tmp_path / "data"
    m = LogManager(str(data), LogConfig(index_interval_bytes=50))
    write_batches(m.get_or_create("t", 0), [(3, 0)] * 30)
    m.shutdown()
    idx = data / "t-0" / "00000000000000000000.index"
    good = idx.read_bytes()
    idx.write_bytes(b"\x7f\xff\xff\xff\x00\x00\x00\x00" * 3)
    log = LogManager(str(data), LogConfig(index_interval_bytes=50)).get("t", 0)
    assert log.load_info.segments_recovered == 1
    assert idx.read_bytes() == good
    assert log.log_end_offset == 90


def test_missing_epoch_entries_are_rebuilt_and_stale_ones_dropped(tmp_path):
    """The checkpoint lags (entries are written off the loop): recovery
    derives the cache of the scanned range from the batches themselves."""
    log = new_log(tmp_path / "t-0")
    write_batches(log, [(5, 3), (5, 3), (10, 4), (3, 6)])
    abandon(log)
    LeaderEpochCheckpointFile(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).write([(3, 0), (5, 20)])
    log2 = reopen(tmp_path / "t-0")
    assert log2.epoch_cache.entries == [(3, 0), (4, 10), (6, 20)]
    assert log2.epoch_cache_dirty


def test_log_end_below_checkpointed_log_start_empties_the_log(tmp_path):
    log = new_log(tmp_path / "t-0")
    write_batches(log, [(5, 1)] * 4)
    abandon(log)
    log2 = reopen(tmp_path / "t-0", log_start_offset=50)
    assert (log2.log_start_offset, log2.log_end_offset) == (50, 50)
    assert log2.segment_base_offsets == [50]
    assert log2.epoch_cache.entries == []
    assert not (tmp_path / "t-0" / SEG0).exists()


def test_stray_tmp_and_orphan_index_files_are_removed(tmp_path):
    log = new_log(tmp_path / "t-0")
    write_batches(log, [(2, 0)])
    abandon(log)
    (tmp_path / "t-0" / "leader-epoch-checkpoint.tmp").write_text("0\n1\n")
    (tmp_path / "t-0" / "00000000000000000099.index").write_bytes(b"")
    log2 = reopen(tmp_path / "t-0")
    assert sorted(os.listdir(tmp_path / "t-0")) == [
        "00000000000000000000.index", SEG0, "00000000000000000000.timeindex"]
    assert log2.log_end_offset == 2


def test_recovery_after_truncation_and_reappend(tmp_path):
    log = new_log(tmp_path / "t-0", segment_bytes=300)
    write_batches(log, [(3, 0)] * 10)
    assert log.truncate_to(13) == 12
    written = write_batches(log, [(4, 1)] * 3)
    expected = read_all(log)
    abandon(log)
    log2 = reopen(tmp_path / "t-0", segment_bytes=300)
    assert log2.log_end_offset == 24
    assert read_all(log2) == expected
    assert log2.epoch_cache.entries == [(0, 0), (1, 12)]
    assert written[-1][1] == 23


@pytest.mark.parametrize("clean", [True, False])
def test_empty_log_reopens_empty(tmp_path, clean):
    log = new_log(tmp_path / "t-0")
    abandon(log)
    log2 = reopen(tmp_path / "t-0", clean_shutdown=clean)
    assert (log2.log_start_offset, log2.log_end_offset) == (0, 0)
