"""LogManager: partition directories, data-dir checkpoints, clean shutdown."""
from __future__ import annotations

import asyncio
import os

import pytest

from minibroker.errors import ErrorCode, KafkaError
from minibroker.storage import CLEAN_SHUTDOWN_FILE, LogConfig, LogManager
from minibroker.storage.checkpoint import OffsetCheckpointFile

from .helpers import ManualClock, abandon, batch, write_batches


@pytest.mark.parametrize("topic", ["", "..", ".", "a/b", "../etc", "x" * 250, "sp ace", "ü"])
def test_illegal_topic_names_are_refused(tmp_path, topic):
    m = LogManager(str(tmp_path))
    with pytest.raises(KafkaError) as ei:
        m.get_or_create(topic, 0)
    assert ei.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert os.listdir(tmp_path) == []


def test_partition_directories_are_topic_dash_partition(tmp_path):
    m = LogManager(str(tmp_path))
    m.get_or_create("my.topic-x", 3)
    assert os.path.isdir(tmp_path / "my.topic-x-3")
    assert m.get_or_create("my.topic-x", 3) is m.get("my.topic-x", 3)
    with pytest.raises(KafkaError):
        m.get_or_create("t", -1)


def test_startup_loads_every_partition_directory(tmp_path):
    m = LogManager(str(tmp_path))
    for p in range(3):
        write_batches(m.get_or_create("orders", p), [(p + 1, 0)])
    m.shutdown()
    (tmp_path / "not-a-partition").mkdir()
    m2 = LogManager(str(tmp_path))
    assert sorted(tp for tp, _ in m2.logs()) == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert [m2.get("orders", p).log_end_offset for p in range(3)] == [1, 2, 3]


def test_shutdown_writes_checkpoints_then_the_marker(tmp_path):
    m = LogManager(str(tmp_path))
    log = m.get_or_create("orders", 0)
    write_batches(log, [(4, 0)])
    log.maybe_increment_log_start_offset(2)
    m.shutdown({("orders", 0): 3})
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    read = lambda name: OffsetCheckpointFile(str(tmp_path / name)).read()  # noqa: E731
    assert read("replication-offset-checkpoint") == {("orders", 0): 3}
    assert read("recovery-point-offset-checkpoint") == {("orders", 0): 4}
    assert read("log-start-offset-checkpoint") == {("orders", 0): 2}
    with pytest.raises(KafkaError):
        m.get_or_create("orders", 1)


def test_unclean_restart_uses_checkpointed_recovery_point_and_log_start(tmp_path):
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400))
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 0)] * 12)
    log.flush(18)
    log.maybe_increment_log_start_offset(5)
    m.checkpoint_offsets()
    abandon(log)
    m2 = LogManager(str(tmp_path), LogConfig(segment_bytes=400))
    log2 = m2.get("orders", 0)
    assert not m2.clean_shutdown
    assert log2.log_start_offset == 5
    assert log2.recovery_point == 18
    assert log2.load_info.recovered_from_offset <= 18
    assert log2.log_end_offset == 36


def test_flush_due_flushes_by_policy_and_persists_dirty_epoch_caches(tmp_path):
    clock = ManualClock()
    m = LogManager(str(tmp_path), LogConfig(flush_ms=1000), clock=clock)
    a = m.get_or_create("a", 0)
    b = m.get_or_create("b", 0)
    write_batches(a, [(2, 0)])
    b.assign_leader_epoch(7)
    assert m.flush_due(clock.now) == []
    assert not b.epoch_cache_dirty
    assert (tmp_path / "b-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n7 0\n"
    assert m.flush_due(clock.now + 1000) == [("a", 0)]
    assert a.recovery_point == 2


def test_a_roll_flushes_the_rolled_segments_only_and_a_due_policy_the_whole_log_d9(tmp_path):
    clock = ManualClock()
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400, flush_ms=60_000), clock=clock)
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 0)] * 12)
    active_base = log.segment_base_offsets[-1]
    assert 0 < active_base < log.log_end_offset            # rolled, and the active segment holds data
    assert log.due_flush_offset(clock.now) == active_base
    assert m.flush_due(clock.now) == [("orders", 0)]
    assert log.recovery_point == active_base                # the active segment was not fsynced
    assert log.due_flush_offset(clock.now) is None
    assert log.due_flush_offset(clock.now + 60_000) == log.log_end_offset
    assert m.flush_due(clock.now + 60_000) == [("orders", 0)] and log.recovery_point == log.log_end_offset
    m.shutdown()


def test_per_topic_config_at_load_and_on_get_or_create(tmp_path):
    m = LogManager(str(tmp_path))
    m.get_or_create("small", 0, LogConfig(segment_bytes=300))
    m.shutdown()
    m2 = LogManager(str(tmp_path), topic_config=lambda t: LogConfig(segment_bytes=300) if t == "small" else None)
    log = m2.get("small", 0)
    assert log.config.segment_bytes == 300
    m2.get_or_create("small", 0, LogConfig(segment_bytes=500))
    assert log.config.segment_bytes == 500


def test_delete_log_removes_the_directory_and_its_hw(tmp_path):
    m = LogManager(str(tmp_path))
    write_batches(m.get_or_create("t", 0), [(2, 0)])
    m.checkpoint_high_watermarks({("t", 0): 2})
    assert m.delete_log("t", 0)
    assert not (tmp_path / "t-0").exists()
    assert not m.delete_log("t", 0)
    m.checkpoint_high_watermarks({})
    assert OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint")).read() == {}


