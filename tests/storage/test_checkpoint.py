"""Checkpoint files: D4 format, atomic writes, loud errors, HW clamping."""
from __future__ import annotations

import os

import pytest

from minibroker.records import build_batch
from minibroker.storage import CorruptCheckpointError, LogConfig, LogManager
from minibroker.storage.checkpoint import (
    LeaderEpochCheckpointFile, OffsetCheckpointFile, read_checkpoint, write_checkpoint,
)

from .crash_helpers import Child


def test_hw_checkpoint_round_trip_writes_kafka_text_format_x18(tmp_path):
    f = OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint"))
    f.write({("orders", 0): 1523, ("orders", 1): 877})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\norders 0 1523\norders 1 877\n"
    assert f.read() == {("orders", 0): 1523, ("orders", 1): 877}


def test_epoch_checkpoint_round_trip(tmp_path):
    f = LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint"))
    f.write([(3, 0), (4, 6)])
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n3 0\n4 6\n"
    assert f.read() == [(3, 0), (4, 6)]


@pytest.mark.parametrize("text", ["", "0\n", "0"])
def test_absent_empty_or_countless_file_means_no_entries(tmp_path, text):
    p = tmp_path / "cp"
    assert OffsetCheckpointFile(str(p)).read() == {}
    p.write_text(text)
    assert OffsetCheckpointFile(str(p)).read() == {}


@pytest.mark.parametrize("text,problem", [
    ("0\n3\norders 0 1\norders 1 2\n", "expected 3 entries, found 2"),
    ("0\n1\norders 0 1\norders 1 2\n", "expected 1 entries, found 2"),
    ("1\n0\n", "unrecognised version 1"),
    ("zero\n0\n", "version 'zero'"),
    ("0\nmany\n", "entry count 'many'"),
    ("0\n1\norders 0\n", "line 3"),
    ("0\n1\norders x 5\n", "line 3"),
    ("0\n1\norders 0 5 9\n", "line 3"),
    ("0\n1\norders  0 5\n", "line 3"),
    ("0\n-1\n", "negative entry count"),
    (b"0\n1\n\xff 0 1\n", "not UTF-8"),
])
def test_malformed_checkpoint_is_an_error_naming_the_file(tmp_path, text, problem):
    p = tmp_path / "replication-offset-checkpoint"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    with pytest.raises(CorruptCheckpointError) as ei:
        OffsetCheckpointFile(str(p)).read()
    assert str(p) in str(ei.value)
    assert problem in str(ei.value)
    assert ei.value.name == "KAFKA_STORAGE_ERROR" and not ei.value.retriable


def test_malformed_epoch_checkpoint_fails_log_open_naming_the_file(tmp_path):
    m = LogManager(str(tmp_path / "data"))
    m.get_or_create("t", 0).append_as_leader(build_batch([b"x"]), 0)
    m.shutdown()
    cp = tmp_path / "data" / "t-0" / "leader-epoch-checkpoint"
    cp.write_text("0\n1\n3\n")
    with pytest.raises(CorruptCheckpointError, match="t-0/leader-epoch-checkpoint"):
        LogManager(str(tmp_path / "data"))


def test_malformed_hw_checkpoint_fails_startup_never_a_silent_zero(tmp_path):
    LogManager(str(tmp_path)).shutdown()
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\norders 0 not-a-number\n")
    with pytest.raises(CorruptCheckpointError, match="replication-offset-checkpoint, line 3"):
        LogManager(str(tmp_path))


def test_leftover_tmp_file_is_ignored_and_old_file_used(tmp_path):
    p = str(tmp_path / "replication-offset-checkpoint")
    OffsetCheckpointFile(p).write({("a", 0): 5})
    with open(p + ".tmp", "w") as f:
        f.write("0\n2\na 0 9")
    assert OffsetCheckpointFile(p).read() == {("a", 0): 5}
    OffsetCheckpointFile(p).write({("a", 0): 6})
    assert OffsetCheckpointFile(p).read() == {("a", 0): 6}
    assert not os.path.exists(p + ".tmp")


