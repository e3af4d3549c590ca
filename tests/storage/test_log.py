"""PartitionLog rules: appends, reads, truncation, log start, retention, rolls, flushes."""
from __future__ import annotations

import asyncio
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from minibroker import codec
from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import build_batch, iter_records, parse_header, scan_headers
from minibroker.storage import LogConfig, PartitionLog, UnexpectedAppendOffset

from .helpers import T0, ManualClock, abandon, batch, read_all, stamped, write_batches

DAY = 24 * 3600 * 1000


def open_log(tmp_path, clock=None, events=None, **cfg) -> PartitionLog:
    kw = {"clock": clock or ManualClock()}
    if events is not None:
        kw["event_sink"] = events.append
    return PartitionLog.open(str(tmp_path / "orders-0"), LogConfig(**cfg), **kw)


def offsets(buf: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in scan_headers(buf)]


# ---------------------------------------------------------------- leader appends

def test_leader_append_stamps_offsets_and_epoch_and_disk_bytes_are_wire_bytes(tmp_path):
    log = open_log(tmp_path)
    log.assign_leader_epoch(5)
    client = batch(4)
    assert log.append_as_leader(client, 5) == (0, 3)
    assert log.append_as_leader(batch(2), 5) == (4, 5)
    wire = log.read(0, 1 << 20)
    with open(tmp_path / "orders-0" / "00000000000000000000.log", "rb") as f:
        assert f.read() == wire
    h = parse_header(wire)
    assert (h.base_offset, h.leader_epoch) == (0, 5)
    assert wire[21:len(client)] == client[21:]
    assert log.epoch_cache.entries == [(5, 0)]


def test_leader_append_of_several_batches_takes_consecutive_offsets(tmp_path):
    log = open_log(tmp_path)
    assert log.append_as_leader(batch(2) + batch(3, tag=1), 0) == (0, 4)
    assert offsets(log.read(0, 1 << 20)) == [(0, 1), (2, 4)]


def test_invalid_produce_payload_writes_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), 0)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    for payload, code in ((bytes(bad), ErrorCode.CORRUPT_MESSAGE), (b"", ErrorCode.INVALID_REQUEST),
                          (batch(2) + bytes(bad), ErrorCode.CORRUPT_MESSAGE)):
        with pytest.raises(KafkaError) as ei:
            log.append_as_leader(payload, 0)
        assert ei.value.code == code
    assert log.log_end_offset == 2
    assert os.path.getsize(tmp_path / "orders-0" / "00000000000000000000.log") == len(batch(2))


def test_batch_above_max_message_bytes_is_refused(tmp_path):
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(batch(10, size=50), 0)
    assert ei.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_batch_above_segment_bytes_is_record_list_too_large(tmp_path):
    log = open_log(tmp_path, segment_bytes=256)
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(batch(10, size=50), 0)
    assert ei.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


def test_leader_append_at_an_older_epoch_than_the_log_is_fenced(tmp_path):
    log = open_log(tmp_path)
    log.assign_leader_epoch(3)
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(batch(1), 2)
    assert ei.value.code == ErrorCode.FENCED_LEADER_EPOCH
    assert log.log_end_offset == 0


def test_election_entry_is_added_before_any_data(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(3), 0)
    assert log.assign_leader_epoch(1)
    assert log.epoch_cache.entries == [(0, 0), (1, 3)]
    assert log.end_offset_for_epoch(0) == (0, 3)
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert not log.assign_leader_epoch(1)


# ---------------------------------------------------------------- follower appends

def test_follower_append_copies_batches_verbatim_with_their_epochs(tmp_path):
    leader = open_log(tmp_path / "l")
    leader.assign_leader_epoch(1)
    leader.append_as_leader(batch(3), 1)
    leader.assign_leader_epoch(4)
    leader.append_as_leader(batch(2), 4)
    follower = open_log(tmp_path / "f")
    wire = leader.read(0, 1 << 20)
    assert follower.append_as_follower(wire) == 4
    assert follower.read(0, 1 << 20) == wire
    assert follower.epoch_cache.entries == [(1, 0), (4, 3)]


