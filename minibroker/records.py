"""The record batch: Kafka's RecordBatch v2, header and varint records.

Owns the byte layout of a batch, its validation, and the leader's stamping
of offsets and epochs. Must not know about partitions, files or sockets.

One stored format: a batch produced by minibroker's own client or by any
Kafka client is stored, replicated and served as the same bytes. Two sides
use this module:

* the **client** encodes records into a batch (`build_batch`, or the
  producer's accumulator through `new_builder`: minibroker._speedups'
  RecordsWriter for uncompressed batches, aiokafka's Cython builder for
  compressed ones) and decodes batches it fetched (`iter_records`), C per
  record either way;
* the **broker** never decodes records into objects. It checks framing and
  CRCs (`validate_batches`), checks that the records section holds what the
  header claims (minibroker.record_check, C per record, compressed batches
  decompressed with a bound), writes base offsets and leader epochs into
  the headers (`stamp`), and walks headers (`scan_headers`) for follower
  appends, reads and recovery. Broker paths do a constant amount of
  *Python* work per batch, none per record.

Header layout (big-endian, 61 bytes, Kafka's v2 batch header)::

    off  size  field               notes
      0   i64  base_offset         outside the CRC: stamped by the leader
      8   i32  batch_length        bytes after this field (size - 12)
     12   i32  leader_epoch        outside the CRC: stamped by the leader
     16   i8   magic               MAGIC (2)
     17   u32  crc                 CRC32C of bytes [21, size)
     21   i16  attributes          bits 0-2: compression (0 none, 1 gzip,
                                   2 snappy, 3 lz4, 4 zstd); bit 3: timestamp
                                   type (1 = LogAppendTime); bit 4
                                   (transactional), bit 5 (control) and the
                                   rest must be 0
     23   i32  last_offset_delta   record_count - 1 for producer batches
     27   i64  first_timestamp     ms; timestamps in records are deltas to it
     35   i64  max_timestamp       ms
     43   i64  producer_id         -1 when not idempotent
     51   i16  producer_epoch      -1 when not idempotent
     53   i32  base_sequence       -1 when not idempotent
     57   i32  record_count
     61        records             record_count Kafka records (compressed
                                   as one block when bits 0-2 are set)

Because base_offset and leader_epoch sit before the CRC'd region, stamping
them never recomputes a CRC (as in Kafka, where baseOffset and
partitionLeaderEpoch are outside the CRC). The price, as in Kafka, is that
corruption of those two fields is not caught by the CRC; the log's recovery
checks offset contiguity and epoch monotonicity instead.

Each record is Kafka's (DefaultRecord)::

    length varint, attributes i8 (0), timestamp_delta varlong,
    offset_delta varint, key_length varint (-1: null), key,
    value_length varint (-1: null), value,
    header_count varint, then per header: key_length varint, key (UTF-8),
    value_length varint (-1: null), value

Errors are `KafkaError`s: CORRUPT_MESSAGE (bad framing, magic, attributes,
CRC, unreadable compressed data, or offsets inconsistent with the header),
INVALID_RECORD (records that do not match the header: count, offset deltas,
max timestamp, a batch that decompresses beyond its bound; transactional or
control batches), MESSAGE_TOO_LARGE (a batch above max.message.bytes),
INVALID_REQUEST (an empty record set).
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple
from collections.abc import Iterable, Iterator, Sequence

from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder  # type: ignore[import-untyped]
from crc32c import crc32c

from minibroker import clock
from minibroker import codec
from minibroker.errors import ErrorCode, KafkaError
from minibroker.record_check import check_records, decompressed_limit

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

# Offsets of individual fields inside the header.
BASE_OFFSET_POS = 0
LENGTH_POS = 8
EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
FIRST_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
RECORD_COUNT_POS = 57
CRC_START = ATTRIBUTES_POS
LOG_OVERHEAD = 12  # base_offset + batch_length: what a reader needs to frame a batch
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
KNOWN_ATTRIBUTES = codec.CODEC_MASK | TIMESTAMP_TYPE_LOG_APPEND
MAX_CODEC = codec.ZSTD
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_FRAME = struct.Struct(">qii")  # base_offset, batch_length, leader_epoch
_PREFIX = struct.Struct(">qiibIhi")  # up to and including last_offset_delta
_PREFIX_SIZE = _PREFIX.size  # 27
_MAX_TS = struct.Struct(">q")


class BatchHeader(NamedTuple):
    """Every field of one batch header, plus where the batch sits in its buffer."""
    position: int
    size: int
    base_offset: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class BatchPosition(NamedTuple):
    """What `scan_headers` yields: enough to frame, index and route a batch."""
    position: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    size: int


class BatchesInfo(NamedTuple):
    """Summary of a validated produce payload (one or more batches)."""
    batch_count: int
    record_count: int
    offset_count: int  # sum of (last_offset_delta + 1): offsets the payload will take
    first_timestamp: int
    max_timestamp: int
    size: int
    batches: tuple[BatchHeader, ...]


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class RecordWithHeaders(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _corrupt(msg: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, msg)


# ---------------------------------------------------------------- client side

try:
    from minibroker._speedups import RecordsWriter as _RecordsWriter
except ImportError:  # pragma: no cover - the C extension was not built
    _RecordsWriter = None


if _RecordsWriter is not None:
    class RecordsBuilder(_RecordsWriter):  # type: ignore[misc, valid-type]
        """An uncompressed batch: minibroker._speedups.RecordsWriter encodes each
        record in C (no object per record) after room for the header; `build()`
        writes the v2 header and its CRC in front and copies the batch out once.
        Same bytes as aiokafka's builder."""

        __slots__ = ("producer_id", "producer_epoch", "base_sequence")

        def __init__(self, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                     base_sequence: int = -1) -> None:
            self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence

        def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
            self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence

        def build(self) -> bytes:
            return self.finish(self.producer_id, self.producer_epoch, self.base_sequence, crc32c)  # type: ignore[no-any-return]


