"""The broker process: startup, request handlers, controlled shutdown.

Owns: the listeners, the Dispatcher and its handlers, the order in which
the broker's parts start and stop (Kafka's BrokerServer), the clean-shutdown
marker in log.dirs (KIP-966 previous broker epoch), and answering Metadata
from the metadata image.

Must not know: replication rules (the ReplicaManager), how records are
stored (the LogManager), the controller protocol's details beyond what
ControllerChannel exposes.

Startup, as Kafka's KRaft broker: open the listeners (ApiVersions answers
from the first moment, reporting the state), register and catch up with the
metadata log (STARTING), recover the logs and hand the metadata to the
replica manager (RECOVERY), then ask to be unfenced; requests other than
ApiVersions, ReplicaStatus and Events wait until the controller has unfenced
the broker (RUNNING). SIGTERM/SIGINT run a controlled shutdown: heartbeats
say want_shut_down until the controller answers should_shut_down (it moves
leadership away first) or a timeout, then everything stops in reverse order
and the clean-shutdown marker is written.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
from typing import Any
from collections.abc import Awaitable, Callable

import minibroker
from minibroker.clock import now_ms
from minibroker.broker.controller_channel import BrokerLifecycle, BrokerState, ControllerChannel
from minibroker.broker.eventlog import EventLog
from minibroker.broker.metadata_image import MetadataDelta, MetadataImage
from minibroker.broker.producer_ids import ProducerIdAllocator
from minibroker.broker.peers import InterBrokerConnections
from minibroker.broker import tail
from minibroker.config import Config, ConfigError, parse_listeners
from minibroker.coordinator.handlers import group_handlers
from minibroker.coordinator.service import GroupCoordinator
from minibroker.limits import clamp_batch_size
from minibroker.dynamic_config import ResourceType, broker_entries, default_entries, entry_to_wire, topic_entries
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event
from minibroker.kafka.handlers import KafkaApis
from minibroker.kafka.server import KafkaConnection, serve_kafka
from minibroker.metadata import CLUSTER_DEFAULT, NO_LEADER
from minibroker.metrics.counts import EventCounts
from minibroker.metrics.families import Family, broker_families
from minibroker.metrics.server import MetricsServer
from minibroker.net.credentials import cluster_secret
from minibroker.net.server import Dispatcher, HandlerSpec, RequestContext, serve
from minibroker.net.tls import listener_protocol, peer_context, server_context
from minibroker.protocol.api import REQUESTS, ApiKey
from minibroker.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from minibroker.protocol.schema import Nullable, Opt
from minibroker.storage.data_format import DataDirFormatError, ensure_record_format

log = logging.getLogger("minibroker.broker")

CLEAN_SHUTDOWN_FILE = "minibroker-clean-shutdown.json"
DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS = 30_000
METADATA_SLICE = 1_000          # topics answered between two yields to the loop


# --------------------------------------------------------------------------
# Listeners and the clean-shutdown marker
# --------------------------------------------------------------------------

def listener_plan(config: Config) -> tuple[dict[str, tuple[str, int]], dict[str, tuple[str, int]], str]:
    """(bind addresses, advertised addresses, inter-broker listener name), by listener name.

    A listener without an advertised entry advertises its bind address
    (the host name when bound to 0.0.0.0); advertised names must be listeners."""
    binds = parse_listeners(config.get("listeners"), "listeners")
    if not binds:
        raise ConfigError("listeners: not set (expected NAME://host:port,...)")
    adv_spec = config.get("advertised.listeners", "")
    advertised = parse_listeners(adv_spec, "advertised.listeners") if adv_spec.strip() else {}
    for name in advertised:
        if name not in binds:
            raise ConfigError(f"advertised.listeners: {name} is not one of listeners ({', '.join(binds)})")
    out: dict[str, tuple[str, int]] = {}
    for name, (host, port) in binds.items():
        if name in advertised:
            out[name] = advertised[name]
        else:
            out[name] = (socket.gethostname() if host in ("0.0.0.0", "", "::") else host, port)
    kafka = kafka_listener_names(config)
    msgpack = [n for n in binds if n not in kafka]
    inter = (config.get("inter.broker.listener.name", "") or (msgpack[0] if msgpack else next(iter(binds)))).upper()
    if inter not in binds:
        raise ConfigError(f"inter.broker.listener.name: {inter} is not one of listeners ({', '.join(binds)})")
    if inter in kafka:
        raise ConfigError(f"inter.broker.listener.name: {inter} is a Kafka-protocol listener "
                          f"(minibroker.kafka.listener.names); brokers replicate over a minibroker listener")
    return binds, out, inter


def kafka_listener_names(config: Config) -> set[str]:
    """Listeners that speak Kafka's wire protocol (minibroker.kafka.listener.names,
    as Kafka's controller.listener.names names the listeners that speak KRaft)."""
    return {n.upper() for n in config.get_list("minibroker.kafka.listener.names")}


