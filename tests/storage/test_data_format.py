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
    assert "Delete the directory" in msg
    assert read_marker(str(tmp_path)) is None


def test_a_dir_marked_with_another_format_is_refused(tmp_path):
    (tmp_path / FORMAT_FILE).write_text("msgpack-v1\n")
    with pytest.raises(DataDirFormatError, match="'msgpack-v1'"):
        ensure_record_format(str(tmp_path))
