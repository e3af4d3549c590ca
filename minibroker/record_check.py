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
  as they came, so it refuses one instead).

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
from operator import attrgetter, eq

from aiokafka.errors import CorruptRecordException  # type: ignore[import-untyped]
from aiokafka.record._crecords import DefaultRecordBatch  # type: ignore[import-untyped]

from minibroker import codec
from minibroker.errors import ErrorCode, KafkaError

_scan: Callable[[memoryview, int, int], int] | None
try:
    from minibroker._recordscan import scan as _scan
except ImportError:                        # built without a C compiler: see _scan_with_aiokafka
    _scan = None

HEADER_SIZE = 61
ATTRIBUTES_POS = 21
DECOMPRESSED_SIZE_FACTOR = 16          # a compressed batch may expand to this many times max.message.bytes
DECOMPRESSED_SIZE_CEILING = 256 << 20  # ... but never beyond this
_offset = attrgetter("offset")
_timestamp = attrgetter("timestamp")


def decompressed_limit(max_message_bytes: int | None) -> int:
    """How many bytes a compressed batch's records may expand to."""
    if max_message_bytes is None:
        return DECOMPRESSED_SIZE_CEILING
    return max(max_message_bytes, min(DECOMPRESSED_SIZE_FACTOR * max_message_bytes, DECOMPRESSED_SIZE_CEILING))


def _invalid(where: str, msg: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, f"{where}: {msg}")


def check_records(batch: memoryview, attributes: int, record_count: int, first_timestamp: int, max_timestamp: int,
                  max_message_bytes: int | None, where: str, budget: int | None = None) -> int:
    """Raise unless the records of `batch` (one whole batch, header included,
    framing and CRC already checked) match its header; `where` names the
    batch in the error message. A compressed batch may expand to at most
    `decompressed_limit(max_message_bytes)` bytes, and to at most `budget`
    when given (what is left for the other batches of the same payload).
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
            real_max = _scan(section, record_count, first_timestamp)
        except ValueError as exc:
            raise _invalid(where, f"records do not match the header ({exc})") from None
    else:
        real_max = _scan_with_aiokafka(batch, section, compression, record_count, where)
    if not attributes & 0x08 and real_max != max_timestamp:
        raise _invalid(where, f"max timestamp {max_timestamp} is not the records' largest timestamp {real_max}")
    return 0 if compression == codec.NONE else len(section)


def _scan_with_aiokafka(batch: memoryview, section: memoryview, compression: int, record_count: int,
                        where: str) -> int:
    """The fallback of `_recordscan.scan` where the C extension was not built:
    aiokafka's reader makes an object per record, driven from C (`list`,
    `map`, `operator`), so no Python bytecode runs per record."""
    if compression != codec.NONE:
        plain = bytearray(batch[:HEADER_SIZE])
        plain[ATTRIBUTES_POS + 1] &= ~codec.CODEC_MASK & 0xFF
        plain += section
        batch = memoryview(plain)
    try:
        recs = list(DefaultRecordBatch(batch))
    except (CorruptRecordException, UnicodeDecodeError) as exc:
        raise _invalid(where, f"records do not match the header's count of {record_count} ({exc})") from None
    if not all(map(eq, map(_offset, recs), range(record_count))):
        raise _invalid(where, f"record offset deltas are not 0..{record_count - 1} in order")
    try:
        return int(max(map(_timestamp, recs)))
    except TypeError:                      # a record with no timestamp (-1)
        return max((t for t in map(_timestamp, recs) if t is not None), default=-1)
