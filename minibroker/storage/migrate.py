"""Offline conversion of a minibroker 0.1 data directory to Kafka's record format.

Owns the rewrite of every segment file of a log dir whose batches carry
msgpack records (minibroker 0.1) into batches carrying Kafka's varint
records, keeping every header field (base offset, leader epoch, offset
deltas, timestamps, producer fields), so offsets, epochs and the
checkpoints stay valid. Must not know about brokers or the network; runs
only while the broker that owns the directory is stopped (`minibroker
storage migrate --log-dir DIR`).

Per segment: batches are read up to the first one that is torn or fails
its CRC (what recovery would cut anyway), re-encoded, written to a
`.migrating` file, fsynced and renamed over the segment. Then the
recovery-point checkpoint and the clean-shutdown marker are removed, so the
next start recovers every segment and rebuilds its indexes (whose byte
positions changed), and the `record-format` marker is written last: a
migration cut short leaves the directory unmarked and is simply run again
(segments already converted are recognised and kept).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import msgpack  # type: ignore[import-untyped]

from minibroker.records import (
    HEADER_SIZE, TIMESTAMP_TYPE_LOG_APPEND, batch_crc_ok, check_header, encode_batch, header_list, new_builder,
    parse_header,
)
from minibroker.storage import fsutil
from minibroker.storage.checkpoint import RECOVERY_POINT_FILE
from minibroker.storage.data_format import FORMAT, FORMAT_FILE, read_marker, write_marker
from minibroker.storage.manager import CLEAN_SHUTDOWN_FILE
_TMP_SUFFIX = ".migrating"


@dataclass
class MigrationReport:
    data_dir: str
    segments: int = 0
    batches: int = 0
    records: int = 0
    already_kafka: int = 0               # batches that were already in Kafka's format
    cut: list[str] = field(default_factory=list)   # segments whose torn tail was left out
    already_marked: bool = False         # the directory was marked kafka-v2: nothing to do

    def summary(self) -> str:
        if self.already_marked:
            return f"{self.data_dir}: already in Kafka's record format ({FORMAT_FILE}: {FORMAT}); nothing to do"
        s = (f"{self.data_dir}: {self.segments} segment(s), {self.batches} batch(es), {self.records} record(s) "
             f"converted to Kafka's record format")
        if self.already_kafka:
            s += f"; {self.already_kafka} batch(es) were already in it"
        if self.cut:
            s += f"; torn tails left out of {', '.join(self.cut)}"
        return s


class MigrationError(Exception):
    pass


def _kafka_records(old: memoryview, where: str) -> bytes:
    """A 0.1 records section (msgpack [[delta, ts_delta, key, value, [[k, v]...]]...]) -> Kafka records."""
    try:
        rows = msgpack.unpackb(old, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MigrationError(f"{where}: records are neither Kafka's nor msgpack ({exc})") from None
    b = new_builder()
    # The builder stores each timestamp as a delta to the first record's;
    # 0.1's first record always had delta 0, so the deltas come out the same.
    for delta, ts_delta, key, value, headers in rows:
        b.append(delta, ts_delta, key, value, header_list(headers))
    return bytes(b.build())[HEADER_SIZE:]


def _is_kafka(batch: memoryview, count: int) -> bool:
    from minibroker.record_check import check_records
    h = parse_header(batch)
    try:
        check_records(batch, h.attributes, count, h.first_timestamp, h.max_timestamp, None, "")
    except Exception:
        return False
    return True


def migrate_segment(path: str, report: MigrationReport) -> None:
    with open(path, "rb") as f:
        data = memoryview(f.read())
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            break
        h = parse_header(data, pos)
        if check_header(h) or pos + h.size > len(data) or not batch_crc_ok(data, pos, h.size):
            break
        batch = data[pos:pos + h.size]
        if _is_kafka(batch, h.record_count):
            out.append(bytes(batch))
            report.already_kafka += 1
        else:
            where = f"{path} byte {pos}"
            records = _kafka_records(batch[HEADER_SIZE:], where)
            # The header is kept as it was: first timestamp, max timestamp (the
            # append time for LogAppendTime batches), offsets and producer fields.
            out.append(encode_batch(
                records, record_count=h.record_count, first_timestamp=h.first_timestamp,
                max_timestamp=h.max_timestamp, base_offset=h.base_offset, leader_epoch=h.leader_epoch,
                attributes=h.attributes & TIMESTAMP_TYPE_LOG_APPEND, last_offset_delta=h.last_offset_delta,
                producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence))
            report.batches += 1
            report.records += h.record_count
        pos += h.size
    if pos < len(data):
        report.cut.append(os.path.relpath(path, report.data_dir))
    tmp = path + _TMP_SUFFIX
    with open(tmp, "wb") as f:
        for b in out:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    report.segments += 1


def migrate_data_dir(data_dir: str) -> MigrationReport:
    """Convert every segment of `data_dir` (blocking; the broker must be stopped)."""
    data_dir = os.path.abspath(data_dir)
    if not os.path.isdir(data_dir):
        raise MigrationError(f"{data_dir} is not a directory")
    marker = read_marker(data_dir)
    report = MigrationReport(data_dir)
    if marker == FORMAT:
        report.already_marked = True
        return report
    if marker is not None:
        raise MigrationError(f"{data_dir}: {FORMAT_FILE} says {marker!r}; only minibroker 0.1 data can be migrated")
    for name in sorted(os.listdir(data_dir)):
        part = os.path.join(data_dir, name)
        if not os.path.isdir(part):
            continue
        for seg in sorted(os.listdir(part)):
            if seg.endswith(_TMP_SUFFIX):
                os.unlink(os.path.join(part, seg))
            elif seg.endswith(".log"):
                migrate_segment(os.path.join(part, seg), report)
        fsutil.fsync_dir(part)
    for name in (RECOVERY_POINT_FILE, CLEAN_SHUTDOWN_FILE):
        try:
            os.unlink(os.path.join(data_dir, name))
        except FileNotFoundError:
            pass
    fsutil.fsync_dir(data_dir)
    write_marker(data_dir)
    return report
