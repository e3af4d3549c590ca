"""The request server shared by broker and controller.

Owns: accepting connections on one listener, framing (via the sans-IO
`FrameDecoder`), header validation, per-connection authentication state,
dispatch to handlers, and writing responses in request order. It must not
know what any API means: handlers do.

Requests on one connection run concurrently (so a parked long-poll does not
block a pipelined produce), but their responses are written in arrival
order, as Kafka's clients expect. When the connection dies, its in-flight
handlers are cancelled, so delayed produces and fetches die with it.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.sasl import SaslServerSession, server_credential
from minibroker.net.scram import ScramCredential
from minibroker.net.tcp import set_nodelay
from minibroker.protocol.api import HEADER, REQUESTS, ApiKey
from minibroker.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramingError, encode_frame
from minibroker.protocol.schema import SchemaError, validate

log = logging.getLogger("minibroker.net")

_NO_RESPONSE = object()


@dataclass
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


Handler = Callable[[RequestContext, dict[str, Any]], Awaitable[dict[str, Any] | None]]


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


class ServerConnection(asyncio.Protocol):
    """One client connection. Invariant: `_slots` holds one future per request
    received and not yet answered, in arrival order."""

    def __init__(self, dispatcher: Dispatcher, listener: str) -> None:
        self.dispatcher = dispatcher
        self.listener = listener
        self.sasl = SaslServerSession(dispatcher.credential)
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(dispatcher.max_frame_bytes)
        self._slots: deque[asyncio.Future] = deque()
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.closed_event = asyncio.Event()

    @property
    def authenticated(self) -> bool:
        return self.sasl.authenticated

    # -- asyncio.Protocol --------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.dispatcher.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            messages = self._decoder.feed(data)
        except FramingError as exc:
            self.abort(f"framing error: {exc}")
            return
        for msg in messages:
            self._on_request(msg)
            if self._closed:
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.closed_event.set()
        self.dispatcher.connections.discard(self)
        for t in list(self._tasks):
            t.cancel()
        self._slots.clear()

    def pause_writing(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.resume_reading()

    # -- requests ----------------------------------------------------------
    def abort(self, reason: str) -> None:
        log.warning("closing connection from %s on %s: %s", self.peer, self.listener, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def _on_request(self, msg: dict[str, Any]) -> None:
        try:
            header = validate(msg, HEADER)
        except SchemaError as exc:
            self.abort(f"bad request header: {exc}")
            return
        cid = header["id"]
        slot: asyncio.Future = asyncio.get_running_loop().create_future()
        self._slots.append(slot)
        try:
            api = ApiKey(header["api"])
        except ValueError:
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
        if not spec.versions[0] <= header["v"] <= spec.versions[1]:
            self._answer(slot, _error(cid, ErrorCode.UNSUPPORTED_VERSION, f"{api.name} v{header['v']}"))
            return
        if spec.privileged and not self.authenticated:
            self._answer(slot, _error(cid, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                      f"{api.name} needs an authenticated inter-broker connection"))
            return
        try:
            body = validate(msg, REQUESTS[api])
        except SchemaError as exc:
            self._answer(slot, _error(cid, ErrorCode.INVALID_REQUEST, str(exc)))
            return
        ctx = RequestContext(self, api, header["v"], cid, header["client"])
        task = asyncio.ensure_future(self._run(spec.fn, ctx, body, slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fn: Handler, ctx: RequestContext, body: dict[str, Any], slot: asyncio.Future) -> None:
        try:
            resp = await fn(ctx, body)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            resp = _error(ctx.correlation_id, exc.code, exc.message)
        except Exception:
            log.exception("handler for %s failed (client %s)", ctx.api.name, ctx.client_id)
            resp = _error(ctx.correlation_id, ErrorCode.UNKNOWN_SERVER_ERROR, "internal error, see broker log")
        if resp is None:
            self._answer(slot, _NO_RESPONSE)
        else:
            resp["id"] = ctx.correlation_id
            self._answer(slot, resp)

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
            if self.sasl.authenticated:
                log.info("authenticated %s from %s on %s (%s)", self.sasl.principal, self.peer, self.listener,
                         "SCRAM-SHA-256")
        return {"id": cid, **resp}

    def _fail_authentication(self, slot: asyncio.Future, resp: dict[str, Any]) -> None:
        """A failed SASL step: serve nothing more (later frames are read and dropped), answer after
        the delay, then close (Kafka's connection.failed.authentication.delay.ms), so that each
        guess costs a connection and a delay."""
        log.warning("failed authentication from %s on %s: %s", self.peer, self.listener, self.sasl.failure)
        self._closed = True

        def answer_and_close() -> None:
            t = self.transport
            if t is not None and not t.is_closing():
                t.write(encode_frame(resp))
                if t.can_write_eof():
                    t.write_eof()
                t.close()
        asyncio.get_running_loop().call_later(self.dispatcher.failed_auth_delay_ms / 1000, answer_and_close)

    def _answer(self, slot: asyncio.Future, resp: Any) -> None:
        if not slot.done():
            slot.set_result(resp)
        slots = self._slots
        out: list[bytes] = []
        while slots and slots[0].done():
            r = slots.popleft().result()
            if r is not _NO_RESPONSE:
                out.append(encode_frame(r))
        if out and not self._closed and self.transport is not None:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])


_BUILTIN = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


def _error(cid: int, code: ErrorCode | int, message: str = "") -> dict[str, Any]:
    return {"id": cid, "error": int(code), "message": message}


async def serve(dispatcher: Dispatcher, host: str, port: int, listener: str,
                ssl_context: ssl.SSLContext | None = None) -> asyncio.base_events.Server:
    """Listen on host:port; with `ssl_context`, the listener speaks TLS (security.protocol SSL)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: ServerConnection(dispatcher, listener), host, port,
                                    reuse_address=True, backlog=1024, ssl=ssl_context)