def test_follower_append_not_at_log_end_is_rejected_and_writes_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append_as_follower(stamped(3, 0, 1))
    with pytest.raises(UnexpectedAppendOffset) as ei:
        log.append_as_follower(stamped(2, 5, 1))
    assert (ei.value.expected, ei.value.got) == (3, 5)
    with pytest.raises(UnexpectedAppendOffset):
        log.append_as_follower(stamped(2, 1, 1))
    with pytest.raises(UnexpectedAppendOffset, match="not contiguous"):
        log.append_as_follower(stamped(2, 3, 1) + stamped(2, 6, 1))
    assert log.log_end_offset == 3


def test_follower_batches_must_carry_non_decreasing_epochs(tmp_path):
    log = open_log(tmp_path)
    log.append_as_follower(stamped(3, 0, 4))
    for bad in (stamped(1, 3, 3), stamped(1, 3, -1), stamped(1, 3, 5) + stamped(1, 4, 4)):
        with pytest.raises(KafkaError) as ei:
            log.append_as_follower(bad)
        assert ei.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 3


def test_follower_append_checks_crc(tmp_path):
    log = open_log(tmp_path)
    bad = bytearray(stamped(3, 0, 1))
    bad[70] ^= 4
    with pytest.raises(KafkaError) as ei:
        log.append_as_follower(bytes(bad))
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_stale_election_entry_gives_way_to_the_new_leaders_older_epoch_data(tmp_path):
    log = open_log(tmp_path)
    log.append_as_follower(stamped(10, 0, 3))
    log.assign_leader_epoch(5)           # led briefly at epoch 5, wrote nothing
    log.append_as_follower(stamped(4, 10, 4))  # the new leader's log has epoch 4 here
    assert log.epoch_cache.entries == [(3, 0), (4, 10)]


def test_empty_follower_append_is_a_no_op(tmp_path):
    log = open_log(tmp_path)
    assert log.append_as_follower(b"") == -1


# ---------------------------------------------------------------- reads

def test_read_outside_log_bounds_is_offset_out_of_range(tmp_path):
    log = open_log(tmp_path)
    write_batches(log, [(5, 0)] * 2)
    log.maybe_increment_log_start_offset(3)
    for bad in (2, 11, -1):
        with pytest.raises(KafkaError) as ei:
            log.read(bad, 1000)
        assert ei.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(10, 1000) == b""
    assert offsets(log.read(3, 1000)) == [(0, 4), (5, 9)]


def test_read_returns_the_whole_batch_holding_the_fetch_offset(tmp_path):
    log = open_log(tmp_path)
    write_batches(log, [(5, 0)] * 3)
    assert offsets(log.read(7, 1 << 20)) == [(5, 9), (10, 14)]


def test_upper_bound_excludes_batches_reaching_it(tmp_path):
    log = open_log(tmp_path)
    write_batches(log, [(5, 0)] * 3)
    assert offsets(log.read(0, 1 << 20, 10)) == [(0, 4), (5, 9)]
    assert offsets(log.read(0, 1 << 20, 9)) == [(0, 4)]
    assert log.read(5, 1 << 20, 9) == b""
    assert log.read(9, 1 << 20, 9) == b""
    assert offsets(log.read(0, 1 << 20, None)) == [(0, 4), (5, 9), (10, 14)]


def test_max_bytes_cuts_at_whole_batches_but_returns_one_oversized_batch(tmp_path):
    log = open_log(tmp_path)
    written = write_batches(log, [(5, 0)] * 4, size=40)
    one = len(written[0][2])
    assert offsets(log.read(0, 2 * one)) == [(0, 4), (5, 9)]
    assert offsets(log.read(0, 2 * one + one - 1)) == [(0, 4), (5, 9)]
    assert offsets(log.read(0, 10)) == [(0, 4)]
    assert log.read(0, 10, min_one_batch=False) == b""
    assert offsets(log.read(5, 0)) == [(5, 9)]


def test_read_moves_to_the_next_segment_at_a_segment_end(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    write_batches(log, [(3, 0)] * 12)
    bases = log.segment_base_offsets
    assert len(bases) > 2
    got = log.read(bases[1], 1 << 20)
    assert offsets(got)[0][0] == bases[1]
    assert offsets(got)[-1][1] == bases[2] - 1  # one segment per read
    assert [r.offset for r in iter_records(read_all(log))] == list(range(36))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 8), min_size=1, max_size=40), st.data())