def new_builder(compression: int = codec.NONE, producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                base_sequence: int = -1) -> Any:
    """An empty Kafka v2 batch builder: `append(offset_delta, timestamp_ms, key,
    value, headers)` per record, where headers is a list of `(str, bytes | None)`
    tuples, then `build()` once. Uncompressed, minibroker's own (`RecordsBuilder`,
    C per record); compressed, aiokafka's (in C, with the codecs). Size limits are
    the caller's."""
    if compression == codec.NONE and _RecordsWriter is not None:
        return RecordsBuilder(producer_id, producer_epoch, base_sequence)
    return DefaultRecordBatchBuilder(MAGIC, compression, 0, producer_id, producer_epoch, base_sequence, 1 << 62)


def build_batch(
    records: Iterable[Any],
    *,
    timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = codec.NONE,
) -> bytes:
    """Encode records into one batch (client side): base offset 0, epoch -1.

    Each item of `records` is either a value (`bytes` or None), or a tuple
    `(key, value)`, `(key, value, timestamp_ms)` or
    `(key, value, timestamp_ms, headers)` where headers is a sequence of
    `(str, bytes|None)` pairs. Records without a timestamp get `timestamp_ms`,
    or the current wall-clock time when that is None.
    """
    default_ts = clock.now_ms() if timestamp_ms is None else timestamp_ms
    b = new_builder(compression, producer_id, producer_epoch, base_sequence)
    n = 0
    for item in records:
        if item is None or isinstance(item, (bytes, bytearray, memoryview)):
            b.append(n, default_ts, None, None if item is None else bytes(item), [])
        else:
            k = len(item)
            if not 2 <= k <= 4:
                raise ValueError(f"a record is a value or (key, value[, timestamp_ms[, headers]]), got {k} fields")
            ts = default_ts if k < 3 or item[2] is None else item[2]
            b.append(n, ts, item[0], item[1], header_list(item[3]) if k == 4 else [])
        n += 1
    if not n:
        raise ValueError("a batch needs at least one record")
    return bytes(b.build())


def header_list(headers: Iterable[Sequence[Any]] | None) -> list[tuple[str, bytes | None]]:
    """Record headers as the builder takes them: a list of (str, bytes | None) tuples."""
    if not headers:
        return []
    out = []
    for h in headers:
        k, v = h
        if not isinstance(k, str) or not (v is None or isinstance(v, (bytes, bytearray, memoryview))):
            raise TypeError(f"a record header is (str, bytes | None), got {h!r:.60}")
        out.append((k, v if v is None or isinstance(v, bytes) else bytes(v)))
    return out


