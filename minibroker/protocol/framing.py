"""Sans-IO framing: a 4-byte big-endian length, then one msgpack map.

`FrameDecoder` takes bytes in and hands out decoded messages; it never
touches a socket, so the broker, the controller and the client share it.
A frame over the limit, a body that is not valid msgpack, or a body that is
not a map raises `FramingError`; the caller logs the reason and closes that
connection (the stream cannot be resynchronised after a bad frame).
"""
from __future__ import annotations

import struct
import threading
from collections import deque
from typing import Any

import msgpack

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # socket.request.max.bytes
_LEN = struct.Struct(">I")
_PACKERS = threading.local()        # one reusable Packer per thread (packb builds one per call)


def _packer() -> msgpack.Packer:
    try:
        return _PACKERS.p  # type: ignore[no-any-return]
    except AttributeError:
        p = _PACKERS.p = msgpack.Packer(use_bin_type=True)
        return p


class FramingError(Exception):
    """The peer broke the framing rules; the connection must be closed."""


def encode_frame(message: dict[str, Any]) -> bytes:
    try:
        packer = _PACKERS.p                 # (_packer's common case, without its call)
    except AttributeError:
        packer = _packer()
    body = packer.pack(message)
    return _LEN.pack(len(body)) + body


# A message carrying at least this many bytes of record batches (a Fetch response's `records`) is framed
# around them: the batches go out as buffers of their own, never copied into the frame.
BLOB_FRAME_BYTES = 64 * 1024
_BLOB_MIN = 4096                    # a bytes value at least this long is one of those buffers


def frame_parts(message: dict[str, Any]) -> list[bytes]:
    """`encode_frame` as buffers for a transport's writelines: the length prefix and the body, which is
    not copied again; a message with large record batches (`records_bytes`) as the msgpack around each
    batch and the batch itself, which is not copied at all (the same bytes on the wire)."""
    if records_bytes(message) < BLOB_FRAME_BYTES:
        try:
            packer = _PACKERS.p
        except AttributeError:
            packer = _packer()
        body = packer.pack(message)
        return [_LEN.pack(len(body)), body]
    return _frame_around_blobs(message)


def records_bytes(message: dict[str, Any]) -> int:
    """The bytes of record batches a response carries (each topic's partitions' `records`)."""
    topics = message.get("topics")
    if type(topics) is not list:
        return 0
    n = 0
    for t in topics:
        parts = t.get("partitions") if type(t) is dict else None
        if type(parts) is list:
            for p in parts:
                r = p.get("records") if type(p) is dict else None
                if type(r) is bytes:
                    n += len(r)
    return n


def _frame_around_blobs(message: dict[str, Any]) -> list[bytes]:
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    out: list[bytes] = [b""]
    _pack_around_blobs(packer, message, out)
    out.append(packer.bytes())
    out[0] = _LEN.pack(sum(len(b) for b in out))
    return out


def _pack_around_blobs(packer: msgpack.Packer, v: Any, out: list[bytes]) -> None:
    """`v` into `packer`, but each bytes value of _BLOB_MIN or more appended to `out` as it is (after what
    the packer holds and the value's bin header). A plain function, not a closure: a recursive closure
    is a reference cycle, which would keep the batches until the (rare) cyclic GC ran."""
    t = type(v)
    if t is dict:
        packer.pack_map_header(len(v))
        for k, x in v.items():
            packer.pack(k)
            _pack_around_blobs(packer, x, out)
    elif t is list:
        packer.pack_array_header(len(v))
        for x in v:
            _pack_around_blobs(packer, x, out)
    elif t is bytes and len(v) >= _BLOB_MIN:
        out.append(packer.bytes())
        packer.reset()
        n = len(v)
        out.append(b"\xc5" + n.to_bytes(2, "big") if n < 0x10000 else b"\xc6" + n.to_bytes(4, "big"))
        out.append(v)
    else:
        packer.pack(v)


def encode_frame_chunked(message: dict[str, Any]) -> bytes:
    """`encode_frame` in pieces (one C call per element of the message's
    lists of lists), for a worker thread: big responses never hold the GIL long."""
    packer = msgpack.Packer(use_bin_type=True)
    parts: list[bytes] = [packer.pack_map_header(len(message))]
    for k, v in message.items():
        parts.append(packer.pack(k))
        _pack_chunked(packer, v, parts, 2)
    body = b"".join(parts)
    return _LEN.pack(len(body)) + body


def _pack_chunked(packer: msgpack.Packer, v: Any, parts: list[bytes], depth: int) -> None:
    if depth and isinstance(v, list) and len(v) > 64:
        parts.append(packer.pack_array_header(len(v)))
        for item in v:
            _pack_chunked(packer, item, parts, depth)
    elif depth and isinstance(v, dict) and any(isinstance(x, list) and len(x) > 64 for x in v.values()):
        parts.append(packer.pack_map_header(len(v)))
        for k, x in v.items():
            parts.append(packer.pack(k))
            _pack_chunked(packer, x, parts, depth - 1)
    else:
        parts.append(packer.pack(v))


