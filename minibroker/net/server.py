"""The request server shared by broker and controller.

Owns: accepting connections on one listener, framing (via the sans-IO
`FrameDecoder`), header validation, per-connection authentication state,
dispatch to handlers, and writing responses in request order. It must not
know what any API means: handlers do.

Requests on one connection run concurrently (so a parked long-poll does not
block a pipelined produce), but their responses are written in arrival
order, as Kafka's clients expect. A handler returns either an awaitable (run
as a task) or a `Reply` (minibroker.net.reply): the produce and fetch
handlers answer or park without a task, and the response is written in the
call that completes the Reply. When the connection dies, its in-flight
handlers are cancelled and its pending Replies cancelled, so delayed produces
and fetches die with it.

Bounds (issue 10): at most `max_inflight` requests per connection are read
and not yet answered (Kafka mutes a channel with one in flight); beyond that,
and while the transport's write buffer is above its high-water mark (the
client is not reading its responses), the connection stops reading. Frames
stay undecoded bytes until the window admits them, and a large frame of many
objects is decoded and validated on a worker thread in pieces, so no request
holds the loop (a large frame of few objects, as a produce request of a few
big batches, decodes on the loop in one C call: a thread round trip would
cost more). A connection must send its first complete frame within
`first_frame_ms`, is closed after `idle_ms` without a request in flight or
traffic (connections.max.idle.ms), and a failed authentication closes it
after `failed_auth_delay_ms` (connection.failed.authentication.delay.ms).
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import ssl
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.reply import Reply
from minibroker.net.sasl import SaslServerSession, server_credential
from minibroker.net.scram import ScramCredential
from minibroker.net.tcp import set_nodelay
from minibroker.protocol.api import HEADER, REQUESTS, ApiKey
from minibroker.protocol.framing import (CHUNK_BYTES, DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramingError, decode_body,
                                         decode_body_chunked, decode_map_or_none, decodes_inline, encode_frame,
                                         encode_frame_chunked, frame_parts, response_entries)
from minibroker.protocol.schema import SchemaError, validate, validator

log = logging.getLogger("minibroker.net")

_new_object = object.__new__
_NO_RESPONSE = object()
_PENDING = object()                      # a slot's response before it is ready
_API_KEYS: dict[int, ApiKey] = {int(k): k for k in ApiKey}
# validate(msg, HEADER) and validate(msg, REQUESTS[api]), bound once (no spec lookup per request).
_validate_header = validator(HEADER)
_VALIDATORS: dict[ApiKey, Callable[[Any], Any]] = {api: validator(spec) for api, spec in REQUESTS.items()}

DEFAULT_MAX_INFLIGHT = 8                 # minibroker.max.inflight.requests.per.connection
DEFAULT_IDLE_MS = 600_000                # connections.max.idle.ms (Kafka's default)
DEFAULT_FIRST_FRAME_MS = 10_000          # minibroker.connections.first.frame.timeout.ms
WRITE_BUFFER_HIGH_WATER = 1 << 20        # pause reading while this much output is unread
AUTHENTICATED_WINDOW_FACTOR = 8
LARGE_RESPONSE_ENTRIES = 2_000           # responses with more entries are encoded on the decoder thread
PUMP_BUDGET = 64                         # frames admitted per connection per loop iteration

# One thread decodes and validates large frames, so a burst of them queues
# there instead of taking the storage threads (asyncio.to_thread) or the loop.
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minibroker-decode")


@dataclass(slots=True)
class RequestContext:
    conn: ServerConnection
    api: ApiKey
    version: int
    correlation_id: int
    client_id: str

    @property
    def authenticated(self) -> bool:
        return self.conn.authenticated

    @property
    def listener(self) -> str:
        return self.conn.listener

    def require_privileged(self) -> None:
        if not self.conn.authenticated:
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             f"{self.api.name} needs an authenticated inter-broker connection")


# A handler answers with a Reply (at once or when it completes) or an awaitable run as a task.
Handler = Callable[[RequestContext, dict[str, Any]], Reply | Awaitable[dict[str, Any] | None]]


@dataclass
class HandlerSpec:
    fn: Handler
    privileged: bool = False
    versions: tuple[int, int] = (0, 0)


@dataclass
class Dispatcher:
    """What a process serves: handlers by API key, and the SCRAM credential that
    privileged connections must prove. Given a `secret`, it keeps only the salted
    credential derived from it (and blanks `secret`).
    Invariant: `secret` is "" after construction."""
    handlers: dict[ApiKey, HandlerSpec]
    secret: str
    role: str
    credential: ScramCredential | None = None
    # connection.failed.authentication.delay.ms: a failed exchange is answered, and the
    # connection closed, only after this delay (one guess per connection per delay).
    failed_auth_delay_ms: int = 100
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    # Extra ApiVersions fields describing the process: node_id, state, software.
    describe: Callable[[], dict[str, Any]] = lambda: {}
    connections: set[ServerConnection] = field(default_factory=set)
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    idle_ms: int = DEFAULT_IDLE_MS
    first_frame_ms: int = DEFAULT_FIRST_FRAME_MS

    def configure(self, config: Any) -> None:
        """Connection limits from a Config (broker and controller share the keys)."""
        self.max_inflight = max(1, int(config.get("minibroker.max.inflight.requests.per.connection",
                                                  str(DEFAULT_MAX_INFLIGHT))))
        self.idle_ms = int(config.get("connections.max.idle.ms", str(DEFAULT_IDLE_MS)))
        self.first_frame_ms = int(config.get("minibroker.connections.first.frame.timeout.ms",
                                             str(DEFAULT_FIRST_FRAME_MS)))

    def __post_init__(self) -> None:
        if self.credential is None and self.secret:
            self.credential = server_credential(self.secret)
        self.secret = ""

    def api_versions(self) -> list[dict[str, int]]:
        keys = [{"api": int(k), "min_v": s.versions[0], "max_v": s.versions[1]} for k, s in self.handlers.items()]
        keys.append({"api": int(ApiKey.API_VERSIONS), "min_v": 0, "max_v": 0})
        keys.append({"api": int(ApiKey.SASL_HANDSHAKE), "min_v": 0, "max_v": 0})
        keys.append({"api": int(ApiKey.SASL_AUTHENTICATE), "min_v": 0, "max_v": 0})
        return sorted(keys, key=lambda d: d["api"])


# One request's place in its connection's response order: [its response, or _PENDING until it is ready].
Slot = list[Any]


class ServerConnection(asyncio.Protocol):
    """One client connection. Invariant: `_slots` holds one slot per request
    read and not yet answered, in arrival order, at most `max_inflight` of
    them; reading is paused whenever the window is full or writing is paused."""

    def __init__(self, dispatcher: Dispatcher, listener: str) -> None:
        self.dispatcher = dispatcher
        self.listener = listener
        self.sasl = SaslServerSession(dispatcher.credential)
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(dispatcher.max_frame_bytes)
        self._slots: deque[Slot] = deque()
        # Invariant: frames decoded but not yet dispatched, in arrival order, each [slot, decoded or None];
        # non-empty only while some frame's decode runs off the loop. Requests are dispatched in
        # arrival order (as Kafka handles one connection's requests in order): a small frame
        # never overtakes a large one still being decoded.
        self._undispatched: deque[list[Any]] = deque()
        self._tasks: set[asyncio.Task] = set()
        self._replies: set[Reply] = set()        # Invariant: the handlers' Replies not yet completed
        self.produce_appending: asyncio.Future[None] | None = None   # the last produce's append phase
        self._closed = False
        self._write_paused = False
        self._reading_paused = False
        self._got_frame = False
        self._pumping = False
        self._pump_scheduled = False
        self._pump_soon = False           # Invariant: a `_pump_after_answer` is pending
        self._auth_failed = False
        self._last_active = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.closed_event = asyncio.Event()
        # Invariant: the loop this connection was made on (every callback runs on it).
        self._loop = asyncio.get_running_loop()
        # Invariant: the request window for the connection's authentication state (`_window`),
        # recomputed when a SASL step completes.
        self._window_size = dispatcher.max_inflight

    @property
    def authenticated(self) -> bool:
        return self.sasl.authenticated

    # -- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_WATER)  # type: ignore[union-attr]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.dispatcher.connections.add(self)
        loop = self._loop
        self._window_size = self._window()
        self._last_active = loop.time()
        if self.dispatcher.first_frame_ms > 0:
            self._timer = loop.call_later(self.dispatcher.first_frame_ms / 1000, self._on_first_frame_deadline)
        else:
            self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        self._last_active = self._loop.time()
        self._decoder.push(data)
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.closed_event.set()
        self.dispatcher.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        for r in list(self._replies):
            r.cancel()
        self._replies.clear()
        self._slots.clear()

    def pause_writing(self) -> None:
        """Triggered when unread responses pass the high-water mark: read no more requests."""
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    # -- flow control and timers -------------------------------------------
    def _pump(self) -> None:
        """Admit buffered frames while the window and the write buffer allow,
        at most PUMP_BUDGET of them per loop iteration (the rest wait for the
        next one, with reading paused), so pipelined cheap requests cannot
        hold the loop either."""
        if self._pumping:
            return
        self._pumping = True
        decoder = self._decoder
        slots = self._slots
        try:
            budget = PUMP_BUDGET
            while (not self._closed and not self._write_paused and not self._auth_failed
                   and len(slots) < self._window_size):
                if budget == 0:
                    if not self._pump_scheduled:
                        self._pump_scheduled = True
                        self._loop.call_soon(self._scheduled_pump)
                    break
                if decoder.buffered < 4:        # (no frame's length yet: pop_raw would say None)
                    break
                try:
                    body = decoder.pop_raw()
                except FramingError as exc:
                    self.abort(f"framing error: {exc}")
                    return
                if body is None:
                    break
                budget -= 1
                self._on_frame(body)
                if budget and decoder.buffered < 4:
                    break                       # (where the next turn would stop: no frame's length yet)
        finally:
            self._pumping = False
        if (self._reading_paused or self._write_paused or self._pump_scheduled or self._auth_failed
                or len(slots) >= self._window_size):
            self._update_reading()              # (otherwise reading is on and stays on)

    def _window(self) -> int:
        """Authenticated (inter-broker) connections multiplex heartbeats, metadata
        long-polls and forwarded requests, so they get a wider window."""
        w = self.dispatcher.max_inflight
        return w * AUTHENTICATED_WINDOW_FACTOR if self.sasl.authenticated else w

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        self._pump()

    def _update_reading(self) -> None:
        if self._closed or self.transport is None:
            return
        want_pause = (self._write_paused or self._pump_scheduled or self._auth_failed
                      or len(self._slots) >= self._window_size)
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _on_first_frame_deadline(self) -> None:
        self._timer = None
        if not self._got_frame:
            self.abort(f"no complete request within {self.dispatcher.first_frame_ms} ms of connecting")
        else:
            self._arm_idle()

    def _arm_idle(self, delay_s: float | None = None) -> None:
        if self._closed or self.dispatcher.idle_ms <= 0:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.dispatcher.idle_ms / 1000 if delay_s is None else delay_s,
                                      self._on_idle_check)

    def _on_idle_check(self) -> None:
        self._timer = None
        idle_s = asyncio.get_running_loop().time() - self._last_active
        limit_s = self.dispatcher.idle_ms / 1000
        if not self._slots and idle_s >= limit_s:
            self.abort(f"idle for {int(idle_s * 1000)} ms (connections.max.idle.ms={self.dispatcher.idle_ms})")
        else:
            self._arm_idle(max(0.05, limit_s - idle_s) if not self._slots else limit_s)

    # -- requests ----------------------------------------------------------
    def abort(self, reason: str) -> None:
        log.warning("closing connection from %s on %s: %s", self.peer, self.listener, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def _on_frame(self, body: bytes) -> None:
        if not self._got_frame:
            self._got_frame = True
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None
            self._arm_idle()
        slot: Slot = [_PENDING]
        self._slots.append(slot)
        if len(body) <= CHUNK_BYTES or decodes_inline(body):
            msg = decode_map_or_none(body)
            if msg is None:
                try:
                    msg = decode_body(body)
                except FramingError as exc:
                    self.abort(f"framing error: {exc}")
                    return
            if not self._undispatched:
                self._on_request(msg, slot, None)
            else:
                self._undispatched.append([slot, (msg, None)])
            return
        entry: list[Any] = [slot, None]
        self._undispatched.append(entry)
        task = self._loop.create_task(self._decode_large(body, entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _decode_large(self, body: bytes, entry: list[Any]) -> None:
        loop = self._loop
        try:
            entry[1] = await loop.run_in_executor(_DECODER, _decode_and_validate, body)
        except FramingError as exc:
            self.abort(f"framing error: {exc}")
            return
        pending = self._undispatched
        while pending and pending[0][1] is not None and not self._closed:
            slot, (msg, validated) = pending.popleft()
            self._on_request(msg, slot, validated)

    def _on_request(self, msg: dict[str, Any], slot: Slot, validated: Any) -> None:
        try:
            header = _validate_header(msg)
        except SchemaError as exc:
            self.abort(f"bad request header: {exc}")
            return
        cid = header["id"]
        version = header["v"]
        api = _API_KEYS.get(header["api"])
        if api is None:
            self._answer(slot, _error(cid, ErrorCode.UNSUPPORTED_VERSION, f"unknown api key {header['api']}"))
            return
        if api in _BUILTIN:
            resp = self._builtin(api, cid, msg)
            if self.sasl.failed:
                self._fail_authentication(slot, resp)
            else:
                self._answer(slot, resp)
            return
        spec = self.dispatcher.handlers.get(api)
        if spec is None:
            self._answer(slot, _error(cid, ErrorCode.UNSUPPORTED_VERSION,
                                      f"{api.name} is not served by this {self.dispatcher.role}"))
            return
        versions = spec.versions
        if not versions[0] <= version <= versions[1]:
            self._answer(slot, _error(cid, ErrorCode.UNSUPPORTED_VERSION, f"{api.name} v{version}"))
            return
        if spec.privileged and not self.authenticated:
            self._answer(slot, _error(cid, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      f"{api.name} needs an authenticated inter-broker connection"))
            return
        large: dict[str, Any] | None = None
        if validated is None:                   # (decoded on the loop: validated here)
            try:
                body = _VALIDATORS[api](msg)
            except SchemaError as exc:
                self._answer(slot, _error(cid, ErrorCode.INVALID_REQUEST, str(exc)))
                return
        elif isinstance(validated, SchemaError):
            self._answer(slot, _error(cid, ErrorCode.INVALID_REQUEST, str(validated)))
            return
        else:
            body = large = validated
        ctx = _new_object(RequestContext)      # (RequestContext(...) without its Python __init__)
        ctx.conn = self
        ctx.api = api
        ctx.version = version
        ctx.correlation_id = cid
        ctx.client_id = header["client"]
        try:
            r = spec.fn(ctx, body)
        except Exception as exc:
            self._deliver(ctx, slot, None, exc, large)
            return
        if type(r) is Reply:
            if r.done:
                self._deliver(ctx, slot, r.result, r.error, large)
            else:
                self._replies.add(r)
                r.attach(functools.partial(self._on_reply, r, ctx, slot, large))
            return
        task = self._loop.create_task(self._run(r, ctx, slot, large))
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._handler_done, r))

    def _on_reply(self, reply: Reply, ctx: RequestContext, slot: Slot, large: dict[str, Any] | None,
                  result: Any, error: BaseException | None) -> None:
        """Triggered when a parked handler's Reply completes: its response is written now."""
        self._replies.discard(reply)
        if (error is None and large is None and type(result) is dict
                and response_entries(result, LARGE_RESPONSE_ENTRIES) <= LARGE_RESPONSE_ENTRIES):
            result["id"] = ctx.correlation_id   # (`_deliver`'s common case, without its checks)
            self._answer(slot, result)
        else:
            self._deliver(ctx, slot, result, error, large)

    async def _run(self, aw: Awaitable[dict[str, Any] | None], ctx: RequestContext, slot: Slot,
                   large: dict[str, Any] | None) -> None:
        try:
            resp = await aw
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._deliver(ctx, slot, None, exc, large)
            return
        self._deliver(ctx, slot, resp, None, large)

    def _handler_done(self, aw: Awaitable[Any], task: asyncio.Task[None]) -> None:
        """Triggered when a handler's task ends. Cancelled before its first step (its connection
        closed), it never awaited the handler's coroutine: that is closed here, never to run."""
        self._tasks.discard(task)
        if task.cancelled() and inspect.iscoroutine(aw):
            aw.close()

    def _deliver(self, ctx: RequestContext, slot: Slot, resp: dict[str, Any] | None,
                 error: BaseException | None, large: dict[str, Any] | None) -> None:
        """A handler's outcome (its response, None for none, or the exception it raised) goes out in order."""
        if error is not None:
            if isinstance(error, KafkaError):
                resp = _error(ctx.correlation_id, error.code, error.message)
            else:
                log.error("handler for %s failed (client %s)", ctx.api.name, ctx.client_id, exc_info=error)
                resp = _error(ctx.correlation_id, ErrorCode.UNKNOWN_SERVER_ERROR, "internal error, see broker log")
        if large is not None:
            # Freeing a request of 100,000s of objects is one long C cascade: do it
            # on the decoder thread, piece by piece.
            self._loop.run_in_executor(_DECODER, dismantle, large)
        if resp is None:
            self._answer(slot, _NO_RESPONSE)
            return
        resp["id"] = ctx.correlation_id
        if response_entries(resp, LARGE_RESPONSE_ENTRIES) > LARGE_RESPONSE_ENTRIES:
            task = self._loop.create_task(self._answer_large(slot, resp))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._answer(slot, resp)

    async def _answer_large(self, slot: Slot, resp: dict[str, Any]) -> None:
        frame = await self._loop.run_in_executor(_DECODER, _encode_and_dismantle, resp)
        del resp
        self._answer(slot, _Encoded(frame))

    def _builtin(self, api: ApiKey, cid: int, msg: dict[str, Any]) -> dict[str, Any]:
        if api is ApiKey.API_VERSIONS:
            return {"id": cid, "error": 0, "api_keys": self.dispatcher.api_versions(),
                    "role": self.dispatcher.role, **self.dispatcher.describe()}
        try:
            body = validate(msg, REQUESTS[api])
        except SchemaError as exc:
            return {"id": cid, **self.sasl.reject(ErrorCode.INVALID_REQUEST, str(exc))}
        if api is ApiKey.SASL_HANDSHAKE:
            resp = self.sasl.on_handshake(body)
        else:
            resp = self.sasl.on_authenticate(body)
            self._window_size = self._window()
            if self.sasl.authenticated:
                log.info("authenticated %s from %s on %s (%s)", self.sasl.principal, self.peer, self.listener,
                         "SCRAM-SHA-256")
        return {"id": cid, **resp}

    def _fail_authentication(self, slot: Slot, resp: dict[str, Any]) -> None:
        """A failed SASL step: serve nothing more (later frames are read and dropped), answer after
        the delay, then close (Kafka's connection.failed.authentication.delay.ms), so that each
        guess costs a connection and a delay."""
        log.warning("failed authentication from %s on %s: %s", self.peer, self.listener, self.sasl.failure)
        self._closed = True
        self._auth_failed = True
        self._update_reading()

        def answer_and_close() -> None:
            t = self.transport
            if t is not None and not t.is_closing():
                t.write(encode_frame(resp))
                if t.can_write_eof():
                    t.write_eof()
                t.close()
        asyncio.get_running_loop().call_later(self.dispatcher.failed_auth_delay_ms / 1000, answer_and_close)


    def _answer(self, slot: Slot, resp: Any) -> None:
        """Triggered when a request's response is ready: it, and every response after it that
        was waiting for it, are written (in request order)."""
        slots = self._slots
        if len(slots) == 1 and slots[0] is slot and type(resp) is dict and slot[0] is _PENDING:
            slots.popleft()                     # the only request in flight: no order to keep
            if not self._closed and self.transport is not None:
                self.transport.writelines(frame_parts(resp))
                self._last_active = self._loop.time()
        else:
            self._answer_in_order(slot, resp)
        if ((self._decoder.buffered or self._reading_paused)
                and not self._closed and not self._pumping and not self._pump_soon):
            # The frames that waited for this answer are admitted on the loop's next turn, never inside
            # the call that answered (a completion run by another request's handler must not dispatch).
            self._pump_soon = True
            self._loop.call_soon(self._pump_after_answer)

    def _pump_after_answer(self) -> None:
        self._pump_soon = False
        self._pump()

    def _answer_in_order(self, slot: Slot, resp: Any) -> None:
        if slot[0] is _PENDING:
            slot[0] = resp
        slots = self._slots
        out: list[bytes] = []
        while slots and slots[0][0] is not _PENDING:
            r = slots.popleft()[0]
            if isinstance(r, _Encoded):
                out.append(r.frame)
            elif r is not _NO_RESPONSE:
                out += frame_parts(r)
        if out and not self._closed and self.transport is not None:
            self.transport.writelines(out)
            self._last_active = self._loop.time()