def encode_batch(
    payload: bytes,
    *,
    record_count: int,
    first_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Frame an already-encoded records section with a header and its CRC
    (tests and tools that need a batch whose header says what they choose)."""
    lod = record_count - 1 if last_offset_delta is None else last_offset_delta
    size = HEADER_SIZE + len(payload)
    buf = bytearray(size)
    HEADER.pack_into(buf, 0, base_offset, size - LOG_OVERHEAD, leader_epoch, MAGIC, 0,
                     attributes, lod, first_timestamp, max_timestamp, producer_id,
                     producer_epoch, base_sequence, record_count)
    buf[HEADER_SIZE:] = payload
    struct.pack_into(">I", buf, CRC_POS, crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)


def iter_records(buf: bytes | bytearray | memoryview, *, min_offset: int = 0,
                 with_headers: bool = False) -> Iterator[Record] | Iterator[RecordWithHeaders]:
    """Decode every record of one or more concatenated batches (client side).

    Yields `Record(offset, timestamp, key, value)` (or `RecordWithHeaders`)
    for records at or above `min_offset` (a fetch may return a batch that
    starts before the fetch offset). Verifies each batch's CRC, decompresses
    compressed batches and checks that the records match the header; raises
    KafkaError(CORRUPT_MESSAGE) otherwise.
    """
    mv = memoryview(buf)
    for h in iter_batch_headers(mv, verify_crc=True):
        if h.base_offset + h.last_offset_delta < min_offset:
            continue
        try:
            recs = list(DefaultRecordBatch(mv[h.position: h.position + h.size]))
        except Exception as exc:  # the codecs raise several unrelated types
            raise _corrupt(f"batch at offset {h.base_offset}: records do not decode ({exc})") from None
        if len(recs) != h.record_count:
            raise _corrupt(f"batch at offset {h.base_offset}: header says {h.record_count} records, "
                           f"payload holds {len(recs)}")
        start = 0
        if h.base_offset < min_offset:
            start = min_offset - h.base_offset
            if start >= len(recs) or recs[start].offset != min_offset:
                start = next((i for i, r in enumerate(recs) if r.offset >= min_offset), len(recs))
        if with_headers:
            for r in recs[start:] if start else recs:
                ts = r.timestamp
                hdrs = r.headers
                yield RecordWithHeaders(r.offset, -1 if ts is None else ts, r.key, r.value,
                                        tuple(hdrs) if hdrs else ())
        else:
            for r in recs[start:] if start else recs:
                ts = r.timestamp
                yield Record(r.offset, -1 if ts is None else ts, r.key, r.value)


try:
    from minibroker._recordscan import decode as _c_decode
except ImportError:                    # built without a C compiler: the aiokafka path below
    _c_decode = None

_PLAIN_BATCH = ~(TIMESTAMP_TYPE_LOG_APPEND) & 0xFFFF   # attribute bits the C decoder cannot take (codec, control)


def decode_into(out: list[Any], buf: bytes | bytearray | memoryview, topic: str, partition: int,
                record_type: type, *, min_offset: int = 0, stop_offset: int = -1) -> int | None:
    """The consumer's decoder: append `record_type(topic, partition, offset, timestamp, key, value,
    headers, leader_epoch, timestamp_type)` (a NamedTuple of those 9 fields) to `out` for every record
    of the concatenated batches in `buf` at or above `min_offset` and below `stop_offset` (when >= 0).
    Returns the offset after the last record appended, None if none. Verifies CRCs as `iter_records` does (KafkaError
    CORRUPT_MESSAGE); uncompressed batches are decoded in C without a Python call per record."""
    mv = memoryview(buf)
    last = None
    for h in iter_batch_headers(mv, verify_crc=True):
        if h.base_offset + h.last_offset_delta < min_offset:
            continue
        if 0 <= stop_offset <= h.base_offset:
            break
        append_time = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_LOG_APPEND else None
        if _c_decode is not None and not h.attributes & _PLAIN_BATCH:
            before = len(out)
            try:
                _c_decode(mv[h.position + HEADER_SIZE: h.position + h.size], h.record_count, h.base_offset,
                          h.first_timestamp, append_time, min_offset, stop_offset, record_type, topic,
                          partition, h.leader_epoch, out)
            except ValueError as exc:
                raise _corrupt(f"batch at offset {h.base_offset}: {exc}") from None
            if len(out) > before:
                last = out[-1].offset
            continue
        for r in iter_records(mv[h.position: h.position + h.size], min_offset=min_offset, with_headers=True):
            if 0 <= stop_offset <= r.offset:
                break
            out.append(record_type(topic, partition, r.offset, r.timestamp, r.key, r.value,
                                   r.headers, h.leader_epoch,                        # type: ignore[union-attr]
                                   0 if append_time is None else 1))
            last = r.offset
    return None if last is None else last + 1


def decode_rows(batch: bytes) -> list[tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]]:
    """(key, value, timestamp, headers) per record of one client batch (reports, tests)."""
    return [(r.key, r.value, r.timestamp, r.headers) for r in iter_records(batch, with_headers=True)
            if isinstance(r, RecordWithHeaders)]


# ---------------------------------------------------------------- broker side

def needs_recompression(buf: bytes | bytearray | memoryview, target: int) -> bool:
    """Whether a produce payload holds a batch whose codec is not `target` (from the headers alone)."""
    return any(h.attributes & codec.CODEC_MASK != target for h in iter_batch_headers(memoryview(buf)))


def recompress(buf: bytes | bytearray | memoryview, target: int, max_message_bytes: int | None) -> bytes:
    """A produce payload with each batch whose codec is not `target` rebuilt in it (the topic's
    compression.type, Kafka's LogValidator): the same offset deltas, timestamps, keys, values, headers
    and producer id, epoch and base sequence. Validates the payload first (`validate_batches`, whose
    errors it raises); the caller's append checks the new batches' sizes. Per-record work, so it runs
    off the event loop; only a topic or broker compression.type other than `producer` asks for it."""
    validate_batches(buf, max_message_bytes=max_message_bytes)
    mv = memoryview(buf)
    out: list[bytes | memoryview] = []
    for h in iter_batch_headers(mv):
        raw = mv[h.position: h.position + h.size]
        if h.attributes & codec.CODEC_MASK == target:
            out.append(raw)
            continue
        b = new_builder(target, h.producer_id, h.producer_epoch, h.base_sequence)
        for r in iter_records(raw, with_headers=True):
            b.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))   # type: ignore[union-attr]
        out.append(b.build())
    return b"".join(out)


_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


def with_log_append_time(buf: bytes | bytearray | memoryview, now_ms: int) -> bytes:
    """A produce payload for a log whose message.timestamp.type is LogAppendTime (Kafka's LogValidator,
    `setMaxTimestamp(LOG_APPEND_TIME, now)`): each batch marked LogAppendTime (attributes bit 3) with
    `now_ms` as its max timestamp, which every record of it then reads as, and its CRC computed again.
    A constant amount of work per batch, none per record. Checks each batch's framing and CRC first
    (KafkaError CORRUPT_MESSAGE), so that a new CRC never covers damaged bytes; the append validates
    the rest."""
    out = bytearray(buf)
    mv = memoryview(out)
    for h in list(iter_batch_headers(out, verify_crc=True)):
        pos = h.position
        _ATTRIBUTES.pack_into(out, pos + ATTRIBUTES_POS, h.attributes | TIMESTAMP_TYPE_LOG_APPEND)
        _MAX_TS.pack_into(out, pos + MAX_TIMESTAMP_POS, now_ms)
        _CRC.pack_into(out, pos + CRC_POS, crc32c(mv[pos + CRC_START: pos + h.size]))
    mv.release()
    return bytes(out)


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Unpack the header at `position` (no CRC check). Needs HEADER_SIZE bytes."""
    if len(buf) - position < HEADER_SIZE:
        raise _corrupt(f"batch at byte {position}: header needs {HEADER_SIZE} bytes, "
                       f"{len(buf) - position} remain")
    f = HEADER.unpack_from(buf, position)
    return BatchHeader(position, f[1] + LOG_OVERHEAD, f[0], f[2], f[3], f[4], f[5], f[6],
                       f[7], f[8], f[9], f[10], f[11], f[12])


def check_header(h: BatchHeader) -> str | None:
    """Structural problems of a parsed header, as a message, or None if sound."""
    if h.size < HEADER_SIZE:
        return f"batch length {h.size - LOG_OVERHEAD} is below the minimum {MIN_BATCH_LENGTH}"
    if h.magic != MAGIC:
        return f"magic {h.magic} is not {MAGIC}"
    if h.attributes & ~KNOWN_ATTRIBUTES:
        return f"attributes 0x{h.attributes & 0xffff:x} carry unsupported bits ({_unsupported(h.attributes)})"
    if h.attributes & codec.CODEC_MASK > MAX_CODEC:
        return f"compression codec {h.attributes & codec.CODEC_MASK} is unknown"
    if h.last_offset_delta < 0:
        return f"last offset delta {h.last_offset_delta} is negative"
    if h.record_count < 0 or h.record_count > h.last_offset_delta + 1:
        return f"record count {h.record_count} does not fit last offset delta {h.last_offset_delta}"
    if h.base_offset < 0:
        return f"base offset {h.base_offset} is negative"
    return None


def _unsupported(attributes: int) -> str:
    if attributes & CONTROL:
        return "control batches are written by brokers, not clients"
    if attributes & TRANSACTIONAL:
        return "transactions are not supported"
    return "bits 6-15 are unused"


def batch_crc_ok(buf: bytes | bytearray | memoryview, position: int, size: int) -> bool:
    stored = struct.unpack_from(">I", buf, position + CRC_POS)[0]
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[position + CRC_START: position + size]) == stored


def iter_batch_headers(buf: bytes | bytearray | memoryview, *, verify_crc: bool = False,
                       start: int = 0) -> Iterator[BatchHeader]:
    """Parse every header of concatenated batches; raise CORRUPT_MESSAGE on the
    first framing, structure or (with verify_crc) CRC problem."""
    pos = start
    end = len(buf)
    while pos < end:
        h = parse_header(buf, pos)
        problem = check_header(h)
        if problem:
            raise _corrupt(f"batch at byte {pos}: {problem}")
        if pos + h.size > end:
            raise _corrupt(f"batch at byte {pos} claims {h.size} bytes, only {end - pos} remain")
        if verify_crc and not batch_crc_ok(buf, pos, h.size):
            raise _corrupt(f"batch at byte {pos} (offset {h.base_offset}): CRC32C mismatch")
        yield h
        pos += h.size


try:
    from minibroker._speedups import batch_headers as _c_batch_headers
except ImportError:  # pragma: no cover - the C extension was not built
    _c_batch_headers = None


def batch_headers(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """`list(iter_batch_headers(buf, verify_crc=True))` in one pass (a follower's append): the same
    checks and the same CORRUPT_MESSAGE at the first bad batch, with a header's fields unpacked once
    (in C when minibroker._speedups is built; its refusal is explained by the Python twin)."""
    if _c_batch_headers is not None:
        out: list[BatchHeader] | None = _c_batch_headers(buf, BatchHeader, crc32c)
        if out is not None:
            return out
    return batch_headers_py(buf)


def batch_headers_py(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """`batch_headers` in Python: the C version's twin, and the one that raises."""
    out: list[BatchHeader] = []
    pos = 0
    end = len(buf)
    unpack = HEADER.unpack_from
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            parse_header(buf, pos)                  # raises, saying what is missing
        f = unpack(buf, pos)
        size = f[1] + LOG_OVERHEAD
        h = BatchHeader(pos, size, f[0], *f[2:])
        attrs, lod, count = f[5], f[6], f[12]
        if (size < HEADER_SIZE or f[3] != MAGIC or attrs & ~KNOWN_ATTRIBUTES or attrs & codec.CODEC_MASK > MAX_CODEC
                or lod < 0 or count < 0 or count > lod + 1 or f[0] < 0):
            raise _corrupt(f"batch at byte {pos}: {check_header(h)}")
        if pos + size > end:
            raise _corrupt(f"batch at byte {pos} claims {size} bytes, only {end - pos} remain")
        if crc32c(mv[pos + CRC_START: pos + size]) != f[4]:
            raise _corrupt(f"batch at byte {pos} (offset {f[0]}): CRC32C mismatch")
        out.append(h)
        pos += size
    return out


def validate_batches(buf: bytes | bytearray | memoryview, *,
                     max_message_bytes: int | None = None,
                     timestamp_window: tuple[int, int] | None = None) -> BatchesInfo:
    """Check a produce payload (one or more concatenated client batches).

    Checks framing, magic, attributes, that base offsets are 0 and record
    counts match last offset deltas (Kafka's LogValidator rules for client
    batches), sizes against `max_message_bytes`, every CRC, and that the
    records hold what each header claims (`record_check.check_records`, in
    C), and, given a `timestamp_window`, that every record's timestamp lies in
    it. Raises KafkaError: INVALID_REQUEST for an empty payload,
    MESSAGE_TOO_LARGE for an oversize batch, INVALID_RECORD for records that
    do not match their header, INVALID_TIMESTAMP for records outside the
    window, CORRUPT_MESSAGE for the rest.
    """
    if len(buf) == 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "produce payload holds no record batch")
    mv = memoryview(buf)
    end = len(mv)
    pos = 0
    headers: list[BatchHeader] = []
    records = offsets = 0
    first_ts = max_ts = -1
    unpack = HEADER.unpack_from
    limit = (1 << 62) if max_message_bytes is None else max_message_bytes
    budget = decompressed_limit(max_message_bytes)      # for all compressed batches of the payload together
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise _corrupt(f"batch at byte {pos}: header needs {HEADER_SIZE} bytes, {end - pos} remain")
        (base, length, epoch, magic, crc, attrs, lod, fts, mts, pid, pep, seq, count) = unpack(mv, pos)
        size = length + LOG_OVERHEAD
        h = BatchHeader(pos, size, base, epoch, magic, crc, attrs, lod, fts, mts, pid, pep, seq, count)
        if (size < HEADER_SIZE or magic != MAGIC or attrs & ~KNOWN_ATTRIBUTES or lod < 0
                or count < 0 or count > lod + 1 or base < 0 or attrs & codec.CODEC_MASK > MAX_CODEC):
            problem = check_header(h)
            if (attrs & (TRANSACTIONAL | CONTROL) and pos + size <= end
                    and crc32c(mv[pos + CRC_START: pos + size]) == crc):   # Kafka checks the CRC first
                raise KafkaError(ErrorCode.INVALID_RECORD, f"batch at byte {pos}: {problem}")
            raise _corrupt(f"batch at byte {pos}: {problem}")
        if size > limit:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"batch at byte {pos} is {size} bytes, above max.message.bytes={max_message_bytes}")
        if pos + size > end:
            raise _corrupt(f"batch at byte {pos} claims {size} bytes, only {end - pos} remain")
        if base != 0:
            raise _corrupt(f"batch at byte {pos}: a producer batch must have base offset 0, not {base}")
        if count < 1 or count != lod + 1:
            raise _corrupt(f"batch at byte {pos}: record count {count} is inconsistent "
                           f"with last offset delta {lod}")
        if crc32c(mv[pos + CRC_START: pos + size]) != crc:
            raise _corrupt(f"batch at byte {pos}: CRC32C mismatch")
        budget -= check_records(mv[pos: pos + size], attrs, count, fts, mts, max_message_bytes,
                                f"batch at byte {pos}", budget, timestamp_window)
        headers.append(h)
        records += count
        offsets += lod + 1
        if first_ts == -1:
            first_ts = fts
        if mts > max_ts:
            max_ts = mts
        pos += size
    return BatchesInfo(len(headers), records, offsets, first_ts, max_ts, end, tuple(headers))


def single_producer_batch(buf: bytes | bytearray | memoryview, max_message_bytes: int | None = None,
                          timestamp_window: tuple[int, int] | None = None) -> tuple[int, int, int] | None:
    """Fast path of `validate_batches` for the common produce payload: when
    `buf` is exactly one valid client batch, return (size, last_offset_delta,
    max_timestamp); otherwise None (call `validate_batches` for the verdict).
    A batch whose header is sound but whose records are not raises
    KafkaError(INVALID_RECORD, or INVALID_TIMESTAMP outside `timestamp_window`)
    here, as `validate_batches` would."""
    if len(buf) < HEADER_SIZE:
        return None
    (base, length, _epoch, magic, crc, attrs, lod, fts, mts, _pid, _pep, _seq,
     count) = HEADER.unpack_from(buf, 0)
    size = length + LOG_OVERHEAD
    if (size != len(buf) or base != 0 or magic != MAGIC or attrs & ~KNOWN_ATTRIBUTES
            or count < 1 or count != lod + 1
            or (max_message_bytes is not None and size > max_message_bytes)
            or attrs & codec.CODEC_MASK > MAX_CODEC
            or crc32c(memoryview(buf)[CRC_START:]) != crc):
        return None
    check_records(memoryview(buf), attrs, count, fts, mts, max_message_bytes, "batch at byte 0",
                  window=timestamp_window)
    return size, lod, mts


def stamp_into(buf: bytearray, headers: Iterable[BatchHeader], base_offset: int, leader_epoch: int) -> int:
    """Write consecutive base offsets and `leader_epoch` into the given batches
    of `buf`, in place. Returns the next offset after the last batch."""
    offset = base_offset
    pack = _FRAME.pack_into
    for h in headers:
        pack(buf, h.position, offset, h.size - LOG_OVERHEAD, leader_epoch)
        offset += h.last_offset_delta + 1
    return offset


def stamp_prefix(base_offset: int, size: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of a stamped batch: base offset, length, epoch."""
    return _FRAME.pack(base_offset, size - LOG_OVERHEAD, leader_epoch)


def stamp_chunks(buf: bytes | bytearray | memoryview, headers: Iterable[BatchHeader], base_offset: int,
                 leader_epoch: int) -> tuple[list[bytes | memoryview], int]:
    """Stamped batches as a list of buffers for writev, without copying the
    payloads: per batch, a new 16-byte prefix (base offset, length, epoch)
    and a view of the rest. Returns the buffers and the next offset."""
    mv = memoryview(buf)
    out: list[bytes | memoryview] = []
    offset = base_offset
    pack = _FRAME.pack
    for h in headers:
        out.append(pack(offset, h.size - LOG_OVERHEAD, leader_epoch))
        out.append(mv[h.position + _FRAME.size: h.position + h.size])
        offset += h.last_offset_delta + 1
    return out, offset


def stamp(buf: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """Return a copy of concatenated batches with base offsets assigned from
    `base_offset` onwards and every leader epoch set to `leader_epoch`.

    Both fields lie outside the CRC'd region, so no CRC is recomputed. Checks
    framing only; validate first (`validate_batches`)."""
    out = bytearray(buf)
    stamp_into(out, iter_batch_headers(out), base_offset, leader_epoch)
    return bytes(out)


def scan_headers(buf: bytes | bytearray | memoryview, *, verify_crc: bool = False) -> Iterator[BatchPosition]:
    """Yield `(position, base_offset, last_offset, leader_epoch, size)` per batch
    of concatenated batches; raise CORRUPT_MESSAGE at the first bad one."""
    for h in iter_batch_headers(buf, verify_crc=verify_crc):
        yield BatchPosition(h.position, h.base_offset, h.base_offset + h.last_offset_delta,
                            h.leader_epoch, h.size)


def is_compressed(buf: bytes | bytearray | memoryview) -> bool:
    """Whether the first batch of `buf` says its records are compressed (header bytes only)."""
    return len(buf) > ATTRIBUTES_POS + 1 and bool(buf[ATTRIBUTES_POS + 1] & codec.CODEC_MASK)


def batch_size_at(buf: bytes | bytearray | memoryview, position: int) -> int | None:
    """Total size of the batch starting at `position` from its length field,
    or None when fewer than LOG_OVERHEAD bytes remain."""
    if len(buf) - position < LOG_OVERHEAD:
        return None
    return _I32.unpack_from(buf, position + LENGTH_POS)[0] + LOG_OVERHEAD