def test_reads_match_a_model_of_whole_batches(tmp_path_factory, sizes, data):
    root = tmp_path_factory.mktemp("read")
    log = PartitionLog.open(str(root / "t-0"), LogConfig(segment_bytes=600, index_interval_bytes=90))
    written = write_batches(log, [(n, 0) for n in sizes], size=data.draw(st.integers(1, 30)))
    leo = log.log_end_offset
    fetch = data.draw(st.integers(0, leo))
    max_bytes = data.draw(st.integers(0, 800))
    upper = data.draw(st.integers(0, leo))
    got = log.read(fetch, max_bytes, upper)
    # model: batches from the one holding `fetch`, within its segment, last < upper, <= max_bytes (>= 1 batch)
    seg_bases = log.segment_base_offsets
    seg_of = lambda off: max(b for b in seg_bases if b <= off)  # noqa: E731
    start = next((i for i, (b, last, _) in enumerate(written) if last >= fetch), None)
    expect, used = [], 0
    if start is not None and fetch < upper:
        seg = seg_of(written[start][0])
        for b, last, d in written[start:]:
            if last >= upper or seg_of(b) != seg:
                break
            if used + len(d) > max_bytes and expect:
                break
            if used + len(d) > max_bytes and not expect:
                expect.append(d)
                break
            expect.append(d)
            used += len(d)
    assert got == b"".join(expect)
    abandon(log)


# ---------------------------------------------------------------- truncation

def test_truncate_mid_batch_goes_to_the_batch_base_s6(tmp_path, events):
    log = open_log(tmp_path, events=events)
    write_batches(log, [(10, 0), (10, 1), (10, 1)])
    assert log.truncate_to(15, reason="diverged") == 10
    assert log.log_end_offset == 10
    assert log.epoch_cache.entries == [(0, 0)]
    ev = [e for e in events if e.kind == "truncation"][-1]
    assert (ev.before, ev.after, ev.reason, ev.extra["requested_offset"]) == (30, 10, "diverged", 15)
    # offsets continue without going backwards after re-append
    write_batches(log, [(7, 2)])
    assert [r.offset for r in iter_records(read_all(log))] == list(range(17))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 9), min_size=1, max_size=60), st.data())
def test_truncation_target_found_by_index_then_batch_boundary_search(tmp_path_factory, sizes, data):
    root = tmp_path_factory.mktemp("trunc")
    log = PartitionLog.open(str(root / "t-0"), LogConfig(segment_bytes=700, index_interval_bytes=100))
    written = write_batches(log, [(n, 0) for n in sizes])
    target = data.draw(st.integers(0, log.log_end_offset))
    actual = log.truncate_to(target)
    expected = target if target >= written[-1][1] + 1 else next(b for b, last, _ in written if last >= target)
    assert actual == expected == log.log_end_offset
    assert read_all(log) == b"".join(d for b, last, d in written if last < actual)
    assert all(b <= actual for b in log.segment_base_offsets)
    abandon(log)
    again = PartitionLog.open(str(root / "t-0"), LogConfig(segment_bytes=700, index_interval_bytes=100))
    assert again.log_end_offset == actual
    abandon(again)


