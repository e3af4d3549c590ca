"""A client connection: correlation ids, one reader, a timeout per request.

Owns one TCP connection to a broker or controller. Responses are matched to
requests by correlation id; every pending request is failed (retriably, with
NETWORK_EXCEPTION) when the connection closes, and each request has its own
timeout (REQUEST_TIMED_OUT). It must not know what any API means. Used by
the client library, follower fetchers and the broker's controller channel.

A request is awaited (`request`) or answered through a callback
(`send_request`: the producer's sender, which takes the answer in the read
callback that decoded it, with no task to wake). A callback request that
fails (timed out, connection lost) goes to the connection's
`callback_failed` hook when its owner set one (ClientNetwork: it drops the
connection first), else to the callback itself. Timeouts share one loop
timer per connection, armed for the earliest deadline pending, instead of
a timer per request.
"""
from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from typing import Any
from collections.abc import Callable

import msgpack

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.sasl import authenticate
from minibroker.net.tcp import set_nodelay
from minibroker.net.tls import speaks_plaintext, tls_handshake_failed, tls_to_plaintext
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramingError, decode_body

try:    # the answer's map in one C call, its keys from a cache; None leaves it to msgpack (decode_body)
    from minibroker._speedups import decode_map
except ImportError:  # pragma: no cover - the C extension was not built
    def decode_map(data: bytes) -> dict[str, Any] | None:
        return None

# Called with (response, None) when the answer is read, or (None, error) when the request
# times out (REQUEST_TIMED_OUT) or its connection is lost (NETWORK_EXCEPTION).
Callback = Callable[[dict[str, Any] | None, KafkaError | None], None]
# A connection's `callback_failed` hook: called with (the request's callback, the error) instead of
# callback(None, error), so its owner can react to the failure before passing it on.
CallbackFailed = Callable[[Callback, KafkaError], None]

# A request body its sender encoded itself, (entries, parts): `parts`, joined, are the msgpack
# encoding of `entries` key/value pairs (a map's entries without the map's header), which the
# connection puts after its own header entries, as it would put a dict body's. A plain tuple:
# one is made per Produce request, and a NamedTuple costs several times more to make.
EncodedBody = tuple[int, tuple[bytes, ...]]
Body = dict[str, Any] | EncodedBody

_LENGTH = struct.Struct(">I").pack      # a frame's length prefix

# A deadline within this many seconds of the loop's time has passed: loop timers are
# millisecond-grained and may fire that much before the time they were set for.
_TIMER_SLACK_S = 0.001


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.data_received = conn._on_data  # type: ignore[method-assign]   # one call less per read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        set_nodelay(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._on_lost(exc)


