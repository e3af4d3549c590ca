"""PartitionLog.log_end_offset / log_start_offset are plain attributes: after every operation (appends as
leader and follower, refused appends, truncations, restarts, log-start moves, rolls, retention, I/O errors,
reopening) they equal what the segments say."""
from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from minibroker.errors import KafkaError
from minibroker.storage import LogConfig, PartitionLog

from .helpers import ManualClock, abandon, batch, stamped

DAY_MS = 24 * 3600 * 1000


def check(log: PartitionLog) -> None:
    segs = log._segments
    assert log.log_end_offset == segs[-1].next_offset
    assert segs[0].base_offset <= log.log_start_offset <= log.log_end_offset
    assert log.read(log.log_end_offset, 1 << 20) == b""
    if log.log_end_offset > log.log_start_offset:
        assert log.read(log.log_start_offset, 1 << 20) != b""


OPS = st.lists(st.one_of(
    st.tuples(st.just("leader"), st.integers(1, 5), st.integers(1, 2)),
    st.tuples(st.just("follower"), st.integers(1, 5), st.integers(0, 2)),
    st.tuples(st.just("follower_gap"), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("restart"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("start"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
    st.tuples(st.just("retention"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_log_end_and_start_offsets_follow_every_operation(ops):
    with tempfile.TemporaryDirectory() as d:
        clock = ManualClock()
        cfg = LogConfig(segment_bytes=400, retention_bytes=-1, index_interval_bytes=100)
        log = PartitionLog.open(d + "/t-0", cfg, clock=clock)
        epoch = 0
        for op, a, b in ops:
            leo = log.log_end_offset
            if op == "leader":
                epoch = max(epoch, log.epoch_cache.latest_epoch or 0)
                payload = batch(a) if b == 1 else batch(a) + batch(1, tag=1)
                res = log.append_as_leader(payload, epoch)
                assert res == (leo, log.log_end_offset - 1)
            elif op == "follower":
                epoch = max(epoch, log.epoch_cache.latest_epoch or 0) + b
                assert log.append_as_follower(stamped(a, leo, epoch)) == leo + a - 1
            elif op == "follower_gap":
                with pytest.raises(KafkaError):
                    log.append_as_follower(stamped(a, leo + b, max(epoch, log.epoch_cache.latest_epoch or 0)))
                assert log.log_end_offset == leo
            elif op == "truncate":
                assert log.truncate_to(a) == log.log_end_offset
            elif op == "restart":
                log.truncate_fully_and_start_at(a)
                assert log.log_end_offset == log.log_start_offset == a
            elif op == "start":
                if a <= leo:
                    log.maybe_increment_log_start_offset(a)
                else:
                    with pytest.raises(KafkaError):
                        log.maybe_increment_log_start_offset(a)
            elif op == "roll":
                log.roll()
            elif op == "retention":
                clock.now += a * DAY_MS
                log.delete_old_segments(high_watermark=log.log_end_offset)
            else:
                start = log.log_start_offset
                abandon(log)
                log = PartitionLog.open(d + "/t-0", cfg, clock=clock, log_start_offset=start)
                assert (log.log_end_offset, log.log_start_offset) == (leo, start)
            check(log)
        abandon(log)


def test_a_failed_write_leaves_the_log_end_offset(tmp_path, monkeypatch):
    from minibroker.storage import fsutil
    log = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(), clock=ManualClock())
    log.append_as_follower(stamped(3, 0, 0))

    def fail(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil, "write_all", fail)
    for append in (lambda: log.append_as_follower(stamped(2, 3, 0)), lambda: log.append_as_leader(batch(2), 0),
                   lambda: log.append_as_leader(batch(1) + batch(1, tag=1), 0)):
        with pytest.raises(KafkaError):
            append()
        assert log.log_end_offset == 3 == log._segments[-1].next_offset
    monkeypatch.undo()
    assert log.append_as_leader(batch(2), 0) == (3, 4)
    check(log)
    abandon(log)