def log_dirs(config: Config) -> list[str]:
    dirs = config.get_list("log.dirs")
    if not dirs:
        raise ConfigError("log.dirs: not set")
    if len(dirs) > 1:
        raise ConfigError(f"log.dirs: one data directory is supported, got {len(dirs)} ({', '.join(dirs)})")
    return dirs


def take_clean_shutdown_epoch(dirs: list[str]) -> int:
    """The broker epoch written at the last clean shutdown, or -1 (KIP-966).
    The marker is removed, so a crash from here on counts as unclean."""
    epochs: set[int] = set()
    missing = False
    for d in dirs:
        path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                epochs.add(int(json.load(f)["broker_epoch"]))
        except (OSError, ValueError, KeyError, TypeError):
            missing = True
        try:
            os.unlink(path)
        except OSError:
            pass
    for d in dirs:
        _fsync_dir(d)
    if missing or len(epochs) != 1:
        return -1
    return epochs.pop()


def write_clean_shutdown_epoch(dirs: list[str], broker_epoch: int) -> None:
    for d in dirs:
        path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"version": 0, "broker_epoch": broker_epoch}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(d)


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# Adapters to the storage and data-path packages
# --------------------------------------------------------------------------

_BROKER_LOG_PROPERTIES = ("log.segment.bytes", "log.roll.ms", "log.index.interval.bytes", "log.retention.bytes",
                          "log.retention.ms", "log.flush.interval.messages", "log.flush.interval.ms",
                          "message.max.bytes", "log.segment.delete.delay.ms", "compression.type",
                          "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
                          "log.message.timestamp.after.max.ms")


def broker_log_config(config: Config) -> Any:
    """The broker-wide LogConfig (the log.* properties and minibroker.fsync.before.ack)."""
    from minibroker.storage import LogConfig
    props = {k: config.get(k) for k in _BROKER_LOG_PROPERTIES}
    props["minibroker.flush.on.acks.all"] = config.get("minibroker.fsync.before.ack", "false")
    return clamp_batch_size(LogConfig.from_properties(props), config.get_int("socket.request.max.bytes"))


def topic_log_config(image: MetadataImage, base: Any, topic: str,
                     frame_limit: int = DEFAULT_MAX_FRAME_BYTES) -> Any:
    """A topic's LogConfig: its overrides from the metadata image over the broker's."""
    from minibroker.storage import LogConfig
    from minibroker.storage.log_config import PROPERTY_NAMES
    overrides = {k: v for k, v in image.topic_configs(topic).items() if k in PROPERTY_NAMES}
    try:
        return clamp_batch_size(LogConfig.from_properties(overrides, base=base), frame_limit)
    except KafkaError as exc:
        log.warning("topic %s: ignoring invalid log config overrides (%s)", topic, exc.message)
        return base


def open_log_manager(config: Config, dirs: list[str], image: MetadataImage, events: Callable[[Event], None]) -> Any:
    """Create the LogManager over log.dirs: this recovers every log (blocking: call in a thread)."""
    from minibroker.storage import LogManager
    base = broker_log_config(config)
    frame_limit = config.get_int("socket.request.max.bytes")
    return LogManager(dirs[0], base, topic_config=lambda t: topic_log_config(image, base, t, frame_limit),
                      event_sink=events)


def create_replica_manager(**kw: Any) -> Any:
    from minibroker.broker.replica_manager import ReplicaManager
    return ReplicaManager(**kw)


# --------------------------------------------------------------------------
# The process
# --------------------------------------------------------------------------

