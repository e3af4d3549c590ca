"""A direct decoder for the one request a Kafka producer sends most, Produce v3-v9, and its response's encoder.

kafka-python's generated decoder (minibroker.kafka.codec) builds a data object per
topic and partition through generic field codecs: about a sixth of a leader's time
under a confluent-kafka producer went to it, and a frame above 64 KiB went to a
worker thread for it. This reads the same fields with `struct` in one pass and
hands the handler objects with the same attribute names. It decodes only the
plain, well-formed case: a null array, a tagged field, a count larger than the
bytes left, a string that is not UTF-8, a byte left over or missing, anything
else unusual gives None, and the caller decodes the frame with the generated
decoder, which then decides (errors included) exactly as before. The response
(`encode_produce_response`) is written the same way for the common answer (no
record errors); any other goes to the generated encoder.

Stateless. Must not know what the fields mean (minibroker.kafka.handlers).
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple

from minibroker.kafka.codec import RequestHeader

_HEADER = struct.Struct(">hhih")        # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")

FLEXIBLE_FROM = 9                       # Produce v9+: compact strings and arrays, tagged fields
VERSIONS = range(3, 10)                 # the versions served (codec.SERVED)


class ProducePartition:
    """A partition's records (a NamedTuple's `index` would hide tuple.index)."""

    __slots__ = ("index", "records")

    def __init__(self, index: int, records: bytes | None) -> None:
        self.index = index
        self.records = records

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducePartition) and (self.index, self.records) == (other.index, other.records)

    def __repr__(self) -> str:
        return f"ProducePartition({self.index}, {self.records!r})"


class ProduceTopic(NamedTuple):
    name: str
    partition_data: list[ProducePartition]


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]


class _Unusual(Exception):
    """Anything this decoder leaves to the generated one."""


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise _Unusual
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _no_tags(buf: bytes, pos: int) -> int:
    if pos >= len(buf) or buf[pos] != 0:
        raise _Unusual
    return pos + 1


def _take(buf: bytes, pos: int, n: int) -> tuple[bytes, int]:
    end = pos + n
    if n < 0 or end > len(buf):
        raise _Unusual
    return buf[pos:end], end


def decode_produce(version: int, frame: bytes) -> tuple[RequestHeader, ProduceRequest] | None:
    """Header and body of a Produce request frame (size prefix removed) of `version`, or None
    when the frame is anything but plain and well formed (see the module's docstring)."""
    if version not in VERSIONS:
        return None
    try:
        return _decode(version, frame)
    except (_Unusual, struct.error, UnicodeDecodeError):
        return None


def _decode(version: int, buf: bytes) -> tuple[RequestHeader, ProduceRequest]:
    flexible = version >= FLEXIBLE_FROM
    if len(buf) < _HEADER.size:
        raise _Unusual
    api_key, api_version, cid, n = _HEADER.unpack_from(buf, 0)
    if api_key != 0 or api_version != version:
        raise _Unusual
    pos = _HEADER.size
    client_id: str | None = None
    if n >= 0:
        raw, pos = _take(buf, pos, n)
        client_id = raw.decode()
    if flexible:
        pos = _no_tags(buf, pos)
    n, pos = _length(buf, pos, flexible, _I16)
    txn: str | None = None
    if n >= 0:
        raw, pos = _take(buf, pos, n)
        txn = raw.decode()
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += _ACKS_TIMEOUT.size
    topics: list[ProduceTopic] = []
    ntopics, pos = _count(buf, pos, flexible)
    for _ in range(ntopics):
        n, pos = _length(buf, pos, flexible, _I16)
        if n < 0:
            raise _Unusual                      # a null topic name
        raw, pos = _take(buf, pos, n)
        name = raw.decode()
        parts: list[ProducePartition] = []
        nparts, pos = _count(buf, pos, flexible)
        for _ in range(nparts):
            (index,) = _I32.unpack_from(buf, pos)
            n, pos = _length(buf, pos + 4, flexible, _I32)
            records: bytes | None = None
            if n >= 0:
                records, pos = _take(buf, pos, n)
            if flexible:
                pos = _no_tags(buf, pos)
            parts.append(ProducePartition(index, records))
        if flexible:
            pos = _no_tags(buf, pos)
        topics.append(ProduceTopic(name, parts))
    if flexible:
        pos = _no_tags(buf, pos)
    if pos != len(buf):
        raise _Unusual
    return RequestHeader(api_key, api_version, cid, client_id), ProduceRequest(txn, acks, timeout_ms, topics)


def _length(buf: bytes, pos: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A string's, bytes' or array's length (-1: null): a compact one (an unsigned varint of the
    length + 1) in a flexible version, else `fixed` (int16 for strings, int32 for bytes and arrays)."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    (n,) = fixed.unpack_from(buf, pos)
    return n, pos + fixed.size


def _count(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length; a null array, or one longer than the bytes left could hold, is unusual."""
    n, pos = _length(buf, pos, flexible, _I32)
    if n < 0 or n > len(buf) - pos:
        raise _Unusual
    return n, pos


_PARTITION = struct.Struct(">ihqqq")     # index, error code, base offset, log append time, log start offset (v5+)
_PARTITION_V3 = struct.Struct(">ihqq")


def _uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = s.encode()
    return (_uvarint_bytes(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint_bytes(n + 1) if flexible else _I32.pack(n)


def encode_produce_response(version: int, correlation_id: int, body: dict[str, Any]) -> bytes | None:
    """The framed ProduceResponse (size, header, body) for `body` as the handler builds it, or None
    when it carries record errors or `version` is not one served (the generated encoder writes it)."""
    if version not in VERSIONS:
        return None
    flexible = version >= FLEXIBLE_FROM
    out = [_I32.pack(correlation_id)]
    if flexible:
        out.append(b"\x00")                      # the response header's tagged fields
    responses = body["responses"]
    out.append(_array_len(len(responses), flexible))
    with_start = version >= 5
    for t in responses:
        out.append(_string(t["name"], flexible))
        parts = t["partition_responses"]
        out.append(_array_len(len(parts), flexible))
        for p in parts:
            if p.get("record_errors"):
                return None
            if with_start:
                out.append(_PARTITION.pack(p["index"], p["error_code"], p["base_offset"], p["log_append_time_ms"],
                                           p["log_start_offset"]))
            else:
                out.append(_PARTITION_V3.pack(p["index"], p["error_code"], p["base_offset"], p["log_append_time_ms"]))
            if version >= 8:
                out.append(_array_len(0, flexible))     # record_errors
                out.append(_string(p.get("error_message"), flexible))
            if flexible:
                out.append(b"\x00")
        if flexible:
            out.append(b"\x00")
    out.append(_I32.pack(body.get("throttle_time_ms", 0)))
    if flexible:
        out.append(b"\x00")
    size = sum(len(b) for b in out)
    return _I32.pack(size) + b"".join(out)
