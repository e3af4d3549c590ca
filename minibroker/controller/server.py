"""The controller process: carries requests and timers into `ControllerState`,
and its decisions out to the metadata log, the event log and the requester.

Owns: the listening sockets, the metadata log (load, compaction at startup,
appends, durability before acknowledging), the liveness/rebalance timer,
the Events ring buffer and one structured log line per event. Must not
decide anything about brokers or partitions: the core does.

Every mutating handler runs the core synchronously on the event loop (so
decisions are serialised, like Kafka's controller event queue), appends the
records, then waits for them to be fsynced before answering.
"""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import os

import uuid
from typing import Any, TypeVar
from collections.abc import Callable

from minibroker.clock import AnchoredClock
from minibroker.config import Config, parse_listeners
from minibroker.controller.eventlog import EventLog
from minibroker.controller.metadata_log import MetadataLog
from minibroker.controller.settings import ControllerSettings
from minibroker.controller.state import ControllerState, Outcome, describe_quorum
from minibroker.metadata import to_wire
from minibroker.metrics.counts import EventCounts
from minibroker.metrics.families import Family, controller_families
from minibroker.metrics.server import MetricsServer
from minibroker.net.credentials import cluster_secret
from minibroker.net.server import Dispatcher, HandlerSpec, RequestContext, serve
from minibroker.net.tls import listener_protocol, server_context
from minibroker.protocol.api import ApiKey

_O = TypeVar("_O", Outcome, Outcome | None)
_T = TypeVar("_T")

log = logging.getLogger("minibroker.controller")
event_log = logging.getLogger("minibroker.controller.events")

MAX_RECORDS_PER_FETCH = 10_000
DEFAULT_LISTENER = "CONTROLLER://127.0.0.1:9093"   # loopback unless `listeners` says otherwise
SOFTWARE = "minibroker-controller"


def _cluster_id(directory: str) -> str:
    """The cluster id kept in <metadata.log.dir>/meta.properties (created on first start)."""
    path = os.path.join(directory, "meta.properties")
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k == "cluster.id" and v:
                    return v
    except FileNotFoundError:
        pass
    cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"cluster.id={cid}\nversion=1\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return cid


def _next_leader_epoch(directory: str) -> int:
    """This start's quorum epoch, kept in <metadata.log.dir>/quorum-state as Kafka's KRaft
    does: a single voter elects itself anew, one epoch higher, every time it starts."""
    path = os.path.join(directory, "quorum-state")
    epoch = 0
    try:
        with open(path, encoding="utf-8") as f:
            epoch = int(json.load(f).get("leaderEpoch", 0))
    except (FileNotFoundError, ValueError, TypeError, AttributeError):
        pass
    epoch += 1
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"leaderEpoch": epoch, "votedId": -1, "data_version": 0}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return epoch


