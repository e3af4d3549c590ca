from __future__ import annotations

from minibroker.records import iter_records
from minibroker.storage import LogConfig, LogManager, PartitionLog

from .helpers import batch


def test_leader_append_assigns_consecutive_offsets_and_reads_back(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"))
    log.assign_leader_epoch(0)
    assert log.append_as_leader(batch(3), 0) == (0, 2)
    assert log.append_as_leader(batch(2, tag=1), 0) == (3, 4)
    assert log.log_end_offset == 5
    recs = list(iter_records(log.read(0, 1 << 20)))
    assert [r.offset for r in recs] == [0, 1, 2, 3, 4]
    assert recs[3].value.startswith(b"1:0:")


def test_clean_shutdown_reopens_with_same_offsets(tmp_path):
    m = LogManager(str(tmp_path), LogConfig(segment_bytes=1024))
    log = m.get_or_create("orders", 0)
    for i in range(30):
        log.append_as_leader(batch(4, tag=i), 0)
    before = log.read(0, 1 << 20)
    m.shutdown({("orders", 0): 120})
    m2 = LogManager(str(tmp_path), LogConfig(segment_bytes=1024))
    log2 = m2.get("orders", 0)
    assert log2.load_info.batches_scanned == 0
    assert log2.log_end_offset == 120
    assert m2.load_high_watermark("orders", 0) == 120
    out = b"".join(log2.read(o, 1 << 20) for o in log2.segment_base_offsets)
    assert out == before or [r.offset for r in iter_records(out)] == list(range(120))
