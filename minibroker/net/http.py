"""A small GET-only HTTP/1.1 server on the event loop, for /metrics and the watch page.

Owns: accepting connections on one address, reading one bounded request
head per connection (size and time limits, so no client can hold the loop
or grow memory), routing GET paths to handlers, and writing either one
whole response or a stream (server-sent events) until the client leaves.
Every response closes its connection afterwards (`Connection: close`).
Must not know what any page or metric means: routes do.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("minibroker.http")

MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64


@dataclass(frozen=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


# A route answers with one Response, or with an async iterator of byte chunks (a stream).
Route = Callable[[], Awaitable[Response | AsyncIterator[bytes]]]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def _head(status: int, content_type: str, length: int | None, extra: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {content_type}",
             "Connection: close", "Cache-Control: no-store"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class HttpServer:
    """Invariant: at most MAX_CONNECTIONS connections are served at once; others are
    answered 503 and closed at once."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True,
                                                  limit=MAX_HEAD_BYTES)
        h, p = self._server.sockets[0].getsockname()[:2]
        self.address = (h, p)
        return self.address

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except (TimeoutError, Exception):
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._tasks) >= MAX_CONNECTIONS:
            writer.write(_head(503, "text/plain", 0))
            writer.close()
            return
        self._tasks.add(task)
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("http request failed")
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            writer.write(_head(431, "text/plain", 0))
            return
        if len(head) > MAX_HEAD_BYTES:
            writer.write(_head(431, "text/plain", 0))
            return
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3:
            writer.write(_head(400, "text/plain", 0))
            return
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            writer.write(_head(405, "text/plain", 0, "Allow: GET, HEAD"))
            return
        route = self.routes.get(target)
        if route is None:
            body = b"not found\n"
            writer.write(_head(404, "text/plain; charset=utf-8", len(body)) + body)
            return
        answer = await route()
        if isinstance(answer, Response):
            writer.write(_head(answer.status, answer.content_type, len(answer.body))
                         + (b"" if method == "HEAD" else answer.body))
            await writer.drain()
            return
        writer.write(_head(200, "text/event-stream; charset=utf-8", None))
        try:
            async for chunk in answer:
                writer.write(chunk)
                await writer.drain()
        finally:
            aclose = getattr(answer, "aclose", None)
            if aclose is not None:
                await aclose()