def test_truncate_deletes_later_segments_and_lowers_recovery_point(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    write_batches(log, [(3, 0)] * 12)
    asyncio.run(asyncio.to_thread(log.flush))
    assert log.recovery_point == 36
    bases = log.segment_base_offsets
    log.truncate_to(bases[1] + 1)
    assert log.segment_base_offsets == bases[:2]
    assert not (tmp_path / "orders-0" / f"{bases[2]:020d}.log").exists()
    assert log.recovery_point == log.log_end_offset == bases[1]


def test_truncate_at_or_above_log_end_is_a_no_op(tmp_path, events):
    log = open_log(tmp_path, events=events)
    write_batches(log, [(3, 0)])
    assert log.truncate_to(3) == 3 and log.truncate_to(9) == 3
    assert not [e for e in events if e.kind == "truncation"]


def test_truncate_at_the_log_end_still_drops_an_epoch_led_without_appends(tmp_path, events):
    """E4 / Kafka's UnifiedLog.truncateTo: a broker that led epoch 1 and appended nothing
    keeps (1, LEO); truncating at (or above) the LEO removes it, the data stays."""
    log = open_log(tmp_path, events=events)
    write_batches(log, [(5, 0)])
    log.assign_leader_epoch(1)
    assert log.epoch_cache.entries == [(0, 0), (1, 5)]
    version = log.epoch_cache.version
    assert log.truncate_to(5, reason="diverging epoch 0 ending at 5") == 5
    assert log.log_end_offset == 5 and log.epoch_cache.entries == [(0, 0)]
    assert log.epoch_cache_dirty and log.epoch_cache.version > version
    ev = [e for e in events if e.kind == "truncation"][-1]
    assert (ev.before, ev.after, ev.extra["side"], ev.extra["epoch_entries_removed"]) == (5, 5, "epochs", [[1, 5]])
    assert log.truncate_to(9) == 5
    assert len([e for e in events if e.kind == "truncation"]) == 1


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    write_batches(log, [(3, 2)] * 12)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 100)
    assert log.segment_base_offsets == [100]
    assert log.epoch_cache.entries == []
    assert sorted(os.listdir(tmp_path / "orders-0")) == [f"{100:020d}{s}" for s in (".index", ".log", ".timeindex")]
    log.append_as_follower(stamped(2, 100, 3))
    assert log.epoch_cache.entries == [(3, 100)]
    with pytest.raises(KafkaError):
        log.read(99, 100)


def test_truncate_below_first_segment_restarts_the_log_there(tmp_path):
    log = open_log(tmp_path)
    log.truncate_fully_and_start_at(50)
    write_batches(log, [(5, 0)])
    assert log.truncate_to(20) == 20
    assert (log.log_start_offset, log.log_end_offset) == (20, 20)


# ---------------------------------------------------------------- log start and retention

def test_log_start_may_sit_mid_batch(tmp_path):
    log = open_log(tmp_path)
    write_batches(log, [(5, 0), (5, 1)])
    assert log.maybe_increment_log_start_offset(7)
    assert not log.maybe_increment_log_start_offset(6)
    assert offsets(log.read(7, 1000)) == [(5, 9)]
    assert log.epoch_cache.entries == [(1, 7)]
    with pytest.raises(KafkaError) as ei:
        log.maybe_increment_log_start_offset(11)
    assert ei.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention_bytes_deletes_oldest_whole_segments(tmp_path, events):
    log = open_log(tmp_path, events=events, segment_bytes=400, retention_bytes=900)
    write_batches(log, [(3, 0)] * 20)
    sizes = {b: os.path.getsize(tmp_path / "orders-0" / f"{b:020d}.log") for b in log.segment_base_offsets}
    deleted = log.delete_old_segments()
    assert deleted > 0
    assert log.size_bytes >= 900
    assert log.size_bytes - sizes[log.segment_base_offsets[0]] < 900
    assert log.log_start_offset == log.segment_base_offsets[0]
    ev = [e for e in events if e.kind == "truncation"][-1]
    assert ev.extra["side"] == "start" and "retention.bytes" in ev.reason


def test_retention_ms_uses_segment_max_timestamp_and_stops_at_the_hw(tmp_path):
    clock = ManualClock(T0 + 10 * DAY)
    log = open_log(tmp_path, clock=clock, segment_bytes=400, retention_ms=DAY)
    for day in range(5):
        write_batches(log, [(3, 0)] * 4, ts=T0 + day * DAY)
        log.roll()
    bases = log.segment_base_offsets
    # every segment is older than a day; only those wholly below HW=25 may go
    assert log.delete_old_segments(clock(), high_watermark=25) == sum(
        1 for i, b in enumerate(bases[:-1]) if bases[i + 1] <= 25)
    assert log.log_start_offset <= 25
    clock.now = T0 + 4 * DAY + DAY // 2
    log.delete_old_segments(clock(), high_watermark=log.log_end_offset)
    assert log.log_start_offset == 48  # the day-4 segments are young enough


