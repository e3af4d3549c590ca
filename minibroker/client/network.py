"""The client's network: connections to brokers and metadata refreshes.

Owns: one `minibroker.net.connection.Connection` per (broker address,
channel), reconnect back-off per address, the bootstrap list, the
`MetadataCache` and the task that keeps it fresh (on request, on errors of
the InvalidMetadata family, and every `metadata.max.age.ms`).

Channels keep long-polls from blocking other traffic: the broker answers a
connection's requests in order, so a parked Fetch would hold back a
Metadata request behind it. "data" carries Produce/Fetch, "meta" carries
Metadata and admin calls, "events" the Events long-poll.

Must not know what Produce or Fetch mean; producer/consumer/admin do.
"""
from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import Any
from collections.abc import Callable

from minibroker.aio import wait_event
from minibroker import clock
from minibroker.client.config import parse_bootstrap
from minibroker.client.metadata import MetadataCache
from minibroker.client.retry import Backoff
from minibroker.config import Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.net.connection import Body, Callback, Connection, check
from minibroker.net.tls import client_context, plaintext_to_tls, speaks_tls
from minibroker.protocol.api import ApiKey

Address = tuple[str, int]


# How long a request any broker may answer waits before another broker is asked too.
HEDGE_MS = 1000
# Requests that change nothing, so a second broker may be asked while the first is silent. A
# CreateTopics hedged that way was answered TOPIC_ALREADY_EXISTS by the second broker when the first
# took over a second to create 1,000 partitions on a loaded machine.
HEDGEABLE = frozenset({ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER, ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_QUORUM,
                       ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.OFFSET_FETCH,
                       ApiKey.LIST_OFFSETS, ApiKey.API_VERSIONS})


def _rotated(xs: list[Address], k: int) -> list[Address]:
    if not xs:
        return xs
    k %= len(xs)
    return xs[k:] + xs[:k]


def now_ms() -> int:
    return clock.monotonic_ms()


