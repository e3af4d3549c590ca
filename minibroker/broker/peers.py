"""Connections from this broker to other brokers (follower fetches).

Owns: one authenticated connection per peer broker, to that broker's
endpoint on `inter.broker.listener.name` as the metadata image says,
reopened when it has closed or when the peer re-registered elsewhere.

Must not know: what travels on the connections (the fetchers decide).
"""
from __future__ import annotations

import asyncio
import ssl

from minibroker.broker.metadata_image import MetadataImage
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Connection


class InterBrokerConnections:
    """Invariant: `_conns[b]` was opened to the endpoint broker `b` advertised
    on `listener` at the time, and is replaced once closed or moved."""

    def __init__(self, *, node_id: int, image: MetadataImage, listener: str, secret: str,
                 max_frame_bytes: int, connect_timeout_ms: int = 5000,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.node_id = node_id
        self.image = image
        self.listener = listener
        self.secret = secret
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self._conns: dict[int, Connection] = {}
        # Invariant: `_checked[b]`, when present, is a record of broker b from the image that advertised
        # the endpoint `_conns[b]` was opened to (as `current` last found it).
        self._checked: dict[int, object] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._closed = False

    async def get(self, broker_id: int) -> Connection:
        """An open, authenticated connection to `broker_id`; raises a KafkaError
        (BROKER_NOT_AVAILABLE when the image has no such endpoint,
        NETWORK_EXCEPTION when it cannot be reached)."""
        if self._closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "broker is shutting down")
        conn = self.current(broker_id)
        if conn is not None:
            return conn
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        async with lock:
            ep = self.image.endpoint(broker_id, self.listener)
            if ep is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE,
                                 f"broker {broker_id} has no {self.listener} endpoint in metadata")
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed and (conn.host, conn.port) == ep:
                return conn
            if conn is not None:
                conn.close()
            conn = await Connection.open(ep[0], ep[1], client_id=f"broker-{self.node_id}-replica",
                                         secret=self.secret, timeout_s=self.connect_timeout_ms / 1000,
                                         max_frame_bytes=self.max_frame_bytes, ssl_context=self.ssl_context)
            if self._closed:
                conn.close()
                raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "broker is shutting down")
            self._conns[broker_id] = conn
            self._checked.pop(broker_id, None)
            return conn

    def current(self, broker_id: int) -> Connection | None:
        """The steady state of `get` (a fetcher's every Fetch), without a coroutine or a lock: the
        open connection to `broker_id` while the image still advertises the endpoint it was opened
        to, else None (then `get`)."""
        conn = self._conns.get(broker_id)
        if conn is None or conn.closed or self._closed:
            return None
        record = self.image.brokers.get(broker_id)
        if record is not None and record is self._checked.get(broker_id):
            return conn                                   # the image's record of the broker has not moved
        ep = self.image.endpoint(broker_id, self.listener)
        if ep is None or (conn.host, conn.port) != ep:
            return None
        self._checked[broker_id] = record
        return conn

    def drop(self, broker_id: int) -> None:
        """Close the connection to `broker_id` (e.g. after a timeout); the next get reopens it."""
        conn = self._conns.pop(broker_id, None)
        self._checked.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._closed = True
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
