"""Compression codecs of Kafka's record batches, and bounded decompression.

Owns the codec ids of a batch's attributes (bits 0-2), their names as
Kafka's `compression.type` spells them, and `decompress_bounded`, which the
broker uses to look inside a compressed batch without letting a small batch
expand into unbounded memory (a "decompression bomb"). Must not know about
batch headers or records: it maps bytes to bytes.

The encodings are Kafka's: gzip (RFC 1952, one or more members), snappy in
xerial's block framing (Kafka's `SnappyOutputStream`; a bare raw snappy
block is also read, as Kafka's clients do), lz4 frames (KIP-57) and zstd
frames. `cramjam` does snappy, lz4 and zstd; gzip is the standard
library's zlib. The client-side encoder is aiokafka's batch builder, which
uses the same libraries.
"""
from __future__ import annotations

import mmap
import struct
import threading
import zlib

import cramjam

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
CODEC_MASK = 0x07

NAMES: dict[str, int] = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES: dict[int, str] = {v: k for k, v in NAMES.items()}
# The `compression.type` of a topic or broker, in Kafka's order (BrokerCompressionType): the codec the
# leader stores batches in ("uncompressed" is none), or None for "producer", which keeps each batch's own.
TOPIC_COMPRESSION_TYPES: dict[str, int | None] = {"uncompressed": NONE, "zstd": ZSTD, "lz4": LZ4, "snappy": SNAPPY,
                                                  "gzip": GZIP, "producer": None}

_RELEASE_ABOVE = 1 << 20      # scratch pages written beyond this are given back after each use
_scratch = threading.local()  # Invariant: .buf is this thread's output buffer for lz4/zstd, or absent
_XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_I32 = struct.Struct(">i")


class DecompressedTooLarge(Exception):
    """The payload expands beyond the allowed size."""


class BadCompressedData(Exception):
    """The payload is not valid data for its codec."""


def codec_id(name: str | None) -> int:
    """Kafka's `compression.type` value (none, gzip, snappy, lz4, zstd) -> codec id."""
    key = (name or "none").strip().lower()
    if key not in NAMES:
        raise ValueError(f"compression.type must be one of {', '.join(NAMES)}, not {name!r}")
    return NAMES[key]


def decompress_bounded(codec: int, data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """Decompress `data` written with `codec`, refusing to produce more than
    `limit` bytes: raises DecompressedTooLarge as soon as the output would
    pass it (the work done is bounded by `limit`, not by what the data
    claims), BadCompressedData for anything the codec cannot read."""
    if codec == GZIP:
        return _gunzip(data, limit)
    if codec == SNAPPY:
        return _unsnappy(memoryview(data), limit)
    if codec in (LZ4, ZSTD):
        return _into_bounded(cramjam.lz4 if codec == LZ4 else cramjam.zstd, data, limit)
    raise BadCompressedData(f"unknown compression codec {codec}")


def _gunzip(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: bytes | bytearray | memoryview = data
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(rest, limit - total + 1)
        except zlib.error as exc:
            raise BadCompressedData(f"gzip: {exc}") from None
        total += len(chunk)
        if total > limit or d.unconsumed_tail:
            raise DecompressedTooLarge(f"gzip data expands beyond {limit} bytes")
        if not d.eof:
            raise BadCompressedData("gzip: truncated stream")
        out.append(chunk)
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _unsnappy(mv: memoryview, limit: int) -> bytes:
    try:
        if len(mv) > _XERIAL_HEADER_SIZE and mv[:8] == _XERIAL_HEADER:
            blocks: list[memoryview] = []
            total = 0
            pos = _XERIAL_HEADER_SIZE
            while pos < len(mv):
                if len(mv) - pos < 4:
                    raise BadCompressedData("snappy: truncated xerial block length")
                n = _I32.unpack_from(mv, pos)[0]
                pos += 4
                if n < 0 or pos + n > len(mv):
                    raise BadCompressedData(f"snappy: xerial block of {n} bytes runs past the data")
                block = mv[pos:pos + n]
                total += cramjam.snappy.decompress_raw_len(block)
                if total > limit:
                    raise DecompressedTooLarge(f"snappy data expands beyond {limit} bytes")
                blocks.append(block)
                pos += n
            return b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks)
        if cramjam.snappy.decompress_raw_len(mv) > limit:
            raise DecompressedTooLarge(f"snappy data expands beyond {limit} bytes")
        return bytes(cramjam.snappy.decompress_raw(mv))
    except cramjam.DecompressionError as exc:
        raise BadCompressedData(f"snappy: {exc}") from None


def _scratch_buffer(size: int) -> mmap.mmap:
    """This thread's reusable output buffer of at least `size` bytes. An
    anonymous mapping costs memory only where written; making one per call
    would cost more than decompressing a typical batch."""
    buf: mmap.mmap | None = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < size:
        if buf is not None:
            buf.close()
        buf = _scratch.buf = mmap.mmap(-1, size)
    return buf


def _into_bounded(mod, data: bytes | bytearray | memoryview, limit: int) -> bytes:  # type: ignore[no-untyped-def]
    # The codec writes into a `limit + 1`-byte window and stops with an error
    # when it is full, so the output (and the work) is bounded by `limit`.
    name = mod.__name__.rsplit(".", 1)[-1]
    buf = _scratch_buffer(limit + 1)
    window = memoryview(buf)[:limit + 1]
    n = 0
    try:
        n = mod.decompress_into(data, window)
        if n > limit:
            raise DecompressedTooLarge(f"{name} data expands beyond {limit} bytes")
        return bytes(window[:n])
    except cramjam.DecompressionError as exc:
        n = limit + 1
        if "whole buffer" in str(exc):
            raise DecompressedTooLarge(f"{name} data expands beyond {limit} bytes") from None
        raise BadCompressedData(f"{name}: {exc}") from None
    finally:
        window.release()
        if n > _RELEASE_ABOVE:
            buf.madvise(mmap.MADV_DONTNEED, 0, len(buf))