class ClientNetwork:
    """Invariant: `_conns` holds only connections not known to be closed;
    a connection that failed a request is closed and dropped at once
    (responses on it could no longer be trusted to line up, as Kafka's
    NetworkClient disconnects on a request timeout)."""

    def __init__(self, cfg: Config, *, all_topics: bool = False) -> None:
        self.cfg = cfg
        self.bootstrap: list[Address] = parse_bootstrap(cfg.get("bootstrap.servers"))
        self.client_id = cfg.get("client.id")
        self.request_timeout_ms = cfg.get_int("request.timeout.ms")
        self.connect_timeout_s = cfg.get_int("socket.connection.setup.timeout.ms") / 1000
        self.ssl_context = client_context(cfg)
        self.cache = MetadataCache(metadata_max_age_ms=cfg.get_int("metadata.max.age.ms"),
                                   refresh_backoff_ms=cfg.get_int("retry.backoff.ms"), all_topics=all_topics)
        self._reconnect = Backoff(cfg.get_int("reconnect.backoff.ms"), cfg.get_int("reconnect.backoff.max.ms"))
        self._conns: dict[tuple[str, int, str], Connection] = {}
        self._connecting: dict[tuple[str, int, str], asyncio.Future] = {}
        # Invariant: a key is here while an attempt `ready_delay_ms` started runs; values are called when it ends.
        self._connect_waiters: dict[tuple[str, int, str], set[Callable[[], None]]] = {}
        self._failures: dict[Address, tuple[int, int]] = {}     # address -> (consecutive failures, retry at ms)
        self._refresh: asyncio.Future | None = None
        self._wake = asyncio.Event()
        self._updater: asyncio.Task | None = None
        self._rr = random.randrange(1 << 16)
        self.closed = False
        self.listeners: list[Callable[[], None]] = []          # called after each applied metadata update

    # -- connections -----------------------------------------------------------

    def address_of(self, node_id: int) -> Address:
        node = self.cache.node(node_id)
        if node is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
        return (node.host, node.port)

    async def connection(self, address: Address, channel: str = "data") -> Connection:
        key = (address[0], address[1], channel)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        if self.closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "client is closed")
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fails, retry_at = self._failures.get(address, (0, 0))
        if retry_at > now_ms():
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION,
                             f"{address[0]}:{address[1]}: in reconnect back-off after {fails} failure(s)")
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        try:
            conn = await Connection.open(address[0], address[1], client_id=self.client_id,
                                         timeout_s=self.connect_timeout_s, ssl_context=self.ssl_context)
        except KafkaError as exc:
            fails += 1
            self._failures[address] = (fails, now_ms() + self._reconnect.delay_ms(fails - 1, random.random()))
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            self._connecting.pop(key, None)
        self._failures.pop(address, None)
        conn.callback_failed = partial(self._callback_failed, conn, channel)
        self._conns[key] = conn
        fut.set_result(conn)
        return conn

    def connected(self, node_id: int, channel: str = "data") -> bool:
        """Whether a request to `node_id` would be written at once on a live connection."""
        return self.live_connection(node_id, channel) is not None

    def live_connection(self, node_id: int, channel: str = "data") -> Connection | None:
        """The live connection a request to `node_id` would be written on at once, or None. A callback
        request written on it directly (`Connection.send_request`) has its failures handled as
        `send_request` handles them: the connection's `callback_failed` is this network's."""
        node = self.cache.brokers.get(node_id)
        if node is None or self.closed:
            return None
        conn = self._conns.get((node.host, node.port, channel))
        return None if conn is None or conn.closed else conn

    def ready_delay_ms(self, node_id: int, wake: Callable[[], None], channel: str = "data") -> int:
        """Kafka's NetworkClient.ready and connectionDelay in one, asked by the producer's sender
        before it drains batches for `node_id`: 0 when a request would be written at once (a live
        connection, or nothing to wait for: an unknown node or a closed client fail in `request`).
        Otherwise starts connecting unless an attempt is under way or the address is in reconnect
        back-off, and returns how long to wait (2**31: until `wake`, called when the attempt ends).
        Draining only for connected nodes keeps one connection's requests in drain order: a request
        that waited for a connection could otherwise be written after one drained later."""
        if self.closed:
            return 0
        node = self.cache.node(node_id)
        if node is None:
            return 0
        address = (node.host, node.port)
        key = (node.host, node.port, channel)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return 0
        waiting = self._connect_waiters.get(key)
        if waiting is not None:            # an attempt is under way and will wake its waiters
            waiting.add(wake)
            return 2**31
        attempt = self._connecting.get(key)      # one a request started
        if attempt is None:
            retry_at = self._failures.get(address, (0, 0))[1]
            if retry_at > now_ms():
                return retry_at - now_ms()
            attempt = asyncio.ensure_future(self.connection(address, channel))
        self._connect_waiters[key] = {wake}
        attempt.add_done_callback(lambda f: self._connect_done(f, key))
        return 2**31

    def _connect_done(self, attempt: asyncio.Future, key: tuple[str, int, str]) -> None:
        if attempt.cancelled() or attempt.exception() is not None:
            self.request_update()          # as Kafka's NetworkClient on a failed connection
        for wake in self._connect_waiters.pop(key, ()):
            wake()

    def _drop(self, conn: Connection, channel: str) -> None:
        conn.close()
        key = (conn.host, conn.port, channel)
        if self._conns.get(key) is conn:
            del self._conns[key]

    async def request_address(self, address: Address, api: ApiKey | int, body: Body, *,
                              channel: str = "data", timeout_ms: int | None = None) -> dict[str, Any]:
        conn = await self.connection(address, channel)
        try:
            return await conn.request(api, body, timeout_ms=timeout_ms or self.request_timeout_ms)
        except KafkaError as exc:
            self._drop(conn, channel)
            if self.ssl_context is None and exc.code == ErrorCode.NETWORK_EXCEPTION and not conn.received_any \
                    and await speaks_tls(address[0], address[1], self.connect_timeout_s):
                raise plaintext_to_tls(address[0], address[1]) from None
            raise

    async def request(self, node_id: int, api: ApiKey | int, body: Body, *,
                      channel: str = "data", timeout_ms: int | None = None) -> dict[str, Any]:
        """One request to one broker; a transport failure also asks for a metadata refresh."""
        try:
            return await self.request_address(self.address_of(node_id), api, body,
                                              channel=channel, timeout_ms=timeout_ms)
        except KafkaError:
            self.request_update()
            raise

    def send_request(self, node_id: int, api: ApiKey | int, body: Body, on_done: Callback, *,
                     channel: str = "data", timeout_ms: int | None = None) -> None:
        """`request` for a caller that takes the answer in a callback (the producer's sender).
        Written at once on a live connection: `on_done(response, None)` then runs in the read
        callback that decodes the answer. Failures (handled as `request` handles them: the
        connection dropped, a metadata refresh asked for) reach `on_done(None, error)` in a
        later loop turn; so does everything when there is no live connection yet."""
        node = self.cache.brokers.get(node_id)
        conn = None if node is None or self.closed else self._conns.get((node.host, node.port, channel))
        if conn is None or conn.closed:
            asyncio.ensure_future(self._request_to_callback(node_id, api, body, on_done, channel, timeout_ms))
            return
        conn.send_request(api, body, on_done, timeout_ms=timeout_ms or self.request_timeout_ms)

    def _callback_failed(self, conn: Connection, channel: str, on_done: Callback, error: KafkaError) -> None:
        """A callback request on `conn` (ours, for `channel`) timed out or lost its connection."""
        self._drop(conn, channel)
        if self.ssl_context is None and error.code == ErrorCode.NETWORK_EXCEPTION and not conn.received_any:
            asyncio.ensure_future(self._tls_check_then(conn, error, on_done))
            return
        self.request_update()
        on_done(None, error)

    async def _tls_check_then(self, conn: Connection, error: KafkaError, on_done: Callback) -> None:
        """A connection closed before its first byte: the broker may speak TLS (as `request_address`)."""
        if await speaks_tls(conn.host, conn.port, self.connect_timeout_s):
            error = plaintext_to_tls(conn.host, conn.port)
        self.request_update()
        on_done(None, error)

    async def _request_to_callback(self, node_id: int, api: ApiKey | int, body: Body, on_done: Callback,
                                   channel: str, timeout_ms: int | None) -> None:
        try:
            resp = await self.request(node_id, api, body, channel=channel, timeout_ms=timeout_ms)
        except KafkaError as exc:
            on_done(None, exc)
            return
        on_done(resp, None)

    async def send_no_response(self, node_id: int, api: ApiKey, body: Body) -> None:
        conn = await self.connection(self.address_of(node_id), "data")
        try:
            conn.send_no_response(api, body)
        except KafkaError:
            self._drop(conn, "data")
            self.request_update()
            raise

    def candidates(self) -> list[Address]:
        """Where to send a request any broker can answer: known brokers in rotation, then
        the bootstrap list. Rotating (rather than sticking to one connected broker) keeps a
        broker with stale metadata, e.g. one cut off from the controller, from being the
        only one asked; the cache then keeps the answer with the highest leader epoch."""
        self._rr += 1
        known = _rotated([(b.host, b.port) for b in self.cache.brokers.values()], self._rr)
        return known + [a for a in _rotated(self.bootstrap, self._rr) if a not in known]

    async def request_any(self, api: ApiKey, body: dict[str, Any], *,
                          timeout_ms: int | None = None) -> tuple[Address, dict[str, Any]]:
        """Send to the first broker that answers; returns (its address, the response).

        Hedged for the read-only APIs (HEDGEABLE): if a broker has not answered
        within HEDGE_MS (a frozen broker accepts TCP connections but never
        replies), the next candidate is asked too, and the first answer wins.
        Kafka's client instead waits out request.timeout.ms on that one broker
        (30 s) before trying another, as every other request does here: one that
        changes something is sent to a second broker only after the first failed."""
        hedge_s = HEDGE_MS / 1000 if api in HEDGEABLE else None
        candidates = iter(self.candidates())
        pending: dict[asyncio.Future, Address] = {}
        last: BaseException | None = None

        def launch() -> bool:
            addr = next(candidates, None)
            if addr is None:
                return False
            fut = asyncio.ensure_future(self.request_address(addr, api, body, channel="meta", timeout_ms=timeout_ms))
            pending[fut] = addr
            return True

        launch()
        try:
            while pending:
                done, _ = await asyncio.wait(pending, timeout=hedge_s, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    launch()
                    continue
                for fut in done:
                    addr = pending.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        return addr, fut.result()
                    last = exc
                if not pending:
                    launch()
        finally:
            for fut in pending:
                fut.cancel()
        if isinstance(last, KafkaError):
            raise last
        raise KafkaError(ErrorCode.NETWORK_EXCEPTION, f"no broker answered: {last or 'no candidates'}")

    # -- metadata --------------------------------------------------------------

    def request_update(self) -> None:
        self.cache.request_update()
        self._wake.set()

    def want_topics(self, topics: list[str] | set[str]) -> None:
        if self.cache.want(topics):
            self._wake.set()

    async def refresh_metadata(self) -> None:
        """Fetch metadata now (joining a refresh already under way); raises if no broker answers."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._do_refresh())
            self._refresh.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.shield(self._refresh)

    async def _do_refresh(self) -> None:
        self.cache.attempt(now_ms())
        try:
            _, resp = await self.request_any(ApiKey.METADATA, {"topics": self.cache.request_topics()})
            check(resp)
        except KafkaError:
            self.cache.failed_update(now_ms())
            raise
        self.cache.update(resp, now_ms())
        for fn in list(self.listeners):
            fn()

    def start(self) -> None:
        """Start the background task that refreshes metadata when due."""
        if self._updater is None:
            self._updater = asyncio.ensure_future(self._run_updater())

    async def _run_updater(self) -> None:
        while not self.closed:
            delay = self.cache.time_to_next_update(now_ms())
            if delay > 0:
                self._wake.clear()
                await wait_event(self._wake, delay / 1000)
                continue
            try:
                await self.refresh_metadata()
            except KafkaError:
                pass
            except asyncio.CancelledError:
                raise

    async def wait_for(self, predicate: Callable[[], bool], timeout_ms: int, what: str) -> None:
        """Refresh metadata until `predicate()` holds; TimeoutError names `what`."""
        deadline = now_ms() + timeout_ms
        last_error: KafkaError | None = None
        while True:
            if predicate():
                return
            try:
                await self.refresh_metadata()
                last_error = None
            except KafkaError as exc:
                last_error = exc
            if predicate():
                return
            left = deadline - now_ms()
            if left <= 0:
                detail = f" (last error: {last_error})" if last_error else ""
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"{what} not present in metadata after {timeout_ms} ms{detail}")
            await asyncio.sleep(min(left, self.cache.refresh_backoff_ms) / 1000)

    async def close(self) -> None:
        self.closed = True
        if self._updater is not None:
            self._updater.cancel()
            try:
                await self._updater
            except (asyncio.CancelledError, Exception):
                pass
            self._updater = None
        if self._refresh is not None and not self._refresh.done():
            self._refresh.cancel()
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()