class ControllerServer:
    """Invariant: after `start()`, `core` holds exactly the records in `mlog`
    (durable or pending), and `addresses` has the bound listener addresses."""

    def __init__(self, config: Config, *, state: ControllerState | None = None) -> None:
        self.config = config
        self.settings = ControllerSettings.from_config(config)
        self.core = state or ControllerState(self.settings)
        self.directory = config.get("metadata.log.dir")
        self.mlog = MetadataLog(self.directory)
        self.events = EventLog()
        self.event_counts = EventCounts()
        self.events.subscribe(self.event_counts.observe)
        self.metrics: MetricsServer | None = None
        self.clock = AnchoredClock()
        self.cluster_id = ""
        self.leader_epoch = 0      # Invariant: this start's quorum epoch (quorum-state), once started
        self.state = "STARTING"
        self.addresses: dict[str, tuple[str, int]] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._timer: asyncio.Task | None = None
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        spec = config.get("listeners", "") or DEFAULT_LISTENER
        self.listeners = parse_listeners(spec)
        self.tls = {name: server_context(config, name) for name in self.listeners
                    if listener_protocol(config, name) == "SSL"}
        tick = self.settings.heartbeat_interval_ms / 4
        self.tick_ms = max(20, min(500, int(tick), self.settings.session_timeout_ms // 4 or 20))
        self.dispatcher = Dispatcher(
            handlers={
                ApiKey.BROKER_REGISTRATION: HandlerSpec(self._register, privileged=True),
                ApiKey.BROKER_HEARTBEAT: HandlerSpec(self._heartbeat, privileged=True),
                ApiKey.ALTER_PARTITION: HandlerSpec(self._alter_partition, privileged=True),
                ApiKey.METADATA_FETCH: HandlerSpec(self._metadata_fetch, privileged=True),
                ApiKey.CREATE_TOPICS: HandlerSpec(self._create_topics, privileged=True),
                ApiKey.DELETE_TOPICS: HandlerSpec(self._delete_topics, privileged=True),
                ApiKey.ELECT_LEADERS: HandlerSpec(self._elect_leaders, privileged=True),
                ApiKey.ALTER_PARTITION_REASSIGNMENTS: HandlerSpec(self._alter_partition_reassignments, privileged=True),
                ApiKey.LIST_PARTITION_REASSIGNMENTS: HandlerSpec(self._list_partition_reassignments, privileged=True),
                ApiKey.INCREMENTAL_ALTER_CONFIGS: HandlerSpec(self._incremental_alter_configs, privileged=True),
                ApiKey.CREATE_PARTITIONS: HandlerSpec(self._create_partitions, privileged=True),
                ApiKey.DESCRIBE_CLUSTER: HandlerSpec(self._describe_cluster, privileged=True),
                ApiKey.DESCRIBE_QUORUM: HandlerSpec(self._describe_quorum, privileged=True),
                ApiKey.EVENTS: HandlerSpec(self._events),
            },
            secret=cluster_secret(config),
            failed_auth_delay_ms=config.get_int("connection.failed.authentication.delay.ms"),
            role="controller",
            max_frame_bytes=config.get_int("socket.request.max.bytes"),
            describe=lambda: {"node_id": self.settings.node_id, "state": self.state, "software": SOFTWARE},
        )
        self.dispatcher.configure(config)

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Load and compact the metadata log, bind every listener, start the timer."""
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(None, self.mlog.load)
        self.cluster_id = await loop.run_in_executor(None, _cluster_id, self.directory)
        self.leader_epoch = await loop.run_in_executor(None, _next_leader_epoch, self.directory)
        for off, rec in loaded.snapshot:
            self.core.replay(off, rec)
        for off, rec in loaded.records:
            self.core.replay(off, rec)
        now = self.clock.now_ms()
        self.core.finish_replay(now, self.mlog.end)
        if loaded.records:
            image, end = self.core.image(), self.core.next_offset
            await loop.run_in_executor(None, self.mlog.compact, image, end)
        log.info("metadata log %s loaded: snapshot below offset %d, %d record(s) replayed, %d broker(s), "
                 "%d topic(s); log end %d", self.mlog.path, loaded.snapshot_end, len(loaded.records),
                 len(self.core.cluster.brokers), len(self.core.topics.topics), self.core.next_offset)
        self.mlog.start()
        try:
            for name, (host, port) in self.listeners.items():
                srv = await serve(self.dispatcher, host, port, name, ssl_context=self.tls.get(name))
                self._servers.append(srv)
                sock = srv.sockets[0].getsockname()
                self.addresses[name] = (host, sock[1])
                log.info("controller %d listening on %s://%s:%d", self.settings.node_id, name, host, sock[1])
        except OSError:
            await self.stop()
            raise
        if self.config.get("metrics.listener", "").strip():
            self.metrics = MetricsServer(self._metric_families)
            try:
                await self.metrics.start(self.config.get("metrics.listener"))
            except OSError:
                await self.stop()
                raise
        self._timer = loop.create_task(self._timer_loop(), name="controller-timer")
        self.state = "RUNNING"

    async def stop(self) -> None:
        """Stop accepting, cancel the timer, drop connections, flush the log."""
        if self.state == "SHUTTING_DOWN":
            return
        self.state = "SHUTTING_DOWN"
        for srv in self._servers:
            srv.close()
        if self._timer is not None:
            self._timer.cancel()
            try:
                await self._timer
            except (asyncio.CancelledError, Exception):
                pass
        for conn in list(self.dispatcher.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self.metrics is not None:
            await self.metrics.close()
        for srv in self._servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 2)
            except (TimeoutError, Exception):
                pass
        await self.mlog.close()
        self.stopped.set()

    def _metric_families(self) -> list[Family]:
        """Triggered by each scrape of /metrics (on the event loop): the core's records as they are."""
        topics = self.core.topics
        parts = [p for t in sorted(topics.partitions) for _, p in sorted(topics.partitions[t].items())]
        return controller_families(parts, self.core.cluster.brokers.values(), len(topics.topics), self.event_counts)

    def _die(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            log.critical("controller stopping after a fatal error: %s", exc)
            asyncio.get_running_loop().create_task(self.stop())

    # ---------------------------------------------------------------- plumbing
    async def _commit(self, out: Outcome) -> None:
        """Append an outcome's records, publish its events, and wait until the records are durable."""
        try:
            if out.records:
                self.mlog.append(out.records)
            for ev in out.events:
                self.events.append(ev)
                event_log.info(ev.to_json())
            if out.records:
                await self.mlog.wait_durable(out.last_offset)
        except Exception as exc:
            # The image already holds these records; a controller whose disk lost them must not go on.
            self._die(exc)
            raise

    async def _run_core(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Call a core decision. Should the core raise (a bug), whatever it had already
        applied is still persisted, then the error propagates (UNKNOWN_SERVER_ERROR)."""
        try:
            return fn(*args)
        except Exception:
            partial = self.core.take_partial()
            log.exception("controller decision %s failed; persisting %d already-applied record(s)",
                          getattr(fn, "__name__", fn), len(partial.records))
            await self._commit(partial)
            raise

    async def _decide(self, fn: Callable[..., _O], *args: Any) -> _O:
        """Run one core decision and commit it (`_run_core`)."""
        out = await self._run_core(fn, *args)
        if out is not None:
            await self._commit(out)
        return out

    async def _decide_all(self, fn: Callable[..., list[Outcome]], *args: Any) -> list[Outcome]:
        """`_decide` for a decision that returns several outcomes (the core's `tick`): each
        is committed, in order."""
        outs = await self._run_core(fn, *args)
        for out in outs:
            await self._commit(out)
        return outs

    async def _timer_loop(self) -> None:
        """Every tick: a late timer first restarts broker sessions (`on_liveness_gap`), then
        the core's `tick` (fence stale brokers one per outcome, then the due periodic tasks)."""
        loop = asyncio.get_running_loop()
        while True:
            slept_from = loop.time()
            await asyncio.sleep(self.tick_ms / 1000)
            late_ms = int((loop.time() - slept_from) * 1000) - self.tick_ms
            if self.mlog.failed is not None:
                self._die(self.mlog.failed)
                return
            try:
                now = self.clock.now_ms()
                if late_ms > self.core.settings.session_timeout_ms // 2:
                    await self._decide(self.core.on_liveness_gap, now, late_ms)
                await self._decide_all(self.core.tick, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("controller timer failed")
                self._die(exc)
                return

    # ---------------------------------------------------------------- handlers
    async def _register(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.register_broker, self.clock.now_ms(), body["broker_id"],
                                 body["incarnation_id"], body["rack"], body["listeners"], body["previous_broker_epoch"])
        return {**out.response, "cluster_id": self.cluster_id}

    async def _heartbeat(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.heartbeat, self.clock.now_ms(), body["broker_id"], body["broker_epoch"],
                                 body["current_metadata_offset"], body["want_fence"], body["want_shut_down"])
        return out.response

    async def _alter_partition(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.alter_partition, self.clock.now_ms(), body["broker_id"],
                                 body["broker_epoch"], body["topics"])
        return out.response

    async def _create_topics(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.create_topics, self.clock.now_ms(), body["topics"], body["validate_only"])
        return out.response

    async def _delete_topics(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.delete_topics, self.clock.now_ms(), body["topics"])
        return out.response

    async def _incremental_alter_configs(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.incremental_alter_configs, self.clock.now_ms(), body["resources"],
                                 body["validate_only"])
        return out.response

    async def _create_partitions(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.create_partitions, self.clock.now_ms(), body["topics"],
                                 body["validate_only"])
        return out.response

    async def _elect_leaders(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.elect_leaders, self.clock.now_ms(), body["election_type"], body["topics"])
        return out.response

    async def _alter_partition_reassignments(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        out = await self._decide(self.core.alter_partition_reassignments, self.clock.now_ms(), body["topics"],
                                 body["allow_replication_factor_change"])
        return out.response

    async def _list_partition_reassignments(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        return self.core.list_partition_reassignments(body["topics"])

    async def _describe_cluster(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        return {"error": 0, "cluster_id": self.cluster_id, "controller_id": self.settings.node_id,
                "brokers": self.core.describe_cluster()}

    async def _describe_quorum(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        return {**describe_quorum(self.core, self.settings.node_id, self.leader_epoch, self.clock.now_ms()),
                "cluster_id": self.cluster_id}

    async def _metadata_fetch(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        """Records from `from_offset`, long-polling up to max_wait_ms when there are none; a snapshot of
        the current image when from_offset is 0, below the log start, or beyond the log end."""
        frm, wait_ms = max(0, body["from_offset"]), max(0, body["max_wait_ms"])
        mlog = self.mlog
        if frm < mlog.log_start or frm > mlog.end or (frm == 0 and mlog.end > 0):
            if frm > mlog.end:
                log.warning("broker %d asked for metadata from offset %d beyond the log end %d; sending a snapshot",
                            body["broker_id"], frm, mlog.end)
            # The image includes records not yet durable: wait until it is all on disk.
            while mlog.durable_end < mlog.end:
                await mlog.wait_durable(mlog.end - 1)
            snapshot = [to_wire(rec, off) for off, rec in self.core.image()]
            return {"error": 0, "records": [], "next_offset": mlog.end, "snapshot": snapshot,
                    "cluster_id": self.cluster_id}
        await mlog.wait_for_records(frm, wait_ms)
        if frm < mlog.log_start:  # cannot happen today (compaction only at startup), kept for safety
            return await self._metadata_fetch(ctx, {**body, "from_offset": 0})
        records = mlog.read(frm, MAX_RECORDS_PER_FETCH)
        return {"error": 0, "records": records, "next_offset": frm + len(records), "snapshot": None,
                "cluster_id": self.cluster_id}

    async def _events(self, ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
        nxt, events = await self.events.read(body["from_seq"], body["max_wait_ms"], body["max_events"])
        return {"node_id": self.settings.node_id, "next_seq": nxt, "events": events}


def configure_logging() -> None:
    """One line per record, JSON-ish; only if the embedding program has not configured logging."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)

