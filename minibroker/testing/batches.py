"""Hand-made Kafka v2 batches for tests and probes: records encoded field by
field, so a test can write a batch whose header and records disagree.

Owns nothing stateful; the real encoders are minibroker.records (aiokafka's
builder). Plain Python: never on a hot path.
"""
from __future__ import annotations

from collections.abc import Sequence

from minibroker.records import encode_batch


def varint(n: int) -> bytes:
    """Kafka's zig-zag varint (varlong) encoding of `n`."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _nullable(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def raw_record(offset_delta: int, timestamp_delta: int = 0, key: bytes | None = None, value: bytes | None = b"",
               headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """One Kafka record (DefaultRecord), length prefix included."""
    body = (b"\x00" + varint(timestamp_delta) + varint(offset_delta) + _nullable(key) + _nullable(value)
            + varint(len(headers)) + b"".join(_nullable(k.encode()) + _nullable(v) for k, v in headers))
    return varint(len(body)) + body


def batch_of(records: Sequence[bytes], *, record_count: int | None = None, first_timestamp: int = 0,
             max_timestamp: int | None = None, **kw: int) -> bytes:
    """A batch framing `records` (raw_record outputs) with a header that says
    `record_count` (default: how many there are) and `max_timestamp`
    (default: `first_timestamp`); other header fields as `encode_batch`."""
    n = len(records) if record_count is None else record_count
    return encode_batch(b"".join(records), record_count=n, first_timestamp=first_timestamp,
                        max_timestamp=first_timestamp if max_timestamp is None else max_timestamp, **kw)