class Connection:
    """Invariants: `_pending` maps every correlation id sent and not yet answered,
    failed or timed out to (deadline in loop time, timeout_ms, its future or None,
    its callback or None); `_timer` is armed (for `_timer_at`) while `_pending` is
    not empty, never later than the earliest deadline in it."""

    def __init__(self, host: str, port: int, client_id: str, max_frame_bytes: int) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[float, int, asyncio.Future | None, Callback | None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._decoder = FrameDecoder(max_frame_bytes)
        self._max_frame_bytes = max_frame_bytes
        self._whole_frames = True           # Invariant: the decoder holds no partial frame
        self._packer = msgpack.Packer(use_bin_type=True)     # encode_frame's packer, made once
        # body entries << 16 | api -> the map's header and its header entries up to the "id" key, encoded
        self._heads: dict[int, bytes] = {}
        self._client_entry = self._packer.pack("client") + self._packer.pack(client_id)
        self._client_entry_size = len(self._client_entry)
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self.close_reason = ""
        self.received_any = False     # a peer that closes before sending a byte may speak TLS (net/tls.py)
        self.callback_failed: CallbackFailed | None = None     # set by the owner, see the module's comment
        self._loop: asyncio.AbstractEventLoop | None = None      # Invariant: the loop it was opened on, once open

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str = "minibroker-client",
                   secret: str | None = None, timeout_s: float = 5.0,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                   ssl_context: ssl.SSLContext | None = None) -> Connection:
        """Connect (over TLS with `ssl_context`) and, given the cluster `secret`, authenticate
        with SCRAM-SHA-256 as `client_id` (minibroker.net.sasl)."""
        conn = cls(host, port, client_id, max_frame_bytes)
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _ClientProtocol(conn), host, port, ssl=ssl_context,
                                       server_hostname=host if ssl_context is not None else None), timeout_s)
        except ssl.SSLError as exc:
            raise tls_handshake_failed(host, port, exc) from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            if ssl_context is not None and await speaks_plaintext(host, port, timeout_s):
                raise tls_to_plaintext(host, port) from None
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, f"cannot connect to {host}:{port}: {exc!r}") from None
        except (TimeoutError, OSError) as exc:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION,
                             f"cannot connect to {host}:{port}: {exc or 'timeout'}") from None
        conn._transport = transport  # type: ignore[assignment]
        conn._loop = loop
        if secret is not None:
            try:
                await authenticate(conn, client_id, secret, int(timeout_s * 1000))
            except BaseException:
                # Every failed attempt (a timeout, a refusal, a cancellation) closes its socket.
                conn.close()
                transport.abort()
                raise
        return conn

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _frame(self, api: ApiKey | int, body: Body) -> tuple[int, bytes]:
        if self.closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION,
                             f"connection to {self.address} is closed: {self.close_reason}")
        cid = next(self._ids)
        packer = self._packer
        if not isinstance(body, tuple):
            data = packer.pack({"api": int(api), "v": 0, "id": cid, "client": self.client_id, **body})
            return cid, len(data).to_bytes(4, "big") + data
        entries, body_parts = body
        key = entries << 16 | api           # a plain int (api keys are int16): an ApiKey member hashes in Python
        head = self._heads.get(key)
        if head is None:
            head = self._heads[key] = packer.pack_map_header(4 + entries) + b"".join(
                map(packer.pack, ("api", int(api), "v", 0, "id")))
        cid_bytes = packer.pack(cid)
        size = len(head) + len(cid_bytes) + self._client_entry_size
        for part in body_parts:             # summed rather than joined twice: a body may be megabytes
            size += len(part)
        return cid, b"".join([_LENGTH(size), head, cid_bytes, self._client_entry, *body_parts])

    def _track(self, cid: int, timeout_ms: int, fut: asyncio.Future | None, callback: Callback | None) -> None:
        """A request is about to be written: remember it, with the timer covering its deadline."""
        loop = self._loop or asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        self._pending[cid] = (deadline, timeout_ms, fut, callback)
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """The timer, for `deadline`: earlier than it was armed for, or not armed."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = loop.call_at(deadline, self._expire)

    async def request(self, api: ApiKey | int, body: Body, *, timeout_ms: int = 30_000) -> dict[str, Any]:
        """Send one request and wait for its response (or a KafkaError)."""
        cid, frame = self._frame(api, body)
        fut = (self._loop or asyncio.get_running_loop()).create_future()
        self._track(cid, timeout_ms, fut, None)
        try:
            assert self._transport is not None
            self._transport.write(frame)
            return await fut
        finally:
            self._pending.pop(cid, None)

    def send_request(self, api: ApiKey | int, body: Body, on_done: Callback, *,
                     timeout_ms: int = 30_000) -> None:
        """Send one request now; `on_done(response, None)` runs in the read callback that
        decodes its answer, `on_done(None, error)` (or `callback_failed(on_done, error)`) in a
        later loop turn if it times out or the connection is lost. Raises KafkaError
        (NETWORK_EXCEPTION) only if the connection is closed."""
        cid, frame = self._frame(api, body)
        loop = self._loop or asyncio.get_running_loop()         # _track's work, one call less per request
        deadline = loop.time() + timeout_ms / 1000
        self._pending[cid] = (deadline, timeout_ms, None, on_done)
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)
        assert self._transport is not None
        try:
            self._transport.write(frame)
        except RuntimeError as exc:          # the transport closed and connection_lost is still on its way
            self._fail_all(f"write failed: {exc}")

    def send_no_response(self, api: ApiKey | int, body: Body) -> None:
        """For acks=0 produces: the server sends nothing back."""
        _, frame = self._frame(api, body)
        assert self._transport is not None
        self._transport.write(frame)

    def _expire(self) -> None:
        """The timer fired: fail every request past its deadline, re-arm for the earliest one left."""
        self._timer = None
        loop = self._loop or asyncio.get_running_loop()
        now = loop.time() + _TIMER_SLACK_S
        soonest = None
        expired = []
        for cid, entry in self._pending.items():
            if entry[0] <= now:
                expired.append(cid)
            elif soonest is None or entry[0] < soonest:
                soonest = entry[0]
        for cid in expired:
            _, timeout_ms, fut, callback = self._pending.pop(cid)
            self._fail(fut, callback, KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                                 f"no response from {self.address} within {timeout_ms} ms"))
        if soonest is not None and self._timer is None:
            self._timer_at = soonest
            self._timer = loop.call_at(soonest, self._expire)

    def _fail(self, fut: asyncio.Future | None, callback: Callback | None, error: KafkaError) -> None:
        if fut is not None:
            if not fut.done():
                fut.set_exception(error)
        elif callback is not None:
            loop = self._loop
            failed = self.callback_failed
            if loop is None or loop.is_closed():
                if failed is None:
                    callback(None, error)
                else:
                    failed(callback, error)
            elif failed is None:
                loop.call_soon(callback, None, error)
            else:
                loop.call_soon(failed, callback, error)

    def _on_data(self, data: bytes) -> None:
        self.received_any = True
        try:
            n = len(data) - 4
            if self._whole_frames and n > 0 and int.from_bytes(data[:4], "big") == n <= self._max_frame_bytes:
                body = data[4:]                       # the usual read, one whole frame: nothing to buffer
                msg = decode_map(body)
                messages = [decode_body(body) if msg is None else msg]
            else:
                messages = self._decoder.feed(data)
                self._whole_frames = not self._decoder.buffered
        except FramingError as exc:
            self._fail_all(f"bad frame from server: {exc}")
            if self._transport is not None:
                self._transport.close()
            return
        pending = self._pending
        for msg in messages:
            entry = pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if entry is None:
                continue
            fut = entry[2]
            if fut is not None:
                if not fut.done():
                    fut.set_result(msg)
                continue
            try:
                entry[3](msg, None)  # type: ignore[misc]
            except Exception as exc:     # the caller's bug: report it, keep reading the connection
                (self._loop or asyncio.get_running_loop()).call_exception_handler(
                    {"message": f"response callback failed on {self.address}", "exception": exc})

    def _on_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost{': ' + str(exc) if exc else ''}")

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        self.close_reason = reason
        pending, self._pending = self._pending, {}
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for _, _, fut, callback in pending.values():
            self._fail(fut, callback, KafkaError(ErrorCode.NETWORK_EXCEPTION, f"{self.address}: {reason}"))

    def close(self) -> None:
        if not self.closed:
            self._fail_all("closed by client")
        if self._transport is not None:
            self._transport.close()


def check(resp: dict[str, Any]) -> dict[str, Any]:
    """Raise the top-level error of a response, if any; else return it."""
    code = resp.get("error", 0)
    if code:
        raise KafkaError(code, resp.get("message", ""), remote=True)
    return resp
