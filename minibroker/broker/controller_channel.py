"""The broker's side of the broker-controller conversation.

Owns: the authenticated connections to the controller
(`controller.quorum.bootstrap.servers`), the broker's lifecycle towards the
controller (registration, heartbeats, fencing, controlled shutdown; Kafka's
BrokerLifecycleManager), following the controller's metadata log into the
`MetadataImage`, the AlterPartitionManager (Kafka I5), and forwarding of
admin requests (KIP-590).

Must not know: partitions' replication state, logs, or what the data path
does with metadata (it hands each applied delta to a callback).

Split as h11: `BrokerLifecycle` (minibroker.broker.lifecycle) and
`AlterPartitionQueue` (minibroker.broker.alter_partition_queue) are pure
state machines (no asyncio, no sockets, no clock); `ControllerChannel`,
`ControllerLink` and `AlterPartitionManager` carry events in and decisions
out. Separate connections carry the metadata long-poll, the heartbeats, the
AlterPartition requests and forwarded admin requests, so a parked request on
one never delays another (responses on one connection come back in order).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any
from collections.abc import Callable

from minibroker.aio import wait_event
from minibroker.broker.alter_partition_queue import AlterPartitionItem, AlterPartitionQueue, PartitionKey
from minibroker.broker.lifecycle import BrokerLifecycle, BrokerState, HeartbeatOutcome
from minibroker.clock import now_ms
from minibroker.broker.metadata_image import MetadataDelta, MetadataError, MetadataImage
from minibroker.config import Config, parse_hostport
from minibroker.errors import ErrorCode, KafkaError, error_name
from minibroker.events import Event, EventSink
from minibroker.net.connection import Connection
from minibroker.net.credentials import cluster_secret
from minibroker.net.tls import controller_context
from minibroker.protocol.api import ApiKey

log = logging.getLogger("minibroker.broker.controller")

# Re-exported: the pure cores this module drives.
__all__ = ["AlterPartitionItem", "AlterPartitionManager", "AlterPartitionQueue", "BrokerLifecycle", "BrokerState",
           "ControllerChannel", "ControllerLink", "HeartbeatOutcome", "PartitionKey"]

# Errors on which a request is not worth resending as is.
_FATAL_TOP_LEVEL = frozenset({ErrorCode.UNSUPPORTED_VERSION, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              ErrorCode.INVALID_REQUEST})

ALTER_PARTITION_RETRY_MS = 50          # Kafka I5: retry after a top-level error
RECONNECT_BACKOFF_MS = 50              # Kafka reconnect.backoff.ms
RECONNECT_BACKOFF_MAX_MS = 1000        # Kafka reconnect.backoff.max.ms


# --------------------------------------------------------------------------
# Drivers
# --------------------------------------------------------------------------

class Backoff:
    """Exponential reconnect back-off, reset on success (Kafka reconnect.backoff.*).
    `first` is True for the first failure of a streak (logged at INFO; the rest at DEBUG)."""

    def __init__(self, initial_ms: int = RECONNECT_BACKOFF_MS, max_ms: int = RECONNECT_BACKOFF_MAX_MS) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.next_ms = initial_ms

    def reset(self) -> None:
        self.next_ms = self.initial_ms

    @property
    def first(self) -> bool:
        return self.next_ms == self.initial_ms

    def level(self) -> int:
        return logging.INFO if self.first else logging.DEBUG

    def step(self) -> int:
        d = self.next_ms
        self.next_ms = min(self.max_ms, self.next_ms * 2)
        return d


def controller_servers(config: Config) -> list[tuple[str, int]]:
    servers = [parse_hostport(s, 9093) for s in config.get_list("controller.quorum.bootstrap.servers")]
    if not servers:
        raise KafkaError(ErrorCode.INVALID_CONFIG, "controller.quorum.bootstrap.servers is empty")
    return servers


class ControllerLink:
    """One authenticated connection to the controller, reopened on demand.
    Invariant: `_conn` is None or a connection that was open when last used."""

    def __init__(self, servers: list[tuple[str, int]], secret: str, client_id: str,
                 max_frame_bytes: int, connect_timeout_ms: int = 5000,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.servers = servers
        self.secret = secret
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self._server = 0
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> Connection:
        async with self._lock:
            if self._conn is not None and not self._conn.closed:
                return self._conn
            host, port = self.servers[self._server % len(self.servers)]
            try:
                self._conn = await Connection.open(host, port, client_id=self.client_id, secret=self.secret,
                                                   timeout_s=self.connect_timeout_ms / 1000,
                                                   max_frame_bytes=self.max_frame_bytes,
                                                   ssl_context=self.ssl_context)
            except KafkaError:
                self._server += 1
                raise
            return self._conn

    async def request(self, api: ApiKey, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        """Send one request; transport errors (NETWORK_EXCEPTION, REQUEST_TIMED_OUT)
        close the connection so the next call reconnects."""
        conn = await self._connection()
        try:
            return await conn.request(api, body, timeout_ms=timeout_ms)
        except KafkaError as exc:
            if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                self._drop(conn)
            raise

    def _drop(self, conn: Connection) -> None:
        conn.close()
        if self._conn is conn:
            self._conn = None
            self._server += 1

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class AlterPartitionManager:
    """Carries ISR proposals to the controller: one request in flight, every
    partition queued meanwhile batched into the next (Kafka I5); top-level and
    transport errors resend the same proposals after 50 ms."""

    def __init__(self, link: ControllerLink, broker_id: int, broker_epoch: Callable[[], int],
                 request_timeout_ms: int = 30_000, retry_ms: int = ALTER_PARTITION_RETRY_MS) -> None:
        self.link = link
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.request_timeout_ms = request_timeout_ms
        self.retry_ms = retry_ms
        self.queue = AlterPartitionQueue()
        self.requests_sent = 0
        self.failures = 0                  # consecutive failed sends (for quiet logging)
        self._futures: dict[PartitionKey, asyncio.Future] = {}
        self._task: asyncio.Task | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False

    async def submit(self, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                     new_isr_with_epochs: list[dict], leader_recovery_state: int = 0) -> dict:
        """Triggered by a leader's ISR decision. Returns the controller's
        per-partition result; raises KafkaError(OPERATION_NOT_ATTEMPTED) when a
        change for this partition is already queued or in flight, or a
        non-retriable error when the request cannot be sent at all."""
        if self._closed:
            raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "broker is shutting down")
        item = AlterPartitionItem(topic, partition, leader_epoch, partition_epoch,
                                  [dict(e) for e in new_isr_with_epochs], leader_recovery_state)
        if not self.queue.submit(item):
            raise KafkaError(ErrorCode.OPERATION_NOT_ATTEMPTED,
                             f"an ISR change for {topic}-{partition} is already queued")
        fut = asyncio.get_running_loop().create_future()
        self._futures[(topic, partition)] = fut
        self._maybe_send()
        return await asyncio.shield(fut)

    def _maybe_send(self) -> None:
        self._retry = None
        if self._closed or self._task is not None:
            return
        epoch = self.broker_epoch()
        if epoch < 0:
            self._schedule_retry()
            return
        body = self.queue.maybe_build_request(self.broker_id, epoch)
        if body is not None:
            self.requests_sent += 1
            self._task = asyncio.ensure_future(self._send(body))

    def _schedule_retry(self) -> None:
        if self._retry is None and not self._closed:
            self._retry = asyncio.get_running_loop().call_later(self.retry_ms / 1000, self._maybe_send)

    async def _send(self, body: dict[str, Any]) -> None:
        try:
            try:
                resp = await self.link.request(ApiKey.ALTER_PARTITION, body, self.request_timeout_ms)
            except KafkaError as exc:
                self.failures += 1
                log.log(logging.INFO if self.failures == 1 else logging.DEBUG,
                        "AlterPartition to controller failed (%s); resending in %d ms", exc, self.retry_ms)
                self.queue.on_failure()
                self._schedule_retry()
                return
            code = resp.get("error", 0)
            if not code:
                self.failures = 0
            if code and code in _FATAL_TOP_LEVEL:
                err = KafkaError(code, resp.get("message", ""), remote=True)
                for key in self.queue.on_fatal():
                    self._complete(key, exc=err)
            elif code:
                self.failures += 1
                log.log(logging.INFO if self.failures == 1 else logging.DEBUG,
                        "AlterPartition refused as a whole (%s); resending in %d ms", error_name(code), self.retry_ms)
                self.queue.on_failure()
                self._schedule_retry()
                return
            else:
                for key, result in self.queue.on_response(resp):
                    self._complete(key, result=result)
        finally:
            self._task = None
        self._maybe_send()

    def _complete(self, key: PartitionKey, *, result: dict | None = None, exc: Exception | None = None) -> None:
        fut = self._futures.pop(key, None)
        if fut is None or fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    async def close(self) -> None:
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        err = KafkaError(ErrorCode.NETWORK_EXCEPTION, "broker is shutting down")
        for key in self.queue.drain():
            self._complete(key, exc=err)
        for key in list(self._futures):
            self._complete(key, exc=err)


class ControllerChannel:
    """Runs the heartbeat loop and the metadata follower loop, and forwards admin requests.

    `on_delta(delta)` is called after each applied MetadataFetch response;
    `on_events(events)` receives lifecycle events (and is the place the
    process learns of state changes)."""

    def __init__(self, *, config: Config, node_id: int, image: MetadataImage, lifecycle: BrokerLifecycle,
                 on_delta: Callable[[MetadataDelta], None], events: EventSink,
                 metadata_offset: Callable[[MetadataImage], int] | None = None) -> None:
        self.config = config
        self.node_id = node_id
        self.image = image
        self.lifecycle = lifecycle
        self.on_delta = on_delta
        self.events = events
        self.heartbeat_interval_ms = config.get_int("broker.heartbeat.interval.ms")
        self.session_timeout_ms = config.get_int("broker.session.timeout.ms")
        self.metadata_max_wait_ms = int(config.get("minibroker.metadata.fetch.max.wait.ms", "500"))
        # Heartbeats carry the offset of the last applied record (-1 if none), as Kafka's.
        self._metadata_offset = metadata_offset or (lambda img: img.offset - 1)
        servers = controller_servers(config)
        secret = cluster_secret(config)
        max_frame = config.get_int("socket.request.max.bytes")
        tls = controller_context(config)

        def link(purpose: str) -> ControllerLink:
            return ControllerLink(servers, secret, f"broker-{node_id}-{purpose}", max_frame, ssl_context=tls)

        self._control = link("lifecycle")
        self._metadata = link("metadata")
        self._forward = link("forward")
        self.alter_partition = AlterPartitionManager(link("alter-partition"), node_id, lambda: lifecycle.broker_epoch)
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()          # set on every lifecycle change or applied metadata batch
        self._closed = False
        self.metadata_errors = 0

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._heartbeat_loop()),
                       asyncio.ensure_future(self._metadata_loop())]

    def _emit(self, events: list[Event]) -> None:
        for e in events:
            self.events(e)
        if events:
            self.notify()

    def notify(self) -> None:
        """Wake every `wait_for` to re-check its condition."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, cond: Callable[[], bool], timeout_ms: int | None = None) -> bool:
        """Wait until `cond()` holds (re-checked after each lifecycle change or metadata batch)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while not cond():
            if self._closed:
                return False
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            if not await wait_event(self._changed, remaining):     # (wait_for can swallow a cancel on 3.11)
                return cond()
        return True

    def set_ready_to_unfence(self) -> None:
        self._emit(self.lifecycle.set_ready_to_unfence(now_ms()))
        self._wake.set()

    def begin_controlled_shutdown(self, reason: str) -> None:
        self._emit(self.lifecycle.begin_controlled_shutdown(now_ms(), reason))
        self._wake.set()

    def begin_shutdown(self, reason: str) -> None:
        self._emit(self.lifecycle.begin_shutdown(now_ms(), reason))

    async def close(self) -> None:
        self._closed = True
        self.notify()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.alter_partition.close()
        for link in (self._control, self._metadata, self._forward, self.alter_partition.link):
            link.close()

    # -- forwarding (KIP-590) --------------------------------------------------
    async def forward(self, api: ApiKey, body: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        """Send an admin request to the controller and return its response
        body; a transport failure is a retriable KafkaError for the client."""
        try:
            resp = await self._forward.request(api, body, timeout_ms)
        except KafkaError as exc:
            if exc.code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT if exc.code is ErrorCode.REQUEST_TIMED_OUT
                                 else ErrorCode.NOT_CONTROLLER,
                                 f"forwarding {api.name} to the controller failed: {exc.message}") from None
            raise
        resp.pop("id", None)
        return resp

    async def describe_cluster(self) -> dict[str, Any]:
        return await self.forward(ApiKey.DESCRIBE_CLUSTER, {}, 5000)

    # -- loops -------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        backoff = Backoff()
        lc = self.lifecycle
        while not self._closed:
            if lc.state is BrokerState.SHUTTING_DOWN:
                return
            if lc.needs_registration:
                try:
                    resp = await self._control.request(ApiKey.BROKER_REGISTRATION, lc.registration_request(),
                                                       self.session_timeout_ms)
                    self._emit(lc.on_registration_response(resp, now_ms()))
                    if resp.get("cluster_id"):
                        self.image.cluster_id = resp["cluster_id"]
                    backoff.reset()
                    if self.image.controller_id < 0:
                        self._tasks.append(asyncio.ensure_future(self._learn_cluster()))
                except KafkaError as exc:
                    lvl, delay = backoff.level(), backoff.step()
                    log.log(lvl, "broker registration failed (%s); retrying in %d ms", exc, delay)
                    await self._sleep(delay)
                    continue
            body = lc.heartbeat_request(self._metadata_offset(self.image))
            self._wake.clear()
            try:
                resp = await self._control.request(ApiKey.BROKER_HEARTBEAT, body, self.session_timeout_ms)
            except KafkaError as exc:
                lvl, delay = backoff.level(), backoff.step()
                log.log(lvl, "heartbeat to controller failed (%s); retrying in %d ms", exc, delay)
                await self._sleep(delay)
                continue
            backoff.reset()
            outcome, events = lc.on_heartbeat_response(resp, now_ms())
            self._emit(events)
            if outcome is HeartbeatOutcome.REGISTER:
                log.info("controller answered %s for broker epoch %d; registering again",
                         error_name(resp.get("error", 0)), body["broker_epoch"])
                if lc.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
                    self._emit(lc.begin_shutdown(now_ms(), "controller forgot this broker during shutdown"))
                    return
                continue
            if outcome is HeartbeatOutcome.RETRY:
                log.info("heartbeat refused: %s %s", error_name(resp.get("error", 0)), resp.get("message", ""))
            await self._sleep(lc.next_heartbeat_delay_ms(self.heartbeat_interval_ms), wakeable=True)

    async def _learn_cluster(self) -> None:
        try:
            d = await self.describe_cluster()
        except KafkaError:
            return
        if not d.get("error", 0):
            self.image.cluster_id = d.get("cluster_id", "") or ""
            self.image.controller_id = int(d.get("controller_id", -1))

    async def _sleep(self, ms: int, wakeable: bool = False) -> None:
        if not wakeable:
            await asyncio.sleep(ms / 1000)
            return
        await wait_event(self._wake, ms / 1000)

    async def _metadata_loop(self) -> None:
        backoff = Backoff()
        while not self._closed:
            body = {"broker_id": self.node_id, "from_offset": self.image.offset,
                    "max_wait_ms": self.metadata_max_wait_ms}
            try:
                resp = await self._metadata.request(ApiKey.METADATA_FETCH, body,
                                                    self.metadata_max_wait_ms + self.session_timeout_ms)
                code = resp.get("error", 0)
                if code:
                    raise KafkaError(code, resp.get("message", ""), remote=True)
                delta = self.image.apply_wire(resp.get("records") or [], resp.get("snapshot"),
                                              int(resp["next_offset"]))
            except (KafkaError, MetadataError, KeyError, TypeError, ValueError) as exc:
                self.metadata_errors += 1
                if isinstance(exc, KafkaError) and exc.code is ErrorCode.REQUEST_TIMED_OUT and backoff.first:
                    # The long-poll outlived its timeout (e.g. the process was paused): the
                    # connection is already dropped; ask again at once rather than serve stale metadata.
                    backoff.step()
                    continue
                lvl, delay = backoff.level(), backoff.step()
                log.log(lvl, "metadata fetch from offset %d failed (%s); retrying in %d ms",
                        body["from_offset"], exc, delay)
                await asyncio.sleep(delay / 1000)
                continue
            backoff.reset()
            if resp.get("cluster_id"):
                self.image.cluster_id = resp["cluster_id"]
            try:
                self.on_delta(delta)
            except Exception:
                log.exception("applying metadata delta at offset %d failed", self.image.offset)
            self.notify()
            if self.lifecycle.state is BrokerState.STARTING and not self.lifecycle.caught_up:
                self._wake.set()        # let the controller see our progress promptly
