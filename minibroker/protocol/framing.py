"""Sans-IO framing: a 4-byte big-endian length, then one msgpack map.

`FrameDecoder` takes bytes in and hands out decoded messages; it never
touches a socket, so the broker, the controller and the client share it.
A frame over the limit, a body that is not valid msgpack, or a body that is
not a map raises `FramingError`; the caller logs the reason and closes that
connection (the stream cannot be resynchronised after a bad frame).
"""
from __future__ import annotations

import struct
from typing import Any

import msgpack

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes
_LEN = struct.Struct(">I")


class FramingError(Exception):
    """The peer broke the framing rules; the connection must be closed."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def decode_body(body: bytes | memoryview) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise FramingError(f"body is not valid msgpack: {exc.__class__.__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise FramingError(f"frame body must be a map, got {type(obj).__name__}")
    return obj


class FrameDecoder:
    """Accumulates bytes; `feed` returns the complete messages so far.

    Invariant: `_buf` holds at most one partial frame's bytes beyond what was
    already returned, and never more than `max_frame_bytes + 4` bytes.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        buf = self._buf
        buf += data
        out: list[dict[str, Any]] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if length > self.max_frame_bytes:
                raise FramingError(
                    f"frame of {length} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}")
            if n - pos - 4 < length:
                break
            start = pos + 4
            out.append(decode_body(memoryview(buf)[start:start + length]))
            pos = start + length
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)