@pytest.mark.parametrize("where", ["mid-write", "before-rename"])
def test_process_killed_during_checkpoint_write_keeps_previous_checkpoint(tmp_path, where):
    p = str(tmp_path / "replication-offset-checkpoint")
    hook = "tear_writes_after(0)" if where == "mid-write" else (
        "import os as _os\n"
        "def _hang(*a):\n"
        "    announce('TORN before rename')\n"
        "    time.sleep(600)  # hangs mid-write until SIGKILLed: the torn write is under test\n"
        "_os.replace = _hang")
    child = Child(f"""
        from minibroker.storage.checkpoint import OffsetCheckpointFile
        f = OffsetCheckpointFile({p!r})
        f.write({{("orders", 0): 1523, ("orders", 1): 877}})
        announce("GOOD")
        exec({hook!r})
        f.write({{("orders", 0): 99999, ("orders", 1): 88888, ("orders", 2): 7}})
        announce("UNREACHABLE")
    """)
    try:
        child.wait_for("GOOD")
        child.wait_for("TORN")
    finally:
        child.kill()
    assert os.path.exists(p + ".tmp")
    assert OffsetCheckpointFile(p).read() == {("orders", 0): 1523, ("orders", 1): 877}
    # startup through LogManager cleans the tmp and still sees the good file
    m = LogManager(str(tmp_path))
    assert not os.path.exists(p + ".tmp")
    m.shutdown()


def test_write_checkpoint_refuses_to_run_on_the_event_loop(tmp_path):
    import asyncio

    async def main():
        with pytest.raises(RuntimeError, match="event loop"):
            write_checkpoint(str(tmp_path / "x"), [])
        await asyncio.to_thread(write_checkpoint, str(tmp_path / "x"), ["a 0 1"])

    asyncio.run(main())
    assert read_checkpoint(str(tmp_path / "x"), lambda f: f) == [["a", "0", "1"]]


# ---------------------------------------------------------------- HW via LogManager

def _manager_with_log(tmp_path, n_records: int) -> LogManager:
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=4096))
    log = m.get_or_create("orders", 0)
    for _ in range(n_records):
        log.append_as_leader(build_batch([b"r"]), 0)
    return m


def test_loaded_hw_is_clamped_to_the_log_end_offset(tmp_path, events):
    m = _manager_with_log(tmp_path, 5)
    m.shutdown({("orders", 0): 50})
    m2 = LogManager(str(tmp_path), event_sink=events.append)
    assert m2.load_high_watermark("orders", 0) == 5
    moves = [e for e in events if e.kind == "hw_move"]
    assert moves and (moves[0].before, moves[0].after) == (50, 5)


def test_loaded_hw_is_clamped_up_to_the_log_start_offset(tmp_path):
    m = _manager_with_log(tmp_path, 10)
    log = m.get("orders", 0)
    log.maybe_increment_log_start_offset(7)
    m.shutdown({("orders", 0): 3})
    m2 = LogManager(str(tmp_path))
    assert m2.get("orders", 0).log_start_offset == 7
    assert m2.load_high_watermark("orders", 0) == 7


def test_missing_hw_entry_loads_as_log_start(tmp_path):
    m = _manager_with_log(tmp_path, 4)
    m.shutdown()
    assert LogManager(str(tmp_path)).load_high_watermark("orders", 0) == 0


def test_hw_checkpoint_keeps_entries_of_hosted_partitions_not_given(tmp_path):
    m = _manager_with_log(tmp_path, 4)
    m.get_or_create("orders", 1)
    m.checkpoint_high_watermarks({("orders", 0): 3, ("orders", 1): 0})
    m.checkpoint_high_watermarks({("orders", 1): 0, ("gone", 0): 5})
    assert OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint")).read() == {
        ("orders", 0): 3, ("orders", 1): 0}