@dataclass(frozen=True)
class _Encoded:
    frame: bytes


def _decode_and_validate(body: bytes) -> tuple[dict[str, Any], Any]:
    """On the decoder thread: the message and its validated body (or the
    SchemaError, or None when the header does not name a known API). Once
    validated, the raw message is freed here (only its header is returned)."""
    msg = decode_body_chunked(body)
    try:
        api = ApiKey(validate(msg, HEADER)["api"])
        spec = REQUESTS[api]
    except (SchemaError, ValueError, KeyError):
        return msg, None
    if api in _BUILTIN:
        return msg, None
    try:
        validated = validate(msg, spec, native=False)     # in Python: it hands the GIL back as it goes
    except SchemaError as exc:
        validated = exc
    header = {k: msg[k] for k in HEADER if k in msg}
    dismantle(msg)
    return header, validated


def _encode_and_dismantle(resp: dict[str, Any]) -> bytes:
    frame = encode_frame_chunked(resp)
    dismantle(resp)
    return frame


def dismantle(obj: Any) -> None:
    """Free a big message a thousand elements at a time (a worker thread can
    then hand the GIL back between pieces); it is empty afterwards."""
    if isinstance(obj, dict):
        for k in list(obj):
            v = obj.pop(k)
            if isinstance(v, (list, dict)) and len(v) > 16:
                dismantle(v)
            del v
    elif isinstance(obj, list):
        while obj:
            chunk = obj[-1024:]
            del obj[-1024:]
            for item in chunk:
                if isinstance(item, (list, dict)) and len(item) > 16:
                    dismantle(item)
            del chunk


_BUILTIN = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


def _error(cid: int, code: ErrorCode | int, message: str = "") -> dict[str, Any]:
    return {"id": cid, "error": int(code), "message": message}


async def serve(dispatcher: Dispatcher, host: str, port: int, listener: str,
                ssl_context: ssl.SSLContext | None = None) -> asyncio.base_events.Server:
    """Listen on host:port; with `ssl_context`, the listener speaks TLS (security.protocol SSL)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ServerConnection(dispatcher, listener), host, port,
                                    reuse_address=True, backlog=1024, ssl=ssl_context)
