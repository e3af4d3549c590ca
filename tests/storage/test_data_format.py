"""A data directory says which record format it holds; 0.1 data is refused with what to do."""
from __future__ import annotations

import os

import msgpack
import pytest

from minibroker.records import encode_batch, stamp
from minibroker.storage.data_format import FORMAT, FORMAT_FILE, DataDirFormatError, ensure_record_format, read_marker


def old_batch() -> bytes:
    """A batch as minibroker 0.1 wrote it: Kafka's header, msgpack records."""
    payload = msgpack.packb([[0, 0, None, b"x", []], [1, 0, b"k", b"y", []]], use_bin_type=True)
    return stamp(encode_batch(payload, record_count=2, first_timestamp=1, max_timestamp=1), 0, 0)


def write_old_dir(root: str) -> str:
    part = os.path.join(root, "t-0")
    os.makedirs(part)
    with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
        f.write(old_batch())
    open(os.path.join(part, "00000000000000000000.index"), "wb").close()
    return part


def test_a_new_data_dir_is_marked_with_the_kafka_format(tmp_path):
    d = str(tmp_path / "data")
    ensure_record_format(d)
    assert read_marker(d) == FORMAT
    ensure_record_format(d)                      # marked: used as is


def test_an_unmarked_dir_with_only_empty_partitions_is_marked(tmp_path):
    os.makedirs(tmp_path / "t-0")
    open(tmp_path / "t-0" / "00000000000000000000.log", "wb").close()
    ensure_record_format(str(tmp_path))
    assert read_marker(str(tmp_path)) == FORMAT


def test_an_unmarked_dir_holding_batches_is_refused_with_what_to_do(tmp_path):
    write_old_dir(str(tmp_path))
    with pytest.raises(DataDirFormatError) as ei:
        ensure_record_format(str(tmp_path))
    msg = str(ei.value)
    assert f"data dir {tmp_path} holds minibroker 0.1 batches" in msg
    assert "delete the directory" in msg and f"minibroker storage migrate --log-dir {tmp_path}" in msg
    assert read_marker(str(tmp_path)) is None


def test_a_dir_marked_with_another_format_is_refused(tmp_path):
    (tmp_path / FORMAT_FILE).write_text("msgpack-v1\n")
    with pytest.raises(DataDirFormatError, match="'msgpack-v1'"):
        ensure_record_format(str(tmp_path))


def write_old_partition(root, name, batches: list[bytes]) -> None:
    part = os.path.join(root, name)
    os.makedirs(part)
    with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
        for b in batches:
            f.write(b)


def old_style(rows, *, base, epoch, first_ts, attributes=0, max_ts=None):
    payload = msgpack.packb([[i, d, k, v, [list(h) for h in hs]] for i, (d, k, v, hs) in enumerate(rows)],
                            use_bin_type=True)
    mts = max_ts if max_ts is not None else first_ts + max(d for d, *_ in rows)
    return stamp(encode_batch(payload, record_count=len(rows), first_timestamp=first_ts, max_timestamp=mts,
                              attributes=attributes), base, epoch)


def test_migrate_converts_0_1_data_keeping_offsets_epochs_timestamps_and_the_log_reads_back(tmp_path):
    from minibroker.records import iter_records, scan_headers
    from minibroker.storage import LogManager
    from minibroker.storage.migrate import migrate_data_dir
    root = str(tmp_path)
    a = old_style([(0, b"k", b"v0", [("h", b"1")]), (5, None, None, [])], base=0, epoch=0, first_ts=1000)
    b = old_style([(0, None, b"v2", [])], base=2, epoch=3, first_ts=2000)
    c = old_style([(0, None, b"late", [])], base=3, epoch=3, first_ts=2500, attributes=8, max_ts=9999)
    write_old_partition(root, "t-0", [a, b, c, b"\x00" * 30])        # with a torn tail
    with pytest.raises(DataDirFormatError):
        ensure_record_format(root)
    report = migrate_data_dir(root)
    assert (report.segments, report.batches, report.records, report.cut) == (1, 3, 4, ["t-0/00000000000000000000.log"])
    ensure_record_format(root)                                          # now marked: accepted
    m = LogManager(root)
    try:
        data = m.get("t", 0).read(0, 1 << 20)
        assert [(p.base_offset, p.last_offset, p.leader_epoch) for p in scan_headers(data, verify_crc=True)] == [
            (0, 1, 0), (2, 2, 3), (3, 3, 3)]
        got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(data, with_headers=True)]
        assert got == [(0, 1000, b"k", b"v0", (("h", b"1"),)), (1, 1005, None, None, ()),
                       (2, 2000, None, b"v2", ()), (3, 9999, None, b"late", ())]
        assert m.get("t", 0).log_end_offset == 4
    finally:
        m.shutdown()
    again = migrate_data_dir(root)                                      # running it again is harmless
    assert again.already_marked and again.batches == 0 and "nothing to do" in again.summary()