def test_retention_of_every_segment_rolls_a_fresh_active_segment(tmp_path):
    clock = ManualClock(T0 + 30 * DAY)
    log = open_log(tmp_path, clock=clock, retention_ms=DAY)
    write_batches(log, [(3, 1)] * 3)
    assert log.delete_old_segments() == 1
    assert (log.log_start_offset, log.log_end_offset) == (9, 9)
    assert log.segment_base_offsets == [9]
    assert log.epoch_cache.entries == [(1, 9)]
    assert log.read(9, 100) == b""


def test_segments_wholly_below_log_start_are_deleted(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    write_batches(log, [(3, 0)] * 12)
    bases = log.segment_base_offsets
    log.maybe_increment_log_start_offset(bases[2] + 1)
    log.delete_old_segments()
    assert log.segment_base_offsets == bases[2:]
    assert log.log_start_offset == bases[2] + 1


# ---------------------------------------------------------------- rolling

def test_segments_roll_by_size_named_by_base_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=500)
    write_batches(log, [(3, 0)] * 20)
    names = sorted(n for n in os.listdir(tmp_path / "orders-0") if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in log.segment_base_offsets]
    assert all(os.path.getsize(tmp_path / "orders-0" / n) <= 500 for n in names)


def test_segment_rolls_after_segment_ms_of_its_first_batch(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path, clock=clock, segment_ms=1000)
    write_batches(log, [(1, 0)], ts=T0)
    clock.now = T0 + 1000
    write_batches(log, [(1, 0)], ts=T0 + 1000)
    assert log.segment_base_offsets == [0]
    clock.now = T0 + 1001
    write_batches(log, [(1, 0)], ts=T0 + 1001)
    assert log.segment_base_offsets == [0, 2]


def test_ancient_client_timestamps_do_not_roll_a_segment_per_batch(tmp_path):
    log = open_log(tmp_path, segment_ms=DAY)
    write_batches(log, [(1, 0)] * 10, ts=5)
    assert log.segment_base_offsets == [0]


def test_empty_active_segment_never_rolls(tmp_path):
    log = open_log(tmp_path, segment_ms=1)
    assert not log.maybe_roll(now_ms=T0 + DAY)
    log.roll()
    assert log.segment_base_offsets == [0]


# ---------------------------------------------------------------- flushing

