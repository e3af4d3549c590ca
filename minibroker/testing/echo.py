"""A TCP echo server: the far end of a fault-proxy route in proxy tests."""
from __future__ import annotations

import asyncio


async def echo_server(host: str = "127.0.0.1") -> tuple[asyncio.base_events.Server, int]:
    """Start a server that writes back every byte it reads; returns (server, port)."""
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except ConnectionError:
            pass
        finally:
            w.close()
    srv = await asyncio.start_server(handle, host, 0)
    return srv, srv.sockets[0].getsockname()[1]