def _response_entries(message: dict[str, Any], limit: int) -> int:
    """Entries of a response's topic/partition lists (how costly encoding it
    is), counted only until they pass `limit`, so counting is cheap too.
    minibroker._speedups.response_entries is the same in C (every response is counted)."""
    n = 0
    for v in message.values():
        if isinstance(v, list):
            n += len(v)
            if n > limit:
                return n
            for item in v:
                if isinstance(item, dict):
                    for x in item.values():
                        if isinstance(x, list):
                            n += len(x)
                if n > limit:
                    return n
    return n


try:
    from minibroker._speedups import response_entries
except ImportError:        # built without the C extension
    response_entries = _response_entries


try:    # a map in one C call, its keys from a cache; None where msgpack must decide (an error, an odd type)
    from minibroker._speedups import decode_map as _decode_map
except ImportError:  # pragma: no cover - the C extension was not built
    def _decode_map(data: bytes | bytearray | memoryview, /) -> dict[str, Any] | None:
        return None

# `decode_body`'s first step, for a caller on the per-request path: the map, or None where
# decode_body must decide (it also raises FramingError).
decode_map_or_none = _decode_map


def decode_body(body: bytes | memoryview) -> dict[str, Any]:
    obj = _decode_map(body)
    if obj is not None:
        return obj
    try:
        obj = msgpack.unpackb(body)         # msgpack 1.x defaults: raw=False, strict_map_key=True, use_list=True
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise FramingError(f"body is not valid msgpack: {exc.__class__.__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise FramingError(f"frame body must be a map, got {type(obj).__name__}")
    return obj


class FrameDecoder:
    """Accumulates bytes; `feed` returns the complete messages so far (`push` and `pop_raw`: the
    complete bodies, undecoded, one at a time).

    The bytes received are kept as the chunks they arrived in, and a frame is copied at most once:
    not at all when it lies inside one chunk (its body is a view of that chunk: an awaited request
    arrives in one read), once when it spans several (they are joined when the last arrives; a
    256 KiB batch arrives in a few reads). A bytearray appended to and cut from the front copies a
    large frame twice more.

    Invariant: `_chunks` holds the bytes received and not yet handed out, in order, `buffered` of them,
    never more than one partial frame's bytes beyond what was already returned and at most
    `max_frame_bytes + 4` of them plus the last chunk received.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: deque[bytes | memoryview] = deque()
        self.buffered = 0                   # (read it, never set it: the bytes held, see the invariant)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if not self._chunks and len(data) > 4:
            # One whole frame and nothing buffered (a response read at once): what push and
            # pop_raw would do, without their calls.
            (length,) = _LEN.unpack_from(data, 0)
            if len(data) == 4 + length and length <= self.max_frame_bytes:
                body = memoryview(data)[4:]
                msg = _decode_map(body)             # (decode_body's first step, without its call)
                return [msg if msg is not None else decode_body(body)]
        self.push(data)
        out: list[dict[str, Any]] = []
        while (body := self.pop_raw()) is not None:
            out.append(decode_body(body))
        return out

    def push(self, data: bytes | memoryview) -> None:
        """Buffer bytes without decoding them (the server decodes as its request window allows)."""
        if data:
            self._chunks.append(data)
            self.buffered += len(data)

    def pop_raw(self) -> bytes | memoryview | None:
        """The next complete frame's body, undecoded (a view where it lies in one received chunk),
        or None if none is complete yet."""
        size = self.buffered
        if size < 4:
            return None
        chunks = self._chunks
        first = chunks[0]
        held = len(first)                   # (after a _join: every byte buffered, `size`)
        if held < 4:
            first = self._join()
            held = size
        (length,) = _LEN.unpack_from(first, 0)
        if length > self.max_frame_bytes:
            raise FramingError(f"frame of {length} bytes exceeds socket.request.max.bytes={self.max_frame_bytes}")
        end = 4 + length
        if size < end:
            return None
        if held < end:
            first = self._join()
            held = size
        view = memoryview(first)
        if held == end:
            chunks.popleft()
        else:
            chunks[0] = view[end:]
        self.buffered = size - end
        return view[4:end]

    def _join(self) -> bytes:
        """Every buffered chunk as one (a frame spans several)."""
        joined = b"".join(self._chunks)
        self._chunks.clear()
        self._chunks.append(joined)
        return joined


# Bodies above this size are decoded in chunks of at most this many bytes of
# msgpack, so one huge request never holds the GIL (and the loop) for long.
CHUNK_BYTES = 65_536
# ... unless they hold at most this many objects (a produce request of a few
# large batches): those decode in one C call of a few microseconds.
INLINE_OBJECTS = 4096

_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2,
          0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
# type byte -> (length width, extra bytes skipped, what the length counts: "bytes", "items" or "pairs")
_SIZED = {0xC4: (1, 0, "bytes"), 0xC5: (2, 0, "bytes"), 0xC6: (4, 0, "bytes"), 0xD9: (1, 0, "bytes"),
          0xDA: (2, 0, "bytes"), 0xDB: (4, 0, "bytes"), 0xC7: (1, 1, "bytes"), 0xC8: (2, 1, "bytes"),
          0xC9: (4, 1, "bytes"), 0xDC: (2, 0, "items"), 0xDD: (4, 0, "items"), 0xDE: (2, 0, "pairs"),
          0xDF: (4, 0, "pairs")}


def msgpack_objects_py(data: bytes | bytearray | memoryview, limit: int) -> int:
    """The objects in the msgpack object at the start of `data` (itself and everything inside),
    counted until the count passes `limit`: the count, limit + 1 when there are more, or -1
    when `data` does not start with a complete object. Strings, binaries and extensions are
    skipped by length. minibroker._speedups.msgpack_objects is the same in C."""
    n = len(data)
    pos = count = 0
    pending = 1
    while pending > 0 and count <= limit:
        if pos >= n:
            return -1
        b = data[pos]
        pos += 1
        pending -= 1
        count += 1
        skip = items = 0
        if b <= 0x7F or b >= 0xE0:
            pass
        elif b <= 0x8F:
            items = 2 * (b & 0x0F)
        elif b <= 0x9F:
            items = b & 0x0F
        elif b <= 0xBF:
            skip = b & 0x1F
        elif b in _FIXED:
            skip = _FIXED[b]
        elif b in _SIZED:
            width, skip, unit = _SIZED[b]
            if n - pos < width:
                return -1
            length = int.from_bytes(data[pos:pos + width], "big")
            pos += width
            if unit == "bytes":
                skip += length
            else:
                items = length if unit == "items" else 2 * length
        else:
            return -1                                  # 0xC1 is never used
        if skip > n - pos:
            return -1
        pos += skip
        if items > n - pos:
            return -1
        pending += items
    return limit + 1 if count > limit else count


try:
    from minibroker._speedups import msgpack_objects
except ImportError:  # pragma: no cover - the C extension was not built
    msgpack_objects = msgpack_objects_py


def decodes_inline(body: bytes | bytearray | memoryview) -> bool:
    """Whether `body` is cheap enough to decode on the event loop: small, or few objects."""
    return len(body) <= CHUNK_BYTES or 0 <= msgpack_objects(body, INLINE_OBJECTS) <= INLINE_OBJECTS


def decode_body_chunked(body: bytes) -> dict[str, Any]:
    """`decode_body` for large bodies, in pieces: every sub-object whose
    encoding is at most CHUNK_BYTES is decoded by one C call; bigger maps and
    arrays are walked by header. Run it on a worker thread: between pieces the
    interpreter can switch back to the event loop's thread."""
    if len(body) <= CHUNK_BYTES:
        return decode_body(body)
    if body[0] not in _MAP_TYPES:
        raise FramingError("frame body must be a map")
    try:
        return _decode_big(memoryview(body))
    except FramingError:
        raise
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise FramingError(f"body is not valid msgpack: {exc.__class__.__name__}: {exc}") from None


_MAP_TYPES = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
_ARRAY_TYPES = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def decode_any(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)


def _decode_big(view: memoryview) -> Any:
    """One complete msgpack object: small or scalar ones in one C call; a
    big map or array element by element, runs of small elements together."""
    if len(view) <= CHUNK_BYTES or view[0] not in _MAP_TYPES | _ARRAY_TYPES:
        return decode_any(view)
    u = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=True, max_buffer_size=len(view) + 1)
    u.feed(view)
    if view[0] in _ARRAY_TYPES:
        n = u.read_array_header()
        items: list[Any] = []
        run_start, count = u.tell(), 0
        for _ in range(n):
            s = u.tell()
            u.skip()
            e = u.tell()
            if e - s > CHUNK_BYTES or e - run_start > CHUNK_BYTES:
                if count:
                    items.extend(_decode_run(view[run_start:s], count))
                run_start, count = s, 0
                if e - s > CHUNK_BYTES:
                    items.append(_decode_big(view[s:e]))
                    run_start = e
                    continue
            count += 1
        if count:
            items.extend(_decode_run(view[run_start:u.tell()], count))
        if u.tell() != len(view):
            raise FramingError("body is not valid msgpack: trailing bytes")
        return items
    n = u.read_map_header()
    out: dict[Any, Any] = {}
    for _ in range(n):
        s = u.tell()
        u.skip()
        key = decode_any(view[s:u.tell()])
        if not isinstance(key, (str, bytes)):
            raise FramingError("body is not valid msgpack: map keys must be str or bytes")
        s = u.tell()
        u.skip()
        out[key] = _decode_big(view[s:u.tell()])
    if u.tell() != len(view):
        raise FramingError("body is not valid msgpack: trailing bytes")
    return out


def _decode_run(view: memoryview, count: int) -> list[Any]:
    return decode_any(b"\xdd" + _LEN.pack(count) + view.tobytes())  # type: ignore[no-any-return]
