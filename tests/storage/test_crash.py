"""Real crashes: a child process appends, is SIGKILLed mid-append, we reopen."""
from __future__ import annotations

import os

import pytest

from minibroker.records import iter_records
from minibroker.storage import LogConfig, LogManager

from .crash_helpers import Child
from .helpers import read_all

PER_BATCH = 50


def expected_value(offset: int) -> bytes:
    return f"{offset // PER_BATCH}:{offset % PER_BATCH}:".encode().ljust(40, b"v")


CHILD = """
    from minibroker.records import build_batch
    from minibroker.storage import LogConfig, LogManager
    m = LogManager({data!r}, LogConfig(segment_bytes={segment_bytes}, index_interval_bytes=512))
    log = m.get_or_create("orders", 0)
    log.assign_leader_epoch(2)
    def batch(i):
        return build_batch([(None, f"{{i}}:{{j}}:".encode().ljust(40, b"v"), 1_700_000_000_000 + i)
                            for j in range({per_batch})])
    i = log.log_end_offset // {per_batch}
    for _ in range({n_batches}):
        first, last = log.append_as_leader(batch(i), 2)
        announce("ACK", first, last, log.log_end_offset)
        if i % 7 == 3:
            m.checkpoint_high_watermarks({{("orders", 0): log.log_end_offset}})
        i += 1
    {after}
    announce("DONE")
    time.sleep(600)        # the child waits here to be SIGKILLed: the crash is the behaviour under test
"""


def run_child(data: str, *, n_batches: int, after: str = "", segment_bytes: int = 1 << 20) -> Child:
    return Child(CHILD.format(data=data, segment_bytes=segment_bytes, per_batch=PER_BATCH,
                              n_batches=n_batches, after=after))


def check_log_holds_exactly(data: str, acked_end: int, *, segment_bytes: int = 1 << 20) -> LogManager:
    m = LogManager(data, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=512))
    log = m.get("orders", 0)
    assert not log.load_info.clean_shutdown
    assert log.log_end_offset == acked_end
    records = list(iter_records(read_all(log)))
    assert [r.offset for r in records] == list(range(acked_end))
    assert all(r.value == expected_value(r.offset) for r in records)
    assert log.epoch_cache.entries == ([(2, 0)] if acked_end else [])
    assert m.load_high_watermark("orders", 0) <= acked_end
    return m


@pytest.mark.parametrize("fraction", [0.0, 0.02, 0.5, 0.999])
def test_sigkill_mid_append_keeps_every_batch_before_the_tear_and_nothing_after(tmp_path, fraction):
    data = str(tmp_path / "data")
    child = run_child(data, n_batches=12, segment_bytes=8192,
                      after=f"tear_writes_after(0, {fraction})\n    log.append_as_leader(batch(i), 2)")
    try:
        torn = child.wait_for("TORN")
    finally:
        child.kill()
    acks = [line.split() for line in child.lines if line.startswith("ACK")]
    assert len(acks) == 12 and torn
    acked_end = int(acks[-1][3])
    m = check_log_holds_exactly(data, acked_end, segment_bytes=8192)
    log = m.get("orders", 0)
    assert log.load_info.bytes_truncated == (0 if fraction == 0.0 else int(int(torn.split()[1]) * fraction))
    # and the log keeps working after recovery
    from minibroker.records import build_batch
    assert log.append_as_leader(build_batch([b"after"]), 3) == (acked_end, acked_end)


def test_sigkill_after_acks_loses_only_buffered_index_entries_which_are_rebuilt(tmp_path):
    """Index entries are buffered in memory; a kill loses them but never
    acknowledged data, and recovery rebuilds the index from the log."""
    data = str(tmp_path / "data")
    child = run_child(data, n_batches=30, segment_bytes=1 << 20)
    try:
        child.wait_for("DONE")
    finally:
        child.kill()
    idx = os.path.join(data, "orders-0", "00000000000000000000.index")
    lagging = os.path.getsize(idx)
    m = check_log_holds_exactly(data, 30 * PER_BATCH)
    assert os.path.getsize(idx) >= lagging
    assert len(m.get("orders", 0)._segments[0].index) > 0


def test_sigkill_at_random_moments_of_a_busy_append_loop(tmp_path):
    """No fault hook: kill the writer while it appends 1 MB batches as fast
    as it can; whatever was acknowledged is intact, anything after is whole
    batches or nothing."""
    data = str(tmp_path / "data")
    acked_end = 0
    for wait_acks in (3, 9, 1):
        child = Child(f"""
            from minibroker.records import build_batch
            from minibroker.storage import LogConfig, LogManager
            m = LogManager({data!r}, LogConfig(segment_bytes=8 << 20))
            log = m.get_or_create("orders", 0)
            log.assign_leader_epoch(2)
            i = log.log_end_offset // {PER_BATCH}
            big = b"v" * 20000
            while True:
                b = build_batch([(None, f"{{i}}:{{j}}:".encode().ljust(40, b"v") + big, 1)
                                 for j in range({PER_BATCH})])
                first, last = log.append_as_leader(b, 2)
                announce("ACK", last + 1)
                i += 1
        """)
        try:
            for _ in range(wait_acks):
                child.wait_for("ACK")
        finally:
            child.kill()
        acks = [int(line.split()[1]) for line in child.lines if line.startswith("ACK")]
        m = LogManager(data, LogConfig(segment_bytes=8 << 20))
        log = m.get("orders", 0)
        assert log.log_end_offset >= acks[-1] >= acked_end
        assert log.log_end_offset % PER_BATCH == 0
        records = list(iter_records(read_all(log)))
        assert [r.offset for r in records] == list(range(log.log_end_offset))
        assert all(r.value[:40] == expected_value(r.offset) for r in records)
        acked_end = log.log_end_offset
        m.shutdown()
        os.unlink(os.path.join(data, ".kafka_cleanshutdown"))  # next child must not trust a clean state