def test_manager_lifecycle_from_an_asyncio_broker(tmp_path):
    """The way the broker uses it: blocking calls in threads, appends on the loop."""
    async def main():
        m = await asyncio.to_thread(LogManager, str(tmp_path))
        log = m.get_or_create("t", 0)
        log.assign_leader_epoch(1)
        first, last = log.append_as_leader(batch(5), 1)
        await asyncio.to_thread(log.flush, last + 1)
        await asyncio.to_thread(m.checkpoint_high_watermarks, {("t", 0): last + 1})
        await asyncio.to_thread(m.shutdown)
        return last

    assert asyncio.run(main()) == 4
    m = LogManager(str(tmp_path))
    assert m.clean_shutdown and m.load_high_watermark("t", 0) == 5


@pytest.mark.parametrize("clean", [True, False])
def test_restart_never_cuts_the_log_at_the_checkpointed_hw_s3(tmp_path, clean):
    """KIP-101 scenario 1: the suffix above the local HW stays; only
    divergence (truncate_to by the replication layer) may remove it."""
    m = LogManager(str(tmp_path))
    log = m.get_or_create("t", 0)
    write_batches(log, [(3, 1)] * 4)
    m.checkpoint_high_watermarks({("t", 0): 3})
    if clean:
        m.shutdown({("t", 0): 3})
    else:
        abandon(log)
    m2 = LogManager(str(tmp_path))
    assert m2.get("t", 0).log_end_offset == 12
    assert m2.load_high_watermark("t", 0) == 3


def test_manager_must_be_opened_off_the_event_loop(tmp_path):
    async def main():
        with pytest.raises(RuntimeError, match="event loop"):
            LogManager(str(tmp_path))
    asyncio.run(main())


def test_truncation_below_the_recovery_point_is_checkpointed_by_the_next_flusher_pass(tmp_path):
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400))
    log = m.get_or_create("t", 0)
    write_batches(log, [(3, 0)] * 12)
    log.flush()
    m.checkpoint_offsets()
    rp_file = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    assert rp_file.read() == {("t", 0): 36}
    log.truncate_to(10)
    assert log.recovery_point_lowered
    m.flush_due()
    assert rp_file.read() == {("t", 0): 9}
    assert not log.recovery_point_lowered


def _files(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_retention_renames_segments_deleted_and_the_trash_unlinks_them_after_the_delay_d10(tmp_path):
    clock = ManualClock()
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400, retention_bytes=900, file_delete_delay_ms=60_000),
                   clock=clock)
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 0)] * 20)
    part_dir = tmp_path / "orders-0"
    assert log.delete_old_segments() > 0
    gone = [n for n in _files(part_dir) if n.endswith(".deleted")]
    assert gone and all(n[:20].isdigit() and int(n[:20]) < log.log_start_offset for n in gone)
    assert {n.split(".")[1] for n in gone} == {"log", "index", "timeindex"}
    assert len(m.trash) == len(gone) and m.trash.ms_until_due() == 60_000
    assert m.trash.drain(clock() + 59_999) == 0 and len(m.trash) == len(gone)
    assert m.trash.drain(clock() + 60_000) == len(gone)
    assert not [n for n in _files(part_dir) if n.endswith(".deleted")] and len(m.trash) == 0
    assert log.log_start_offset == log.segment_base_offsets[0]
    m.shutdown()


def test_truncation_retires_later_segments_through_the_trash_too(tmp_path):
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400, file_delete_delay_ms=0), clock=ManualClock())
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 0)] * 20)
    first_bases = log.segment_base_offsets
    log.truncate_to(first_bases[1])
    assert log.segment_base_offsets == first_bases[:2] or log.segment_base_offsets == first_bases[:1]
    retired = {int(n[:20]) for n in _files(tmp_path / "orders-0") if n.endswith(".log.deleted")}
    assert retired == set(first_bases[len(log.segment_base_offsets):])
    write_batches(log, [(3, 0)] * 20)      # the log grows again over the retired bases: new files, untouched
    m.trash.drain(10**15)
    names = _files(tmp_path / "orders-0")
    assert not [n for n in names if n.endswith(".deleted")]
    assert all(f"{b:020d}.log" in names for b in log.segment_base_offsets)
    m.shutdown()


def test_a_restart_removes_retired_files_whose_unlink_never_ran_d10(tmp_path):
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=400, retention_bytes=900), clock=ManualClock())
    log = m.get_or_create("orders", 0)
    write_batches(log, [(3, 0)] * 20)
    log.delete_old_segments()
    start, leo = log.log_start_offset, log.log_end_offset
    assert [n for n in _files(tmp_path / "orders-0") if n.endswith(".deleted")]
    abandon(log)                                # a crash: the trash's 60 s never passed
    m2 = LogManager(str(tmp_path), LogConfig(segment_bytes=400, retention_bytes=900))
    log2 = m2.get("orders", 0)
    assert not [n for n in _files(tmp_path / "orders-0") if n.endswith(".deleted")]
    assert log2.log_end_offset == leo and log2.segment_base_offsets[0] == start
    m2.shutdown()