def test_default_policy_flushes_only_on_roll(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    write_batches(log, [(3, 0)] * 2)
    assert not log.needs_flush()
    write_batches(log, [(3, 0)] * 10)
    assert log.needs_flush()
    assert asyncio.run(asyncio.to_thread(log.flush)) == log.log_end_offset
    assert not log.needs_flush()


def test_flush_messages_and_flush_ms_policies(tmp_path):
    clock = ManualClock()
    log = open_log(tmp_path / "a", clock=clock, flush_messages=5)
    write_batches(log, [(4, 0)])
    assert not log.needs_flush()
    write_batches(log, [(1, 0)])
    assert log.needs_flush()
    log2 = open_log(tmp_path / "b", clock=clock, flush_ms=1000)
    write_batches(log2, [(1, 0)])
    assert not log2.needs_flush(clock.now + 999)
    assert log2.needs_flush(clock.now + 1000)


def test_flush_up_to_advances_recovery_point_and_persists_epochs(tmp_path):
    log = open_log(tmp_path)
    log.assign_leader_epoch(3)
    write_batches(log, [(5, 3)] * 4)
    assert log.epoch_cache_dirty
    assert asyncio.run(asyncio.to_thread(log.flush, 10)) == 10
    assert not log.epoch_cache_dirty
    assert (tmp_path / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n3 0\n"
    assert asyncio.run(asyncio.to_thread(log.flush)) == 20


def test_fsync_refuses_to_run_on_the_event_loop(tmp_path):
    log = open_log(tmp_path)

    async def main():
        for call in (log.flush, log.persist_epoch_cache, log.close):
            with pytest.raises(RuntimeError, match="event loop"):
                call()
        await asyncio.to_thread(log.close)

    asyncio.run(main())
    assert log.closed


def test_truncation_during_a_flush_keeps_the_recovery_point_at_or_below_the_new_end(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    write_batches(log, [(5, 0)] * 4)
    real = os.fsync
    done = []

    def fsync_then_truncate(fd):
        real(fd)
        if not done:
            done.append(log.truncate_to(7))
            write_batches(log, [(5, 0)] * 3)  # unflushed data at 5..19

    monkeypatch.setattr(os, "fsync", fsync_then_truncate)
    log.flush()
    assert done == [5]
    assert log.recovery_point <= 5


def test_flush_thread_runs_safely_beside_appends_rolls_and_truncations(tmp_path):
    log = open_log(tmp_path, segment_bytes=2000, retention_bytes=20000)
    stop = threading.Event()
    errors: list[BaseException] = []
    flushes = [0]

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
                flushes[0] += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(600):
            log.append_as_leader(batch(3, tag=i), 0)
            if i % 97 == 50:
                log.truncate_to(log.log_end_offset - 4)
            if i % 53 == 0:
                log.delete_old_segments()
    finally:
        stop.set()
        t.join()
    assert not errors
    assert flushes[0] > 0
    assert log.flush() == log.log_end_offset
    want = read_all(log)
    abandon(log)
    again = PartitionLog.open(str(tmp_path / "orders-0"), LogConfig(segment_bytes=2000),
                              recovery_point=log.recovery_point, log_start_offset=log.log_start_offset)
    assert read_all(again) == want


def test_closed_log_refuses_appends(tmp_path):
    log = open_log(tmp_path)
    write_batches(log, [(2, 0)])
    log.close()
    with pytest.raises(KafkaError) as ei:
        log.append_as_leader(build_batch([b"x"]), 0)
    assert ei.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    again = PartitionLog.open(str(tmp_path / "orders-0"), clean_shutdown=True)
    assert again.log_end_offset == 2 and again.load_info.batches_scanned == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 6)),
    st.tuples(st.just("read_next"), st.integers(0, 600)),
    st.tuples(st.just("read_at"), st.integers(0, 10_000)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000)),
    st.tuples(st.just("retain"), st.integers(0, 10_000)),
), max_size=60))
def test_sequential_read_hints_never_change_what_a_read_returns(tmp_path_factory, ops):
    root = tmp_path_factory.mktemp("hints")
    log = PartitionLog.open(str(root / "t-0"), LogConfig(segment_bytes=500, index_interval_bytes=64),
                            clock=ManualClock())
    cursor = 0
    for op, arg in ops:
        if op == "append":
            log.append_as_leader(batch(arg, tag=log.log_end_offset), 0)
            continue
        if op == "truncate":
            log.truncate_to(arg % (log.log_end_offset + 1))
            continue
        if op == "retain":
            log.maybe_increment_log_start_offset(min(arg % (log.log_end_offset + 1), log.log_end_offset))
            log.delete_old_segments()
            continue
        offset = cursor if op == "read_next" else arg % (log.log_end_offset + 1)
        if not log.log_start_offset <= offset <= log.log_end_offset:
            cursor = log.log_start_offset
            continue
        max_bytes = arg if op == "read_next" else 300
        got = log.read(offset, max_bytes)
        saved = dict(log._read_hints)
        log._read_hints.clear()
        assert log.read(offset, max_bytes) == got
        log._read_hints = saved
        if got:
            cursor = list(scan_headers(got))[-1].last_offset + 1
    abandon(log)


def test_only_the_active_segment_and_the_last_read_inactive_one_hold_open_files(tmp_path):
    log = open_log(tmp_path, segment_bytes=200, index_interval_bytes=1)
    for i in range(12):
        log.append_as_leader(build_batch([b"v%03d" % i + bytes(100)]), 0)
    segs = log._segments
    assert len(segs) >= 6
    assert [s.holds_fds for s in segs[:-1]] == [0] * (len(segs) - 1)
    assert log.read(0, 1 << 20)                        # reads the first segment
    assert segs[0].holds_fds and sum(1 for s in segs[:-1] if s.holds_fds) == 1
    assert log.read(segs[2].base_offset, 1 << 20)      # another one: the first is released
    assert not segs[0].holds_fds and segs[2].holds_fds
    log.close()
    reopened = open_log(tmp_path, segment_bytes=200, index_interval_bytes=1)
    assert sum(s.holds_fds for s in reopened._segments) == 0      # nothing open until used
    assert reopened.log_end_offset == 12
    reopened.close()


