"""A Kafka-protocol listener: connections, framing, one request at a time.

Owns: accepting connections on a Kafka listener, Kafka's framing (a 4-byte
big-endian size, then the request), reading requests in order and answering
them one at a time, as Kafka's broker does (it mutes a connection while a
request is in flight), so responses leave in request order; back-pressure
(reading pauses while requests wait); decoding large requests off the event
loop; closing the connection on anything Kafka would close it for (a frame
above socket.request.max.bytes, an unknown API key or version, a body that
does not decode, no traffic for connections.max.idle.ms).

Must not know: what any API means (minibroker.kafka.handlers answers them),
replication, storage.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import struct
from collections import deque
from collections.abc import Awaitable, Callable

from minibroker.net.tcp import set_nodelay

log = logging.getLogger("minibroker.kafka")

_SIZE = struct.Struct(">i")
# Requests read ahead of the one being answered before reading pauses, and
# the bytes they may hold: a pipelining client is held back by TCP.
_MAX_QUEUED_REQUESTS = 8
_MAX_QUEUED_BYTES = 8 * 1024 * 1024

# Answers one request frame (header + body, size prefix removed): the framed
# response bytes, or None for no response (acks=0 produce). Raises
# ConnectionAbort to close the connection.
FrameHandler = Callable[["KafkaConnection", bytes], Awaitable[bytes | None]]


class ConnectionAbort(Exception):
    """Close the connection (the message says why; it is logged)."""


class KafkaConnection(asyncio.Protocol):
    """One client connection. Invariant: `_frames` holds the complete
    requests read and not yet started, in arrival order; at most one request
    is being answered (by `_serve`) at any time."""

    authenticated = False          # a Kafka listener is a client listener: never privileged

    def __init__(self, handler: FrameHandler, listener: str, max_frame_bytes: int,
                 connections: set[KafkaConnection], idle_ms: int = 600_000) -> None:
        self.handler = handler
        self.idle_s = idle_ms / 1000
        self.listener = listener
        self.max_frame_bytes = max_frame_bytes
        self.connections = connections
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._frames: deque[bytes] = deque()
        self._queued_bytes = 0
        self._paused = False
        self._write_blocked = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._last_activity = 0.0

    # -- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.connections.add(self)
        self._wake = asyncio.Event()
        self._last_activity = asyncio.get_running_loop().time()
        self._task = asyncio.ensure_future(self._serve())

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_activity = asyncio.get_running_loop().time()
        buf = self._buf
        buf += data
        pos = 0
        n = len(buf)
        with memoryview(buf) as view:               # one copy per frame (a bytearray slice is one more)
            while n - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                if size < 0 or size > self.max_frame_bytes:
                    self.abort(f"request of {size} bytes is above socket.request.max.bytes={self.max_frame_bytes}")
                    return
                if n - pos - 4 < size:
                    break
                self._frames.append(bytes(view[pos + 4:pos + 4 + size]))
                self._queued_bytes += size
                pos += 4 + size
        if pos:
            del buf[:pos]
        if self._frames and self._wake is not None:
            self._wake.set()
        self._maybe_pause()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        self._frames.clear()

    # -- flow control --------------------------------------------------------
    def _maybe_pause(self) -> None:
        """Reading pauses while requests wait or the peer does not read its answers."""
        t = self.transport
        if t is None or self._closed:
            return
        over = (self._write_blocked or len(self._frames) >= _MAX_QUEUED_REQUESTS
                or self._queued_bytes >= _MAX_QUEUED_BYTES)
        if over and not self._paused:
            self._paused = True
            t.pause_reading()
        elif not over and self._paused:
            self._paused = False
            t.resume_reading()

    def pause_writing(self) -> None:
        self._write_blocked = True
        self._drained.clear()
        self._maybe_pause()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._drained.set()
        self._maybe_pause()

    # -- requests ------------------------------------------------------------
    def abort(self, reason: str) -> None:
        if self._closed:
            return
        log.warning("closing Kafka connection from %s on %s: %s", self.peer, self.listener, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    async def _serve(self) -> None:
        assert self._wake is not None
        try:
            while not self._closed:
                if not self._frames:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), self.idle_s)
                    except TimeoutError:
                        idle = asyncio.get_running_loop().time() - self._last_activity
                        if idle >= self.idle_s:          # connections.max.idle.ms, as Kafka's selector
                            self.abort(f"idle for {idle:.0f} s (connections.max.idle.ms)")
                            return
                    continue
                if self._write_blocked:              # the peer is not reading its answers
                    await self._drained.wait()
                    continue
                frame = self._frames.popleft()
                self._queued_bytes -= len(frame)
                self._maybe_pause()
                try:
                    resp = await self.handler(self, frame)
                except ConnectionAbort as exc:
                    self.abort(str(exc))
                    return
                self._last_activity = asyncio.get_running_loop().time()
                if resp is not None and not self._closed and self.transport is not None:
                    self.transport.write(resp)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Kafka connection from %s failed", self.peer)
            self.abort("internal error, see broker log")


async def serve_kafka(handler: FrameHandler, host: str, port: int, listener: str, max_frame_bytes: int,
                      connections: set[KafkaConnection], idle_ms: int = 600_000,
                      ssl_context: ssl.SSLContext | None = None) -> asyncio.base_events.Server:
    """Listen on host:port; with `ssl_context` the listener speaks TLS (security.protocol SSL)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: KafkaConnection(handler, listener, max_frame_bytes, connections, idle_ms),
        host, port, reuse_address=True, backlog=1024, ssl=ssl_context)
