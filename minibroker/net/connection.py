"""A client connection: correlation ids, one reader, a timeout per request.

Owns one TCP connection to a broker or controller. Responses are matched to
requests by correlation id; every pending request is failed (retriably, with
NETWORK_EXCEPTION) when the connection closes, and each request has its own
timeout (REQUEST_TIMED_OUT). It must not know what any API means. Used by
the client library, follower fetchers and the broker's controller channel.
"""
from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Any

from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.sasl import authenticate
from minibroker.net.tcp import set_nodelay
from minibroker.net.tls import speaks_plaintext, tls_handshake_failed, tls_to_plaintext
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramingError, encode_frame


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        self.conn._on_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn._on_lost(exc)


class Connection:
    """Invariant: `_pending` maps every correlation id sent and not yet
    answered, failed or timed out to its future."""

    def __init__(self, host: str, port: int, client_id: str, max_frame_bytes: int) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._decoder = FrameDecoder(max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self.close_reason = ""
        self.received_any = False     # a peer that closes before sending a byte may speak TLS (net/tls.py)
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

    def _frame(self, api: ApiKey | int, body: dict[str, Any]) -> tuple[int, bytes]:
        if self.closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION,
                             f"connection to {self.address} is closed: {self.close_reason}")
        cid = next(self._ids)
        msg = {"api": int(api), "v": 0, "id": cid, "client": self.client_id}
        msg.update(body)
        return cid, encode_frame(msg)

    async def request(self, api: ApiKey | int, body: dict[str, Any], *, timeout_ms: int = 30_000) -> dict[str, Any]:
        """Send one request and wait for its response (or a KafkaError)."""
        cid, frame = self._frame(api, body)
        loop = self._loop or asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[cid] = fut
        timer = loop.call_later(timeout_ms / 1000, self._time_out, cid, timeout_ms)
        try:
            assert self._transport is not None
            self._transport.write(frame)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(cid, None)

    def send_no_response(self, api: ApiKey | int, body: dict[str, Any]) -> None:
        """For acks=0 produces: the server sends nothing back."""
        _, frame = self._frame(api, body)
        assert self._transport is not None
        self._transport.write(frame)

    def _time_out(self, cid: int, timeout_ms: int) -> None:
        fut = self._pending.pop(cid, None)
        if fut is not None and not fut.done():
            fut.set_exception(KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                         f"no response from {self.address} within {timeout_ms} ms"))

    def _on_data(self, data: bytes) -> None:
        self.received_any = True
        try:
            messages = self._decoder.feed(data)
        except FramingError as exc:
            self._fail_all(f"bad frame from server: {exc}")
            if self._transport is not None:
                self._transport.close()
            return
        for msg in messages:
            fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(msg)

    def _on_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost{': ' + str(exc) if exc else ''}")

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        self.close_reason = reason
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(KafkaError(ErrorCode.NETWORK_EXCEPTION, f"{self.address}: {reason}"))

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