class BrokerServer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node_id = config.get_int("node.id")
        if self.node_id < 0:
            raise ConfigError("node.id: must be set to a non-negative broker id")
        self.binds, self.advertised, self.inter_broker_listener = listener_plan(config)
        self.dirs = log_dirs(config)
        self.secret = cluster_secret(config)
        self.tls = {name: server_context(config, name) for name in self.binds
                    if listener_protocol(config, name) == "SSL"}
        self.peer_tls = peer_context(config, listener_protocol(config, self.inter_broker_listener))
        self.max_frame_bytes = config.get_int("socket.request.max.bytes")
        self.producer_ids = ProducerIdAllocator()
        self.controlled_shutdown_timeout_ms = int(config.get(
            "minibroker.controlled.shutdown.timeout.ms", str(DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS)))
        rack = config.get("broker.rack", "")
        self.rack = rack or None
        self.events = EventLog(self.node_id)
        self.image = MetadataImage(config)
        self.event_counts = EventCounts()
        self.events.ring.subscribe(self.event_counts.observe)
        self.metrics: MetricsServer | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.channel: ControllerChannel | None = None
        self.peers: InterBrokerConnections | None = None
        self.replica_manager: Any = None
        self.coordinator: GroupCoordinator | None = None
        self.log_manager: Any = None
        self._servers: list[asyncio.AbstractServer] = []
        self.kafka_listeners = kafka_listener_names(config) & set(self.binds)
        self.kafka_connections: set[KafkaConnection] = set()
        self.kafka_apis = KafkaApis(self)
        self.bound: dict[str, tuple[str, int]] = {}
        self._published = False
        self._serving: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._stop_reason = ""
        self._controlled = True
        self._hurry = False
        self.dispatcher = Dispatcher(self._handlers(), secret=self.secret, role="broker",
                                     max_frame_bytes=self.max_frame_bytes, describe=self._describe,
                                     failed_auth_delay_ms=config.get_int("connection.failed.authentication.delay.ms"))
        self.dispatcher.configure(config)
        tail.PROCESS_BUDGET.max_bytes = config.get_int("minibroker.tail.cache.max.bytes")

    # -- state -----------------------------------------------------------------
    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state if self.lifecycle is not None else BrokerState.STARTING

    def _describe(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "state": self.state.value,
                "software": f"minibroker {minibroker.__version__}",
                "broker_epoch": self.lifecycle.broker_epoch if self.lifecycle else -1}

    def request_stop(self, reason: str, controlled: bool = True) -> None:
        """Triggered by SIGTERM/SIGINT (controlled) or a fatal error."""
        if self._stop is None:
            return
        if self._stop.is_set():
            # A second signal cuts a controlled shutdown short.
            if not self._hurry:
                self._hurry = True
                log.info("broker %d: %s again, not waiting for the controller", self.node_id, reason)
                if self.channel is not None:
                    self.channel.notify()
            return
        self._stop_reason = reason
        self._controlled = controlled
        self._stop.set()
        if self.channel is not None:
            self.channel.notify()

    # -- run -------------------------------------------------------------------
    async def run(self, install_signals: bool = True) -> int:
        loop = asyncio.get_running_loop()
        self.events.bind(loop)
        self._serving = asyncio.Event()
        self._stop = asyncio.Event()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop, f"received {signal.Signals(sig).name}")
        try:
            await self._startup()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, DataDirFormatError):
                log.error("broker %d refuses to start: %s", self.node_id, exc)
                await self._shutdown(clean=False)
                return 1
            if not self._stop.is_set():
                log.exception("broker %d failed to start: %s", self.node_id, exc)
                await self._shutdown(clean=False)
                return 1
        await self._stop.wait()
        log.info("broker %d stopping: %s", self.node_id, self._stop_reason)
        await self._shutdown(clean=True)
        return 0

    async def _startup(self) -> None:
        assert self._stop is not None
        previous_epoch = await asyncio.to_thread(self._prepare_dirs)
        for name, (host, port) in self.binds.items():
            if name in self.kafka_listeners:
                srv = await serve_kafka(self.kafka_apis.handle, host, port, name, self.max_frame_bytes,
                                        self.kafka_connections,
                                        int(self.config.get("connections.max.idle.ms", "600000")),
                                        ssl_context=self.tls.get(name))
            else:
                srv = await serve(self.dispatcher, host, port, name, ssl_context=self.tls.get(name))
            self._servers.append(srv)
            bhost, bport = srv.sockets[0].getsockname()[:2]
            self.bound[name] = (bhost, bport)
            if self.advertised[name][1] == 0:
                self.advertised[name] = (self.advertised[name][0], bport)
        if self.config.get("metrics.listener", "").strip():
            self.metrics = MetricsServer(self._metric_families)
            await self.metrics.start(self.config.get("metrics.listener"))
        log.info("broker %d listening on %s (inter-broker listener %s)", self.node_id,
                 ", ".join(f"{n}://{h}:{p}" for n, (h, p) in self.bound.items()), self.inter_broker_listener)
        self.lifecycle = BrokerLifecycle(
            node_id=self.node_id, rack=self.rack,
            listeners=[{"name": n, "host": h, "port": p} for n, (h, p) in self.advertised.items()],
            previous_broker_epoch=previous_epoch)
        self.peers = InterBrokerConnections(node_id=self.node_id, image=self.image,
                                            listener=self.inter_broker_listener, secret=self.secret,
                                            max_frame_bytes=self.max_frame_bytes, ssl_context=self.peer_tls)
        self.channel = ControllerChannel(config=self.config, node_id=self.node_id, image=self.image,
                                         lifecycle=self.lifecycle, on_delta=self._on_delta, events=self._emit_state)
        self.channel.start()
        # STARTING: registered and caught up with the metadata log.
        if not await self._until(lambda: self.lifecycle.caught_up):
            return
        # RECOVERY: logs, replica manager, first full publish of the metadata.
        self.log_manager = await asyncio.to_thread(open_log_manager, self.config, self.dirs, self.image,
                                                   self.events.emit)
        self.replica_manager = create_replica_manager(
            node_id=self.node_id, config=self.config, log_manager=self.log_manager, image=self.image,
            alter_partition=self.channel.alter_partition, peers=self.peers, events=self.events.emit,
            broker_epoch=lambda: self.lifecycle.broker_epoch)
        await self.replica_manager.start()
        self.coordinator = GroupCoordinator(self)
        self.coordinator.start()
        self._published = True
        self.replica_manager.on_metadata(list(self.image.partitions.values()), list(self.image.brokers.values()),
                                         now_ms())
        self.channel.set_ready_to_unfence()
        if not await self._until(lambda: self.state is not BrokerState.RECOVERY):
            return
        if self.state is BrokerState.RUNNING:
            self._serving.set()

    async def _until(self, cond: Callable[[], bool]) -> bool:
        """Wait for cond() or a stop request; True if cond() holds."""
        assert self.channel is not None and self._stop is not None
        waiter = asyncio.ensure_future(self.channel.wait_for(lambda: cond() or self._stop.is_set()))
        await waiter
        return cond() and not self._stop.is_set()

    def _prepare_dirs(self) -> int:
        for d in self.dirs:
            ensure_record_format(d)
        return take_clean_shutdown_epoch(self.dirs)

    def _metric_families(self) -> list[Family]:
        """Triggered by each scrape of /metrics (on the event loop): the ReplicaStatus body, as `watch` reads it."""
        status = self.replica_manager.replica_status(None) if self.replica_manager is not None else {}
        return broker_families(status, lambda t: int(self.image.topic_config(t, "min.insync.replicas")),
                               self.event_counts)

    def _emit_state(self, event: Event) -> None:
        self.events.emit(event)
        if event.kind == "broker_state":
            if event.after == BrokerState.RUNNING.value and self._serving is not None:
                self._serving.set()

    def _on_delta(self, delta: MetadataDelta) -> None:
        """Triggered after each applied MetadataFetch response."""
        if not self._published or self.replica_manager is None:
            return
        if delta.partitions or delta.brokers:
            self.replica_manager.on_metadata(delta.partitions, delta.brokers, now_ms())
        if delta.topics or delta.broker_configs:
            self.replica_manager.on_configs_changed(now_ms())
        if delta.removed_partitions and hasattr(self.replica_manager, "on_partitions_removed"):
            self.replica_manager.on_partitions_removed(delta.removed_partitions, now_ms())

    async def _shutdown(self, clean: bool) -> None:
        ch = self.channel
        if ch is not None and self._controlled and self.lifecycle is not None \
                and self.lifecycle.broker_epoch >= 0:
            ch.begin_controlled_shutdown(self._stop_reason or "shutdown requested")
            done = await ch.wait_for(lambda: self.state is BrokerState.SHUTTING_DOWN or self._hurry,
                                     self.controlled_shutdown_timeout_ms)
            if not done:
                log.info("broker %d: controlled shutdown did not complete within %d ms; stopping anyway",
                         self.node_id, self.controlled_shutdown_timeout_ms)
        if ch is not None:
            ch.begin_shutdown(self._stop_reason or "shutdown")
        for srv in self._servers:
            srv.close()
        for conn in [*self.dispatcher.connections, *self.kafka_connections]:
            if conn.transport is not None:
                conn.transport.abort()
        if self.metrics is not None:
            await self.metrics.close()
        if self.coordinator is not None:
            await self.coordinator.close()
        if ch is not None:
            await ch.close()
        ok = clean
        if self.replica_manager is not None:
            try:
                await self.replica_manager.shutdown()
            except Exception:
                ok = False
                log.exception("replica manager shutdown failed")
        elif self.log_manager is not None and hasattr(self.log_manager, "shutdown"):
            try:
                await asyncio.to_thread(self.log_manager.shutdown)
            except Exception:
                ok = False
                log.exception("log manager shutdown failed")
        if self.peers is not None:
            self.peers.close()
        epoch = self.lifecycle.broker_epoch if self.lifecycle is not None else -1
        if ok and epoch >= 0 and self.log_manager is not None:
            await asyncio.to_thread(write_clean_shutdown_epoch, self.dirs, epoch)
        log.info("broker %d stopped%s", self.node_id, " cleanly" if ok else "")

    # -- handlers ----------------------------------------------------------------
    def _handlers(self) -> dict[ApiKey, HandlerSpec]:
        return {
            ApiKey.PRODUCE: HandlerSpec(self._gated(self._produce)),
            ApiKey.FETCH: HandlerSpec(self._gated(self._fetch)),
            ApiKey.LIST_OFFSETS: HandlerSpec(self._gated(self._list_offsets)),
            ApiKey.DELETE_RECORDS: HandlerSpec(self._gated(self._delete_records)),
            ApiKey.METADATA: HandlerSpec(self._gated(self._metadata)),
            ApiKey.CREATE_TOPICS: HandlerSpec(self._gated(self._create_topics)),
            ApiKey.DELETE_TOPICS: HandlerSpec(self._gated(self._delete_topics)),
            ApiKey.ELECT_LEADERS: HandlerSpec(self._gated(self._elect_leaders)),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: HandlerSpec(self._gated(self._alter_partition_reassignments)),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: HandlerSpec(self._gated(self._list_partition_reassignments)),
            ApiKey.DESCRIBE_CONFIGS: HandlerSpec(self._gated(self._describe_configs)),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: HandlerSpec(self._gated(self._incremental_alter_configs)),
            ApiKey.CREATE_PARTITIONS: HandlerSpec(self._gated(self._create_partitions)),
            ApiKey.DESCRIBE_CLUSTER: HandlerSpec(self._gated(self._describe_cluster)),
            ApiKey.INIT_PRODUCER_ID: HandlerSpec(self._gated(self._init_producer_id)),
            ApiKey.DESCRIBE_QUORUM: HandlerSpec(self._gated(self._describe_quorum)),
            **{api: HandlerSpec(self._gated(fn)) for api, fn in group_handlers(lambda: self.coordinator).items()},
            ApiKey.DESCRIBE_LOG_DIRS: HandlerSpec(self._gated(self._describe_log_dirs)),
            ApiKey.REPLICA_STATUS: HandlerSpec(self._replica_status),
            ApiKey.EVENTS: HandlerSpec(self._events),
        }

    def msgpack_handler(self, api: ApiKey) -> Callable[[RequestContext, dict], Awaitable[dict | None]] | None:
        """The handler the minibroker listener runs for `api` (the Kafka listener calls the same ones)."""
        spec = self.dispatcher.handlers.get(api)
        return spec.fn if spec is not None else None

    async def until_serving(self) -> None:
        """Returns once the broker is RUNNING (requests other than ApiVersions wait for it)."""
        if self._serving is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "broker is starting")
        await self._serving.wait()

    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    def _gated(self, fn: Callable[[RequestContext, dict], Awaitable[dict | None]]
               ) -> Callable[[RequestContext, dict], Awaitable[dict | None]]:
        """`fn` once the broker serves; until then its requests wait for that (or fail while it starts).
        Once serving, `fn`'s awaitable is the handler's (no coroutine of its own per request)."""
        async def wait_then(ctx: RequestContext, body: dict) -> dict | None:
            if self._serving is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "broker is starting")
            await self._serving.wait()
            return await fn(ctx, body)

        def handler(ctx: RequestContext, body: dict) -> Awaitable[dict | None]:
            serving = self._serving
            if serving is not None and serving.is_set():
                return fn(ctx, body)
            return wait_then(ctx, body)
        return handler

    def _produce(self, ctx: RequestContext, body: dict) -> Awaitable[dict | None]:
        return self.replica_manager.handle_produce(ctx, body)

    def _fetch(self, ctx: RequestContext, body: dict) -> Awaitable[dict]:
        if body.get("replica_id", -1) >= 0:
            ctx.require_privileged()
        return self.replica_manager.handle_fetch(ctx, body)

    async def _list_offsets(self, ctx: RequestContext, body: dict) -> dict:
        if body.get("replica_id", -1) >= 0:
            ctx.require_privileged()
        return await self.replica_manager.handle_list_offsets(ctx, body)

    async def _delete_records(self, ctx: RequestContext, body: dict) -> dict:
        return await self.replica_manager.handle_delete_records(body)

    async def _metadata(self, ctx: RequestContext, body: dict) -> dict:
        """A topic named twice is answered once (Kafka takes a set); a long list
        is answered in slices, yielding to the loop in between (issue 10)."""
        topics = body.get("topics")
        if topics is None or len(topics) <= METADATA_SLICE:
            return metadata_response(self.image, ctx.listener, topics)
        seen: set[str] = set()
        resp = metadata_response(self.image, ctx.listener, [])
        for i in range(0, len(topics), METADATA_SLICE):
            await asyncio.sleep(0)
            chunk = [t for t in topics[i:i + METADATA_SLICE] if t not in seen]
            seen.update(chunk)
            resp["topics"] += metadata_response(self.image, ctx.listener, list(dict.fromkeys(chunk)))["topics"]
        return resp

    async def _create_topics(self, ctx: RequestContext, body: dict) -> dict:
        assert self.channel is not None
        timeout_ms = max(0, body.get("timeout_ms", 30_000))
        loop = asyncio.get_running_loop()
        start = loop.time()
        resp = await self.channel.forward(ApiKey.CREATE_TOPICS, strip_defaults(body, REQUESTS[ApiKey.CREATE_TOPICS]),
                                          timeout_ms + 5000)
        if resp.get("error", 0) or body.get("validate_only"):
            return resp
        created = [t["topic"] for t in resp.get("topics", []) if not t.get("error", 0)]
        if created:
            remaining = max(0, int(timeout_ms - (loop.time() - start) * 1000))
            await self.channel.wait_for(lambda: all(self._topic_visible(t) for t in created), remaining)
        return resp

    async def _delete_topics(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller; answers once this broker's metadata no
        longer holds the deleted topics (or timeout_ms passes), as Kafka waits
        for the deletion to reach the brokers."""
        assert self.channel is not None
        timeout_ms = max(0, body.get("timeout_ms", 30_000))
        resp = await self.channel.forward(ApiKey.DELETE_TOPICS, body, timeout_ms + 5000)
        deleted = [t["topic"] for t in resp.get("topics", []) if not t.get("error", 0)]
        if deleted and not resp.get("error", 0):
            await self.channel.wait_for(lambda: all(t not in self.image.topics for t in deleted), timeout_ms)
        return resp

    def _topic_visible(self, topic: str) -> bool:
        t = self.image.topics.get(topic)
        return t is not None and len(self.image.partitions_of(topic)) >= t.num_partitions

    async def _elect_leaders(self, ctx: RequestContext, body: dict) -> dict:
        assert self.channel is not None
        return await self.channel.forward(ApiKey.ELECT_LEADERS, strip_defaults(body, REQUESTS[ApiKey.ELECT_LEADERS]),
                                          max(0, body.get("timeout_ms", 30_000)) + 5000)

    async def _alter_partition_reassignments(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller (KIP-455); answers once this broker's image holds the new replicas."""
        return await self._forward_then_catch_up(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body,
                                                 max(0, body.get("timeout_ms", 30_000)))

    async def _list_partition_reassignments(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller, whose records say which partitions are being reassigned."""
        assert self.channel is not None
        return await self.channel.forward(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                          strip_defaults(body, REQUESTS[ApiKey.LIST_PARTITION_REASSIGNMENTS]),
                                          max(0, body.get("timeout_ms", 30_000)) + 5000)

    async def _describe_configs(self, ctx: RequestContext, body: dict) -> dict:
        """Answered from this broker's image and its own properties (a broker resource
        names this broker, or "" for the cluster default, as Kafka's admin routes it)."""
        return {"results": [describe_config_resource(self.image, self.config, self.node_id, r)
                            for r in body["resources"]]}

    async def _incremental_alter_configs(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller (KIP-590); answers once this broker's image holds the change."""
        return await self._forward_then_catch_up(ApiKey.INCREMENTAL_ALTER_CONFIGS, body, 30_000)

    async def _create_partitions(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller; answers once this broker's image holds the new partitions."""
        return await self._forward_then_catch_up(ApiKey.CREATE_PARTITIONS, body, max(0, body.get("timeout_ms", 30_000)))

    async def _forward_then_catch_up(self, api: ApiKey, body: dict, timeout_ms: int) -> dict:
        assert self.channel is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        resp = await self.channel.forward(api, strip_defaults(body, REQUESTS[api]), timeout_ms + 5000)
        upto = resp.pop("metadata_offset", -1)
        if not resp.get("error", 0) and upto >= 0:
            remaining = max(0, int(timeout_ms - (loop.time() - start) * 1000))
            await self.channel.wait_for(lambda: self.image.offset > upto, remaining)
        return resp

    async def _describe_quorum(self, ctx: RequestContext, body: dict) -> dict:
        """Forwarded to the controller, as Kafka's brokers forward DescribeQuorum (KIP-836)."""
        assert self.channel is not None
        return await self.channel.forward(ApiKey.DESCRIBE_QUORUM, body, 30_000)

    async def _init_producer_id(self, ctx: RequestContext, body: dict) -> dict:
        """InitProducerId for an idempotent producer (KIP-98): as Kafka does
        for a null transactional id, always a new producer id at epoch 0
        (minibroker.broker.producer_ids); transactions are refused."""
        if body.get("transactional_id") is not None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "transactions are not supported: transactional_id must be null")
        return {"producer_id": self.producer_ids.allocate(self.broker_epoch()), "producer_epoch": 0}

    async def _describe_cluster(self, ctx: RequestContext, body: dict) -> dict:
        assert self.channel is not None
        return await self.channel.forward(ApiKey.DESCRIBE_CLUSTER, body, 30_000)

    async def _describe_log_dirs(self, ctx: RequestContext, body: dict) -> dict:
        """kafka-log-dirs: this broker's one log directory, its replicas' sizes, and the volume's total and
        usable bytes (statvfs, off the loop)."""
        if self.replica_manager is None or self.replica_manager.log_manager is None:
            return {"error": 0, "results": []}
        log_dir = self.replica_manager.log_manager.data_dir
        topics = self.replica_manager.describe_log_dirs(body["topics"])
        try:
            usage = await asyncio.to_thread(shutil.disk_usage, log_dir)
            total, usable = usage.total, usage.free
        except OSError:
            total = usable = -1
        return {"error": 0, "results": [{"error": 0, "log_dir": log_dir, "topics": topics, "total_bytes": total,
                                         "usable_bytes": usable}]}

    async def _replica_status(self, ctx: RequestContext, body: dict) -> dict:
        if self.replica_manager is None:
            return {"node_id": self.node_id, "partitions": []}
        return self.replica_manager.replica_status(body.get("topics"))

    async def _events(self, ctx: RequestContext, body: dict) -> dict:
        max_wait = min(max(0, body["max_wait_ms"]), 60_000)
        return await self.events.poll(body["from_seq"], max_wait, max(0, min(body["max_events"], 10_000)))


def describe_config_resource(image: MetadataImage, config: Config, node_id: int, r: dict[str, Any]) -> dict[str, Any]:
    """One DescribeConfigs result: the resource's entries with sources and synonyms."""
    rtype, name = r["resource_type"], r["resource_name"]
    out: dict[str, Any] = {"resource_type": rtype, "resource_name": name, "error": 0, "message": "", "configs": []}
    dynamic = image.broker_configs
    if rtype == ResourceType.TOPIC:
        t = image.topics.get(name)
        if t is None:
            out.update(error=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), message=f"Topic {name} does not exist")
            return out
        entries = topic_entries(t.configs, dynamic.get(node_id, {}), dynamic.get(CLUSTER_DEFAULT, {}),
                                config.as_dict())
    elif rtype == ResourceType.BROKER and name == "":
        entries = default_entries(dynamic.get(CLUSTER_DEFAULT, {}))
    elif rtype == ResourceType.BROKER and name == str(node_id):
        entries = broker_entries(dynamic.get(node_id, {}), dynamic.get(CLUSTER_DEFAULT, {}), config.as_dict())
    elif rtype == ResourceType.BROKER:
        out.update(error=int(ErrorCode.INVALID_REQUEST),
                   message=f"broker {node_id} describes its own configs, not broker {name!r}'s: ask that broker")
        return out
    else:
        out.update(error=int(ErrorCode.INVALID_REQUEST), message=f"unsupported resource type {rtype}")
        return out
    wanted = r.get("names")
    out["configs"] = [entry_to_wire(e) for e in entries if wanted is None or e.name in wanted]
    return out


def strip_defaults(value: Any, spec: Any) -> Any:
    """A validated body made fit to send on: optional fields left at a None
    default are dropped (the schema fills them in, but does not accept an
    explicit None for them), so a forwarded request validates again."""
    if isinstance(spec, Opt):
        return strip_defaults(value, spec.type)
    if isinstance(spec, Nullable):
        return None if value is None else strip_defaults(value, spec.type)
    if isinstance(spec, list) and isinstance(value, list):
        return [strip_defaults(v, spec[0]) for v in value]
    if isinstance(spec, dict) and isinstance(value, dict):
        out = {}
        for k, v in value.items():
            f = spec.get(k)
            if v is None and isinstance(f, Opt) and not isinstance(f.type, Nullable):
                continue
            out[k] = strip_defaults(v, f) if f is not None else v
        return out
    return value


def metadata_response(image: MetadataImage, listener: str, topics: list[str] | None) -> dict[str, Any]:
    """The Metadata API answered from the image, with broker addresses on `listener`."""
    brokers = []
    for b in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        if b.fenced:
            continue
        ep = b.endpoint(listener)
        if ep is not None:
            brokers.append({"node_id": b.broker_id, "host": ep.host, "port": ep.port, "rack": b.rack})
    names = sorted(image.topics) if topics is None else topics
    out_topics = []
    for name in names:
        t = image.topics.get(name)
        if t is None:
            out_topics.append({"topic": name, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                               "configs": {}, "partitions": []})
            continue
        parts = []
        for p in image.partitions_of(name):
            offline = []
            for r in p.replicas:
                b = image.brokers.get(r)
                if b is None or b.fenced or b.endpoint(listener) is None:
                    offline.append(r)
            leader_ok = p.leader != NO_LEADER and image.endpoint(p.leader, listener) is not None
            parts.append({
                "partition": p.partition,
                "error": 0 if leader_ok else int(ErrorCode.LEADER_NOT_AVAILABLE),
                "leader": p.leader if leader_ok else NO_LEADER,
                "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
                "last_known_elr": list(p.last_known_elr), "offline_replicas": offline,
            })
        out_topics.append({"topic": name, "topic_id": t.topic_id, "error": 0, "configs": dict(t.configs),
                           "partitions": parts})
    return {"brokers": brokers, "cluster_id": image.cluster_id, "controller_id": image.controller_id,
            "topics": out_topics}
