"""Socket options shared by every minibroker connection, client or server side."""
from __future__ import annotations

import asyncio
import socket


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle off on `transport`'s socket: requests and responses are whole
    frames written at once, so waiting to coalesce them only adds latency.
    Best effort: a transport without a socket, or one that refuses, is left as is."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
