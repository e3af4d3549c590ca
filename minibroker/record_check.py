"""The leader's check that a batch's records agree with its header.

Owns one decision: whether the records section of one Kafka v2 batch
(already framed and CRC-checked by minibroker.records) really holds what
the header claims. Must not know about logs, partitions or the network.

The checks are Kafka's LogValidator checks for a client batch, made on the
bytes as they came (nothing is rewritten):

* the records section parses as exactly `record_count` varint records,
  each of its declared length, with no byte left over;
* their offset deltas are 0, 1, ..., record_count - 1 in order (so the last
  is `last_offset_delta`, which the header check already tied to the count);
* for CreateTime batches, the largest record timestamp is the header's
  `max_timestamp` (Kafka overwrites a wrong one; minibroker stores batches
  as they came, so it refuses one instead);
* when the leader gives a timestamp window (KIP-937's
  `message.timestamp.before.max.ms` / `after.max.ms` around its clock, for a
  CreateTime topic), every record's timestamp lies in it: else
  INVALID_TIMESTAMP, naming each record outside as Kafka's RecordErrors do.

A compressed batch is decompressed for the check, with the output bounded
(`decompressed_limit`, for all the batches of one produce payload together,
so that a payload of many small "decompression bombs" costs no more than
one), and stored compressed as it came.

The per-record work is C: `minibroker._recordscan.scan` walks the varints
without making any object (about 5 ns a record). Where that extension was
not built (no C compiler at install time), aiokafka's Cython
`DefaultRecordBatch` walks them instead, driven by `list()`, `map()` and
`operator`, so still no Python bytecode per record, but an object per
record (about 0.25-0.4 us a record). Errors are KafkaError INVALID_RECORD
(Kafka's InvalidRecordException) or CORRUPT_MESSAGE for compressed data
that cannot be read.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any
from operator import attrgetter, eq

from aiokafka.errors import CorruptRecordException  # type: ignore[import-untyped]
from aiokafka.record._crecords import DefaultRecordBatch  # type: ignore[import-untyped]

from minibroker import codec
from minibroker.errors import ErrorCode, KafkaError

_scan: Callable[[memoryview, int, int], tuple[int, int]] | None
try:
    from minibroker._recordscan import scan as _scan
except ImportError:                        # built without a C compiler: see _scan_with_aiokafka
    _scan = None

HEADER_SIZE = 61
ATTRIBUTES_POS = 21
DECOMPRESSED_SIZE_FACTOR = 16          # a compressed batch may expand to this many times max.message.bytes
DECOMPRESSED_SIZE_CEILING = 256 << 20  # ... but never beyond this
LOG_APPEND_TIME = 0x08                 # attributes bit 3: the batch's timestamps are its max_timestamp
NO_TIMESTAMP = -1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INVALID_TIMESTAMP_MESSAGE = "One or more records have been rejected due to invalid timestamp"
_offset = attrgetter("offset")
_timestamp = attrgetter("timestamp")


def timestamp_window(now_ms: int, before_max_ms: int, after_max_ms: int) -> tuple[int, int] | None:
    """The record timestamps a CreateTime topic accepts at `now_ms` (KIP-937: [now - before.max.ms,
    now + after.max.ms], each end clamped to Kafka's long), or None when both configs are unbounded."""
    if before_max_ms >= LONG_MAX and after_max_ms >= LONG_MAX:
        return None
    return max(LONG_MIN, now_ms - before_max_ms), min(LONG_MAX, now_ms + after_max_ms)


def decompressed_limit(max_message_bytes: int | None) -> int:
    """How many bytes a compressed batch's records may expand to."""
    if max_message_bytes is None:
        return DECOMPRESSED_SIZE_CEILING
    return max(max_message_bytes, min(DECOMPRESSED_SIZE_FACTOR * max_message_bytes, DECOMPRESSED_SIZE_CEILING))


def _invalid(where: str, msg: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, f"{where}: {msg}")


def check_records(batch: memoryview, attributes: int, record_count: int, first_timestamp: int, max_timestamp: int,
                  max_message_bytes: int | None, where: str, budget: int | None = None,
                  window: tuple[int, int] | None = None) -> int:
    """Raise unless the records of `batch` (one whole batch, header included,
    framing and CRC already checked) match its header; `where` names the
    batch in the error message. A compressed batch may expand to at most
    `decompressed_limit(max_message_bytes)` bytes, and to at most `budget`
    when given (what is left for the other batches of the same payload).
    With a `window` (`timestamp_window`), a record timestamped outside it
    raises INVALID_TIMESTAMP with a record error for each such record.
    Returns how many bytes it decompressed (0 for an uncompressed batch)."""
    compression = attributes & codec.CODEC_MASK
    if compression == codec.NONE:
        section = batch[HEADER_SIZE:]
    else:
        limit = decompressed_limit(max_message_bytes)
        if budget is not None:
            limit = min(limit, budget)
        try:
            section = memoryview(codec.decompress_bounded(compression, batch[HEADER_SIZE:], limit))
        except codec.DecompressedTooLarge as exc:
            raise _invalid(where, f"{codec.CODEC_NAMES[compression]} records expand beyond "
                                  f"{limit} bytes ({exc})") from None
        except codec.BadCompressedData as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{where}: {exc}") from None
    if _scan is not None:
        try:
            real_max, real_min = _scan(section, record_count, first_timestamp)
        except ValueError as exc:
            raise _invalid(where, f"records do not match the header ({exc})") from None
    else:
        real_max, real_min = _scan_with_aiokafka(batch, section, compression, record_count, where)
    if attributes & LOG_APPEND_TIME:                # every record of such a batch reads as its max timestamp
        real_max = max_timestamp
        real_min = max_timestamp if max_timestamp != NO_TIMESTAMP else LONG_MAX
    elif real_max != max_timestamp:
        raise _invalid(where, f"max timestamp {max_timestamp} is not the records' largest timestamp {real_max}")
    if window is not None and (real_min < window[0] or real_max > window[1]):
        raise _timestamp_error(batch, section, compression, attributes, record_count, max_timestamp, window)
    return 0 if compression == codec.NONE else len(section)


def _timestamp_error(batch: memoryview, section: memoryview, compression: int, attributes: int,
                     record_count: int, max_timestamp: int, window: tuple[int, int]) -> KafkaError:
    """Kafka's LogValidator answer for records outside the window (a cold path: the batch is refused): one
    record error per such record, by its index in the batch (`batch_index`; a client batch's offsets are
    its indexes)."""
    lo, hi = window
    if attributes & LOG_APPEND_TIME:
        stamps = [max_timestamp] * record_count
    else:
        stamps = [NO_TIMESTAMP if t is None else t for t in map(_timestamp, _records(batch, section, compression))]
    errors = tuple((i, f"Timestamp {t} of message with offset {i} is out of range. "
                       f"The timestamp should be within [{lo}, {hi}]")
                   for i, t in enumerate(stamps) if t != NO_TIMESTAMP and not lo <= t <= hi)
    return KafkaError(ErrorCode.INVALID_TIMESTAMP, INVALID_TIMESTAMP_MESSAGE, record_errors=errors)


def _records(batch: memoryview, section: memoryview, compression: int) -> list[Any]:
    """aiokafka's records of one checked batch (compressed: from its decompressed `section`)."""
    if compression != codec.NONE:
        plain = bytearray(batch[:HEADER_SIZE])
        plain[ATTRIBUTES_POS + 1] &= ~codec.CODEC_MASK & 0xFF
        plain += section
        batch = memoryview(plain)
    return list(DefaultRecordBatch(batch))


def _scan_with_aiokafka(batch: memoryview, section: memoryview, compression: int, record_count: int,
                        where: str) -> tuple[int, int]:
    """The fallback of `_recordscan.scan` where the C extension was not built:
    aiokafka's reader makes an object per record, driven from C (`list`,
    `map`, `operator`), so no Python bytecode runs per record. Returns
    (the largest timestamp, the smallest but -1) as `scan` does."""
    try:
        recs = _records(batch, section, compression)
    except (CorruptRecordException, UnicodeDecodeError) as exc:
        raise _invalid(where, f"records do not match the header's count of {record_count} ({exc})") from None
    if not all(map(eq, map(_offset, recs), range(record_count))):
        raise _invalid(where, f"record offset deltas are not 0..{record_count - 1} in order")
    stamps = [NO_TIMESTAMP if t is None else t for t in map(_timestamp, recs)]   # (None: aiokafka's -1)
    real = [t for t in stamps if t != NO_TIMESTAMP]
    return max(stamps, default=NO_TIMESTAMP), min(real, default=LONG_MAX)