def test_epoch_entries_of_appended_batches_wait_for_the_flush_and_a_crash_rebuilds_them(tmp_path):
    """A follower's first batch of each epoch needs no checkpoint write of its own (it is above the
    recovery point, and recovery rebuilds it from the batch); an election's entry or a truncation does."""
    path = tmp_path / "orders-0" / "leader-epoch-checkpoint"
    log = open_log(tmp_path)
    write_batches(log, [(2, 3), (2, 4)])
    assert log.epoch_cache_dirty and not log.epoch_checkpoint_due
    abandon(log)                                             # a crash before any flush
    log = open_log(tmp_path)
    assert log.epoch_cache.entries == [(3, 0), (4, 2)]
    assert log.epoch_checkpoint_due                          # rebuilt by the recovery, not yet in the file
    asyncio.run(asyncio.to_thread(log.persist_epoch_cache))
    write_batches(log, [(1, 6)])
    assert log.epoch_cache_dirty and not log.epoch_checkpoint_due
    asyncio.run(asyncio.to_thread(log.flush))
    assert not log.epoch_cache_dirty and path.read_text() == "0\n3\n3 0\n4 2\n6 4\n"
    log.truncate_to(2)                                       # drops entries 4:2 and 6:4 from the cache
    assert log.epoch_checkpoint_due
    asyncio.run(asyncio.to_thread(log.persist_epoch_cache))
    assert path.read_text() == "0\n1\n3 0\n"
    write_batches(log, [(1, 7)])
    assert not log.epoch_checkpoint_due
    log.assign_leader_epoch(8)                               # an election's entry: no batch to rebuild it from
    assert log.epoch_checkpoint_due


# ---------------------------------------------------------------- ListOffsets by time

@pytest.mark.parametrize("compression", [codec.NONE, codec.LZ4])
def test_offset_for_timestamp_finds_the_record_inside_its_batch(tmp_path, compression):
    """Kafka's segment search: the first record (not batch) whose timestamp is at or after the target,
    its own timestamp, above the log start and below the bound (librdkafka's test 0054)."""
    log = open_log(tmp_path)
    log.assign_leader_epoch(0)
    log.append_as_leader(build_batch([(None, b"a", 1234), (None, b"b", 9_000), (None, b"c", 5_000)],
                                     compression=compression), 0)                          # offsets 0-2
    log.append_as_leader(build_batch([(None, b"d", 7_000), (None, b"e", 20_000)], compression=compression), 0)
    assert log.offset_for_timestamp(0, 5) == (0, 1234)
    assert log.offset_for_timestamp(1235, 5) == (1, 9_000)
    assert log.offset_for_timestamp(6_000, 5) == (1, 9_000)       # the first at or after it, not the closest
    assert log.offset_for_timestamp(9_001, 5) == (4, 20_000)
    assert log.offset_for_timestamp(9_001, 4) is None              # found at the bound: none, as Kafka
    assert log.offset_for_timestamp(20_001, 5) is None
    assert log.offset_of_max_timestamp(5) == (4, 20_000)
    assert log.offset_of_max_timestamp(3) == (1, 9_000)            # the record, not the batch's last offset
    assert log.maybe_increment_log_start_offset(2)
    assert log.offset_for_timestamp(0, 5) == (2, 5_000)
    assert log.offset_of_max_timestamp(3) == (1, 9_000)             # Kafka's answer, below a mid-batch log start


def test_offset_for_timestamp_on_a_batch_whose_bytes_changed_on_disk_raises_corrupt_message(tmp_path):
    """The record-level search decodes the batch: damaged bytes are a KafkaError (the ListOffsets
    handler answers the partition with its code), not a crash."""
    log = open_log(tmp_path)
    log.assign_leader_epoch(0)
    log.append_as_leader(build_batch([(None, b"a", 1_000), (None, b"b", 2_000)]), 0)
    log.flush()
    seg = os.path.join(str(tmp_path / "orders-0"), f"{0:020d}.log")
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) - 1)
        last = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(KafkaError) as ei:
        log.offset_for_timestamp(1_500, 2)
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE
