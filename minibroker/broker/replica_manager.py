"""The broker's data path: every partition replica this broker hosts.

Owns: the `Partition` objects and their roles as metadata dictates (T1/T2),
Produce / Fetch / ListOffsets / DeleteRecords handling, delayed produces,
parked fetches (purgatory) and DeleteRecords waiting for the low watermark,
the follower fetchers, the periodic ISR check, HW checkpoints, the flush,
retention and producer-expiration timers, the delayed unlink of retired
segments (D10), carrying the leader cores' ISR proposals to the controller and
their answers back (I5/I6), and this broker's two replication quotas (RQ1-RQ5:
their bounds and throttled partitions from the metadata's configs).

Must not know: how metadata arrives (the control path calls `on_metadata`),
how AlterPartition travels (`AlterPartitionManager.submit`), or any
replication rule: those live in minibroker.replication (PartitionLeader for
every leader-side decision, PartitionFollower for the follower's, driven by
the fetchers, read_replica for ISR eligibility and the rack-aware read
replica, throttle for whether a replica's replication waits for its
quota). The request-level checks that stay here are Kafka ReplicaManager's
own (acks validity, hosted or not, the appendToLocalLog /
delayedProduceRequestRequired seams). This module only carries events in
(appends, follower fetches, timer ticks, controller answers) and decisions
out (complete waiters, wake parked fetches, send proposals), always after
the core's state change.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from minibroker.clock import now_ms as wall_now_ms
from minibroker.broker.fetch_session import FINAL_EPOCH, INVALID_SESSION_ID, FetchSession, FetchSessionCache
from minibroker.broker.fetcher import FetcherManager, FetcherSettings
from minibroker.broker.partition import FOLLOWER, LEADER, NO_SNAPSHOT, NONE, Partition, ReadResult
from minibroker.broker.purgatory import DelayedFetch, DelayedProduce, FetchPurgatory, ProduceWaiter, StandingWatch
from minibroker.config import Config, ConfigError
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event, EventSink
from minibroker.limits import clamp_batch_size, fetch_records_budget
from minibroker.records import is_compressed, needs_recompression, recompress
from minibroker.metadata import CLUSTER_DEFAULT, NO_LEADER, BrokerRecord, PartitionRecord
from minibroker.net.reply import Reply
from minibroker.net.server import RequestContext
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from minibroker.replication import Decision, PartitionLeader, profile_by_name
from minibroker.replication.read_replica import BrokerView, isr_eligibility, select_read_replica
from minibroker.replication.throttle import (FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS,
                                             UNLIMITED, ReplicationQuota, parse_rate, throttled_lists)
from minibroker.storage import LogConfig
from minibroker.storage.log_config import PROPERTY_NAMES
from minibroker.storage.producer_snapshot import delete_snapshot, write_snapshot

log = logging.getLogger("minibroker.broker.replica")

PartitionKey = tuple[str, int]

_RACK_AWARE = "RackAwareReplicaSelector"
_LEADER_SELECTOR = "LeaderSelector"
# Core events too frequent to keep (one per follower fetch); successful
# produce completions are dropped too. Every state transition passes through.
_HOT_EVENT_KINDS = frozenset({"follower_fetch"})
_ALTER_PARTITION_RESEND_MS = 50
_FLUSH_CHECK_MS = 1000
_OFFSET_CHECKPOINT_MS = 60_000
# How often, at most, an incremental Fetch applies the follower-fetch rule to each of its session's
# quiet partitions (KS3): a follower's fetch time on them lags its fetches by at most this much (or
# replica.lag.time.max.ms / 20 when that is less), so a Fetch does not cost a call per session partition.
# At Kafka's defaults (fetches every replica.fetch.wait.max.ms = 500 ms while idle) every other Fetch.
QUIET_REFRESH_MS = 1000


def _nothing_to_snapshot(p: Partition) -> bool:
    """A partition with no snapshot written yet whose producer state is empty and applies
    from its log start: a recovery without a snapshot rebuilds exactly that."""
    return p.snapshot_through == NO_SNAPSHOT and not len(p.producers) and p.producers.through <= p.log.log_start_offset


async def _each_partition(body: dict, out: list[dict]) -> AsyncIterator[tuple[dict, list[dict], dict]]:
    """(topic entry, its answer list, partition entry) of a request naming topics and partitions, a topic's
    answer list appended to `out` as its first partition comes; yields to the loop every REQUEST_SLICE
    partitions (issue 10: no request holds the loop)."""
    done = 0
    for t in body["topics"]:
        plist: list[dict] = []
        out.append({"topic": t["topic"], "partitions": plist})
        for p in t["partitions"]:
            done += 1
            if done % REQUEST_SLICE == 0:
                await asyncio.sleep(0)
            yield t, plist, p


def _code(code: int) -> ErrorCode | int:
    try:
        return ErrorCode(code)
    except ValueError:
        return code


@dataclass(slots=True)
class _LocalAppend:
    """One partition's result of appendToLocalLog: its response entry, and when the
    append happened, the partition and the offset after the last appended record."""
    entry: dict[str, Any]
    part: Partition | None = None
    next_offset: int = -1
    core: PartitionLeader | None = None     # the leader core that took the append


def _produce_entry(partition: int, code: int, message: str = "") -> dict[str, Any]:
    return {"partition": partition, "error": int(code), "base_offset": -1, "log_start_offset": -1,
            "message": message}



class _ParkedProduce:
    """An acks=all produce parked until the leader cores resolve its partitions (Kafka's
    DelayedProduce with its response callback): the waiters it registered, its deadline
    and its Reply. Invariant: `registered` holds the (core, waiter) pairs still to
    unregister; the Reply completes once, after they are."""

    __slots__ = ("rm", "resp", "reply", "delayed", "registered", "timer")

    def __init__(self, rm: ReplicaManager, resp: dict) -> None:
        self.rm = rm
        self.resp = resp
        self.reply = Reply(on_cancel=self._unregister)
        self.delayed = DelayedProduce(self._resolved)
        self.registered: list[tuple[PartitionLeader, ProduceWaiter]] = []
        self.timer: asyncio.TimerHandle | None = None

    def _resolved(self) -> None:
        """Every partition resolved, or the deadline passed: answer once the handler that did it ends."""
        self.rm._defer(self._answer)

    def _answer(self) -> None:
        self._unregister()
        self.reply.complete(self.resp)

    def _unregister(self) -> None:
        """Answered, or its connection closed: the cores forget its waiters; it never answers again.
        Its DelayedProduce lets go of it (the completion callback was a reference cycle)."""
        self.delayed.done = True
        self.delayed.on_complete = _nothing
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for core, w in self.registered:
            if not w.done:
                core.remove_waiter(w)
        self.registered = []

    def expire(self) -> None:
        """timeout_ms passed: answer with what resolved (the rest REQUEST_TIMED_OUT, P5)."""
        self.timer = None
        rm = self.rm
        rm._depth += 1
        try:
            self.delayed.complete()
        finally:
            rm._leave()


_NOTHING: frozenset[Any] = frozenset()


def _stamp(part: Partition | None) -> tuple[Any, ...] | None:
    """What a replica read of the partition depends on, besides the request."""
    if part is None:
        return None
    core = part.core
    lg = part.log
    return (part.role, part.leader_epoch, lg.log_end_offset, lg.log_start_offset,
            core.hw if core is not None else -1, id(core))


def _nothing() -> None:
    pass


class _FetchCall:
    """One Fetch on its way through `ReplicaManager.handle_fetch`'s steps: read, maybe park,
    re-read what moved, answer. Invariant: `later` is the pending timer (max_wait_ms) or next
    slice of this Fetch, if any; `op` its registered DelayedFetch while parked."""

    __slots__ = ("body", "replica_id", "reply", "requests", "session", "full", "stamps", "results", "total",
                 "respond_now", "skipped", "moved", "changes_before", "op", "standing", "later", "during_read",
                 "now", "room", "budget", "changed", "throttled")

    def __init__(self, body: dict, replica_id: int) -> None:
        self.body = body
        self.replica_id = replica_id
        self.reply: Reply = _NO_REPLY
        self.requests: list[tuple[str, dict]] = []
        self.session: FetchSession | None = None
        self.full = True
        self.stamps: list[tuple[Any, ...] | None] | None = None     # replica fetches: each read's state
        self.results: list[ReadResult] = []
        self.total = 0                      # Invariant: the record bytes in `results`
        self.respond_now = False
        self.skipped = False                # quiet partitions are left out of `requests`
        self.moved: frozenset[Any] | set[Any] = _NOTHING
        self.changes_before = 0
        self.op: DelayedFetch | None = None
        self.standing: StandingWatch | None = None
        self.later: asyncio.Handle | None = None
        self.during_read: set[Any] | None = None
        self.now = 0
        self.room = 0
        self.budget = 0
        self.changed: set[Any] | None = None
        self.throttled: set[PartitionKey] | None = None     # RQ4: partitions read without records, throttled


_NO_REPLY = Reply.of(None)


class ReplicaManager:
    """Invariant: `_partitions` holds exactly the replicas this broker hosts
    per the metadata applied so far; a partition is in the fetchers exactly
    when it is a follower with a known leader."""

    def __init__(self, *, node_id: int, config: Config, log_manager: Any, image: Any,
                 alter_partition: Any, peers: Any, events: EventSink,
                 broker_epoch: Callable[[], int], clock: Callable[[], int] = wall_now_ms) -> None:
        self.node_id = node_id
        self.config = config
        self.log_manager = log_manager
        self.image = image
        self.alter_partition = alter_partition
        self.peers = peers
        self.events = events
        self.broker_epoch = broker_epoch
        self.clock = clock
        try:
            self.profile = profile_by_name(config.get("minibroker.semantics", "kafka"))
        except ValueError as exc:
            raise ConfigError(f"minibroker.semantics: {exc}") from None
        self.lag_max_ms = config.get_int("replica.lag.time.max.ms")
        # KS3 simplified: a session's quiet partitions get the follower-fetch rule at most this often.
        self.quiet_refresh_ms = min(QUIET_REFRESH_MS, self.lag_max_ms // 20)
        self.rack = config.get("broker.rack", "")
        selector = config.get("replica.selector.class", "").strip()
        short = selector.rsplit(".", 1)[-1]
        if short not in ("", _RACK_AWARE, _LEADER_SELECTOR):
            raise ConfigError(f"replica.selector.class: unknown selector {selector!r} "
                              f"(use {_RACK_AWARE} or leave empty)")
        self.rack_aware = short == _RACK_AWARE
        self.fsync_before_ack = config.get_bool("minibroker.fsync.before.ack")
        self.hw_checkpoint_interval_ms = config.get_int("replica.high.watermark.checkpoint.interval.ms")
        self.retention_check_interval_ms = config.get_int("log.retention.check.interval.ms")
        self.producer_expiration_check_ms = config.get_int("producer.id.expiration.check.interval.ms")
        self.purgatory = FetchPurgatory()
        # Invariant: per follower broker, its session when last seen, that session's generation then,
        # and its standing watch, registered on that session's partitions of that generation.
        self._standing: dict[int, tuple[FetchSession, int, StandingWatch]] = {}
        self.fetch_sessions = FetchSessionCache(first_id=self.clock())     # ids differ across restarts
        windows = config.get_int("replication.quota.window.num")
        window_ms = 1000 * config.get_int("replication.quota.window.size.seconds")
        # RQ1-RQ5: the replication throttles, from the metadata's configs (`_update_throttles`).
        self.leader_quota = ReplicationQuota(windows=windows, window_ms=window_ms)
        self.follower_quota = ReplicationQuota(windows=windows, window_ms=window_ms)
        self.fetchers = FetcherManager(settings=FetcherSettings.from_config(config, node_id), peers=peers,
                                       broker_epoch=broker_epoch, hooks=self, sink=events, clock=clock,
                                       quota=self.follower_quota)
        self._partitions: dict[PartitionKey, Partition] = {}
        self._log_configs: dict[tuple, LogConfig] = {}
        self.max_frame_bytes = config.get_int("socket.request.max.bytes")
        self._base_log_config = self._broker_log_config()
        self._flushing: dict[PartitionKey, asyncio.Future] = {}
        # Invariant: per partition, the DeleteRecords waiting for its low watermark to reach an offset
        # (Kafka's DelayedDeleteRecords); a future is resolved (True) once it has, or dropped by its waiter.
        self._low_watermark_waits: dict[PartitionKey, list[tuple[int, asyncio.Future[bool]]]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.Task] = []
        self._loop: asyncio.AbstractEventLoop | None = None      # Invariant: None or the loop handlers last ran on
        self._closed = False
        # Completions deferred until the handler that caused them ends (`_defer`). Invariant: `_depth`
        # counts the handlers (and steps of them) running now; while it is 0 and `_actions` is not empty,
        # `_actions_soon` is set (a loop callback will run them) or `_acting` is (they are running).
        self._actions: deque[Callable[[], None]] = deque()
        self._depth = 0
        self._acting = False
        self._actions_soon = False

    # ================================================================ lifecycle

    async def start(self) -> None:
        """Start the ISR check (every replica.lag.time.max.ms / 2, I1), the HW
        checkpoint, the flush policy, offset checkpoint, retention and producer
        expiration timers."""
        self._timers = [
            asyncio.ensure_future(self._every(max(self.lag_max_ms // 2, 1), self._isr_check)),
            asyncio.ensure_future(self._every(self.hw_checkpoint_interval_ms, self._checkpoint_hws)),
            asyncio.ensure_future(self._every(_FLUSH_CHECK_MS, self._flush_due)),
            asyncio.ensure_future(self._every(_OFFSET_CHECKPOINT_MS, self._checkpoint_offsets)),
            asyncio.ensure_future(self._every(self.retention_check_interval_ms, self._retention)),
            asyncio.ensure_future(self._every(self.producer_expiration_check_ms, self._expire_producers)),
        ]
        if self.log_manager is not None:
            self._timers.append(asyncio.ensure_future(self._empty_trash()))
        self._update_throttles()

    async def shutdown(self) -> None:
        """Stop fetchers and timers, answer every parked request, checkpoint
        HWs and close the logs (LogManager.shutdown, in a thread)."""
        if self._closed:
            return
        self._closed = True
        for t in self._timers:
            t.cancel()
        await self.fetchers.shutdown()
        now = self.clock()
        for part in list(self._partitions.values()):
            if part.core is not None:
                self._apply(part, part.core.fail_all_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER, now), now)
        self.purgatory.complete_all()
        for t in list(self._tasks):
            t.cancel()
        for t in [*self._timers, *self._tasks]:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        if self.log_manager is not None:
            await self._snapshot_producers()
            hws = {k: p.hw for k, p in self._partitions.items()}
            await asyncio.to_thread(self.log_manager.shutdown, hws)

    async def _every(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))

    async def _empty_trash(self) -> None:
        """D10: unlink retired segment files, in a worker thread, once their file.delete.delay.ms
        has passed. Sleeps until the trash holds something (its on_add wakes this task) and then
        until the earliest is due; an idle broker never wakes for it."""
        trash = self.log_manager.trash
        wake = asyncio.Event()
        loop = self._running_loop()
        trash.on_add = lambda: loop.call_soon_threadsafe(wake.set)
        try:
            while True:
                wake.clear()
                delay_ms = trash.ms_until_due()
                if delay_ms is None:
                    await wake.wait()
                    continue
                if delay_ms > 0:
                    try:
                        await asyncio.wait_for(wake.wait(), delay_ms / 1000)    # an earlier one may arrive
                    except TimeoutError:
                        pass
                    continue
                try:
                    await asyncio.to_thread(trash.drain)
                except Exception:
                    log.exception("unlinking retired segment files failed")
        finally:
            trash.on_add = None         # stopped: what is retired from now on waits for the next start's loader

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the handlers run on, asked once (each asyncio.get_running_loop() is a getpid() on 3.11)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _core_sink(self, e: Event) -> None:
        if e.kind in _HOT_EVENT_KINDS or (e.kind == "produce_completed" and e.after == "NONE"):
            return
        self.events(e)

    def _spawn(self, coro: Any) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    # ================================================================ metadata

    def on_metadata(self, partitions: list[PartitionRecord], brokers: list[BrokerRecord], now_ms: int) -> None:
        """Triggered after each applied metadata batch: broker eligibility
        changes go to the leader cores (fencing, KIP-903 epochs); each
        partition record makes this broker leader, follower or neither."""
        if brokers:
            self._on_brokers(brokers, now_ms)
        for rec in partitions:
            try:
                self._apply_partition(rec, now_ms)
            except Exception:
                log.exception("applying metadata for %s failed", rec.name)
        gone = [p for k, p in self._partitions.items() if k[0] not in self.image.topics]
        for part in gone:
            self._stop_replica(part, now_ms, f"topic {part.topic} deleted", delete=True)

    def on_configs_changed(self, now_ms: int) -> None:
        """Triggered when metadata changed a topic's or a broker's dynamic configs: every log here
        takes its topic's log configs (as Kafka's TopicConfigHandler: retention, segment size and age,
        max.message.bytes, compression.type, message.timestamp.type... apply from their next use), and
        every leader its topic's effective min.insync.replicas at once. The broker-wide log configs
        come from the properties under the dynamic broker configs (`_broker_log_config`)."""
        try:
            base = self._broker_log_config()
        except ConfigError as exc:
            log.warning("dynamic broker log configs not applied: %s", exc)
            base = self._base_log_config
        if base != self._base_log_config:
            self._base_log_config = base
            self._log_configs.clear()
        self._update_throttles()
        for part in self._partitions.values():
            cfg = self._log_config(part.topic)
            if cfg != part.log.config:
                part.log.update_config(cfg)
            core = part.core
            if core is not None:
                self._apply(part, core.on_min_isr_changed(self._min_isr(part.topic), now_ms), now_ms)

    def _update_throttles(self) -> None:
        """RQ1-RQ2: the throttled replicas (topic configs) and rates (dynamic broker configs) as the
        metadata holds them now; an idle fetcher looks again at once."""
        dynamic = self.image.broker_configs
        overrides = {**dynamic.get(CLUSTER_DEFAULT, {}), **dynamic.get(self.node_id, {})}
        configs = [(name, t.configs) for name, t in sorted(self.image.topics.items())]
        for quota, rate, replicas in ((self.leader_quota, LEADER_RATE, LEADER_REPLICAS),
                                      (self.follower_quota, FOLLOWER_RATE, FOLLOWER_REPLICAS)):
            quota.bound = parse_rate(overrides.get(rate, self.config.get(rate, str(UNLIMITED))))
            quota.set_throttled(throttled_lists(configs, replicas), self.node_id)
        self.fetchers.wake_all()

    def on_partitions_removed(self, partitions: list[PartitionRecord], now_ms: int) -> None:
        """Triggered when metadata removed a topic: stop and delete its replicas."""
        for rec in partitions:
            part = self._partitions.get(rec.key)
            if part is not None and rec.key not in self.image.partitions:
                self._stop_replica(part, now_ms, f"topic {rec.topic} deleted", delete=True)

    def _on_brokers(self, brokers: list[BrokerRecord], now_ms: int) -> None:
        changed = {b.broker_id for b in brokers}
        for part in self._partitions.values():
            core = part.core
            if core is None:
                continue
            for r, eligible, epoch in self._eligibility(r for r in core.replicas if r in changed):
                if r != self.node_id:
                    self._apply(part, core.set_replica_eligibility(r, eligible, epoch, now_ms), now_ms)

    def _eligibility(self, replicas: Iterable[int]) -> list[tuple[int, bool, int]]:
        """(replica, ISR-eligible, broker epoch) as the image says (read_replica.isr_eligibility)."""
        return [(r, *isr_eligibility(self._broker_view(r))) for r in replicas]

    def _apply_partition(self, rec: PartitionRecord, now_ms: int) -> None:
        key = rec.key
        part = self._partitions.get(key)
        if self.node_id not in rec.replicas:
            if part is not None:
                self._stop_replica(part, now_ms, f"no longer a replica: {rec.reason or 'reassigned'}",
                                   delete=True)
            return
        topic_id = self._topic_id(rec.topic)
        if part is not None and part.topic_id is not None and topic_id is not None and part.topic_id != topic_id:
            # The topic was deleted and created again under its name (D11, KIP-516): this replica is the old
            # topic's; it goes, with its log, and the new topic's starts empty.
            self._stop_replica(part, now_ms, f"topic {rec.topic} created again (topic id {topic_id})", delete=True)
            part = None
        if part is not None and rec.partition_epoch < part.partition_epoch:
            return                                    # I7: older than what we hold
        if part is None:
            part = self._create_partition(rec.topic, rec.partition, topic_id)
        if rec.leader == self.node_id:
            self._make_leader(part, rec, now_ms)
        else:
            self._make_follower(part, rec, now_ms)

    def _topic_id(self, topic: str) -> str | None:
        t = self.image.topics.get(topic)
        return t.topic_id if t is not None and t.topic_id else None

    def _create_partition(self, topic: str, index: int, topic_id: str | None) -> Partition:
        """A replica of `topic`-`index` on its local log: the one found on disk when it was made for
        `topic_id` (or before topic ids were kept), else a new, empty one (a log left by a deleted topic
        of the same name, deleted while this broker was down, is removed first)."""
        stored = self.log_manager.topic_id(topic, index)
        if stored is not None and topic_id is not None and stored != topic_id:
            self._delete_log(topic, index, f"log of topic id {stored}, not {topic_id}")
        lg = self.log_manager.get_or_create(topic, index, self._log_config(topic), topic_id)
        hw = self.log_manager.load_high_watermark(topic, index)
        part = Partition(topic, index, node_id=self.node_id, log=lg, hw=hw, sink=self._core_sink)
        part.expire_producers(self.clock(), self._producer_expiration_ms())   # as Kafka's snapshot load
        part.topic_id = topic_id
        self._partitions[part.key] = part
        return part

    def _delete_log(self, topic: str, index: int, why: str) -> None:
        """The partition's directory is renamed now (a replica of the same name may be created at
        once) and removed in a worker thread."""
        try:
            gone = self.log_manager.retire_log(topic, index)
        except OSError as exc:
            log.error("%s-%d: renaming the deleted log's directory failed (%s); removed it in place", topic, index,
                      exc)
            return
        if gone is not None:
            log.info("%s-%d: log deleted (%s)", topic, index, why)
            self._spawn(asyncio.to_thread(self.log_manager.purge, gone))

    def _make_leader(self, part: Partition, rec: PartitionRecord, now_ms: int) -> None:
        self.fetchers.remove(part.key)
        was = part.role
        old_epoch = part.leader_epoch
        decisions = part.make_leader(
            rec, now_ms, profile=self.profile, lag_max_ms=self.lag_max_ms,
            min_isr=self._min_isr(part.topic), broker_epoch=self.broker_epoch(),
            eligibility=self._eligibility(rec.replicas))
        for d in decisions:
            self._apply(part, d, now_ms)
        if was != LEADER or rec.leader_epoch != old_epoch:
            self.purgatory.on_state_change(part.key)
            if part.log.epoch_cache_dirty:
                self._spawn(self._persist_epochs(part))

    def _make_follower(self, part: Partition, rec: PartitionRecord, now_ms: int) -> None:
        was = part.role
        if self._low_watermark_waits:
            self._wake_delete_records(part)
        failed, new_epoch = part.make_follower(rec, now_ms)
        if failed is not None:
            self._apply(part, failed, now_ms)
        me = self.image.brokers.get(self.node_id)
        shutting_down = me is not None and me.in_controlled_shutdown
        if rec.leader == NO_LEADER or (shutting_down and self.node_id not in rec.isr):
            self.fetchers.remove(part.key)            # T2: nothing to fetch, or leaving in controlled shutdown
        elif new_epoch or self.fetchers.state(part.key) is None:
            part.initial_fetch_offset(now_ms)
            self.fetchers.add(part, rec.leader, rec.leader_epoch)
        if new_epoch or was != FOLLOWER:
            self.purgatory.on_state_change(part.key)

    def _stop_replica(self, part: Partition, now_ms: int, reason: str, *, delete: bool) -> None:
        self.fetchers.remove(part.key)
        if self._low_watermark_waits:
            self._wake_delete_records(part)
        failed = part.make_none(now_ms, reason)
        if failed is not None:
            self._apply(part, failed, now_ms)
        self._partitions.pop(part.key, None)
        self.purgatory.on_state_change(part.key)
        if delete and self.log_manager is not None:
            self._delete_log(part.topic, part.index, reason)

    async def _persist_epochs(self, part: Partition) -> None:
        try:
            await asyncio.to_thread(part.log.persist_epoch_cache)
        except Exception as exc:
            log.warning("%s: writing the leader-epoch checkpoint failed: %s", part.name, exc)

    def _min_isr(self, topic: str) -> int:
        try:
            return max(1, int(self.image.topic_config(topic, "min.insync.replicas")))
        except (ValueError, ConfigError):
            return 1

    def _broker_log_config(self) -> LogConfig:
        """The broker-wide LogConfig: the log properties under the dynamic broker configs the metadata
        holds, the cluster default's then this broker's (Kafka's DynamicLogConfig). Raises ConfigError."""
        dynamic = self.image.broker_configs
        overrides = {**dynamic.get(CLUSTER_DEFAULT, {}), **dynamic.get(self.node_id, {})}
        config = self.config.with_overrides(overrides) if overrides else self.config
        props = {k: config.get(k) for k in PROPERTY_NAMES
                 if k.startswith(("log.", "message.", "compression.")) and k in config.as_dict()}
        try:
            return clamp_batch_size(LogConfig.from_properties(props), self.max_frame_bytes)
        except KafkaError as exc:
            raise ConfigError(f"log configuration: {exc.message}") from None

    def _log_config(self, topic: str) -> LogConfig:
        t = self.image.topics.get(topic)
        overrides = tuple(sorted((k, v) for k, v in (t.configs if t else {}).items() if k in PROPERTY_NAMES))
        cfg = self._log_configs.get(overrides)
        if cfg is None:
            try:
                cfg = clamp_batch_size(LogConfig.from_properties(dict(overrides), base=self._base_log_config),
                                       self.max_frame_bytes)
            except KafkaError as exc:
                log.warning("topic %s: bad log config (%s); using broker defaults", topic, exc.message)
                cfg = self._base_log_config
            self._log_configs[overrides] = cfg
        return cfg

    # ================================================================ decisions

    def _apply(self, part: Partition, d: Decision, now_ms: int, *, local_isr_change: bool = False) -> None:
        """Carry out one core decision, after its state change: wake
        consumer fetches on an HW move, complete acks=all waiters, send the
        ISR proposal. In the lesson profile the core commits ISR changes at
        once; `local_isr_change` then tells the controller what happened."""
        if d.hw_moved:
            if self.purgatory.watching(part.key):
                self.purgatory.on_hw_move(part.key, part.readable_bytes(d.old_hw, d.new_hw))
            else:
                self.purgatory.touched(part.key)
        for token, code in d.completed:
            token.complete(code)  # type: ignore[attr-defined]
        core = part.core
        if core is None:
            return
        if d.isr_proposal is not None:
            self._submit_isr(part, core)
        elif local_isr_change and d.isr_changed and core.profile.commit_isr_immediately:
            self._notify_isr(part, core)

    def _submit_isr(self, part: Partition, core: PartitionLeader) -> None:
        pending = core.pending
        if pending is None or self._closed:
            return
        items = [{"broker_id": b, "broker_epoch": e}             # this incarnation, if we re-registered (I5)
                 for b, e in core.isr_with_broker_epochs(pending.isr, self.broker_epoch())]
        self._spawn(self._alter_partition(part, core, pending, items))

    async def _alter_partition(self, part: Partition, core: PartitionLeader, pending: Any,
                               items: list[dict]) -> None:
        """Send one ISR proposal and feed the controller's answer back to the
        core (I6): success adopts the controller's ISR; errors go to the core,
        which reverts, stays pending, or asks to resend (after 50 ms)."""
        try:
            result = await self.alter_partition.submit(part.topic, part.index, core.leader_epoch,
                                                       pending.partition_epoch, items)
        except KafkaError as exc:
            if self._closed or part.core is not core:
                return
            now = self.clock()
            d = core.on_alter_partition_error(exc.code, now)
        else:
            if self._closed or part.core is not core:
                return
            now = self.clock()
            code = result.get("error", 0)
            if code == 0:
                d = core.apply_committed_isr(list(result.get("isr", ())), int(result.get("partition_epoch", -1)),
                                             now, leader_epoch=result.get("leader_epoch"))
            else:
                d = core.on_alter_partition_error(_code(code), now)
        resend = d.isr_proposal is not None
        d.isr_proposal = None
        self._apply(part, d, now)
        if resend:
            asyncio.get_running_loop().call_later(_ALTER_PARTITION_RESEND_MS / 1000,
                                                  self._resend_isr, part, core, core.pending)

    def _notify_isr(self, part: Partition, core: PartitionLeader) -> None:
        """Lesson profile: the ISR already changed locally (partition epoch + 1);
        report it to the controller built on the epoch it knows. Its answer is
        not fed back: a refusal shows up as metadata overriding our ISR (I7)."""
        if self._closed:
            return
        items = [{"broker_id": b, "broker_epoch": e}
                 for b, e in core.isr_with_broker_epochs(core.isr, self.broker_epoch())]

        async def send() -> None:
            try:
                result = await self.alter_partition.submit(part.topic, part.index, core.leader_epoch,
                                                           core.partition_epoch - 1, items)
            except KafkaError as exc:
                log.info("%s: reporting the lesson-profile ISR %s failed: %s", part.name, list(core.isr), exc)
                return
            if result.get("error", 0):
                log.info("%s: controller refused the lesson-profile ISR %s: %s", part.name,
                         list(core.isr), result.get("error"))
        self._spawn(send())

    def _resend_isr(self, part: Partition, core: PartitionLeader, pending: Any) -> None:
        if part.core is core and core.pending is pending and pending is not None:
            self._submit_isr(part, core)

    # ================================================================ timers

    def _isr_check(self) -> None:
        """I1/I2: every replica.lag.time.max.ms / 2 over the partitions we lead."""
        now = self.clock()
        for part in list(self._partitions.values()):
            core = part.core
            if core is not None:
                self._apply(part, core.maybe_shrink_isr(now), now, local_isr_change=True)

    async def _checkpoint_hws(self) -> None:
        if self.log_manager is None or not self._partitions:
            return
        hws = {k: p.hw for k, p in self._partitions.items()}
        await asyncio.to_thread(self.log_manager.checkpoint_high_watermarks, hws)

    async def _flush_due(self) -> None:
        """Every _FLUSH_CHECK_MS: hand the LogManager's flusher pass to a worker
        thread when a log's flush policy is due, an epoch checkpoint is due, or
        a truncation lowered a recovery point (so the recovery-point checkpoint
        is rewritten now, not at the next offset checkpoint)."""
        if self.log_manager is None:
            return
        now = self.clock()
        if any(p.log.needs_flush(now) or p.log.epoch_checkpoint_due or p.log.recovery_point_lowered
               for p in self._partitions.values()):
            await asyncio.to_thread(self.log_manager.flush_due, now)

    async def _checkpoint_offsets(self) -> None:
        if self.log_manager is not None and self._partitions:
            await asyncio.to_thread(self.log_manager.checkpoint_offsets)
            await self._snapshot_producers()

    async def _snapshot_producers(self) -> None:
        """Write the producer-state snapshot of each partition whose state
        moved since its last one (Kafka's .snapshot files), so recovery
        scans only the batches after it. A snapshot raced by a truncation
        is deleted again: it may describe removed batches. A partition never
        snapshotted here whose state is empty and starts at its log start (a new
        or emptied partition) gets none: it would spare a recovery nothing, and
        1,000 new partitions cost 3,000 files, each with two fsyncs."""
        todo = [(p, p.producers.snapshot(), p.truncations) for p in self._partitions.values()
                if getattr(p.log, "directory", None) and p.producers.through != p.snapshot_through
                and not p.log.closed and not _nothing_to_snapshot(p)]
        if not todo:
            return

        def write() -> list[Partition]:
            written = []
            for part, data, _ in todo:
                try:
                    write_snapshot(part.log.directory, data)
                    written.append(part)
                except OSError as exc:
                    if not part.log.closed:       # (a log deleted meanwhile has nothing to keep)
                        log.warning("%s: writing the producer-state snapshot failed: %s", part.name, exc)
            return written
        written = set(map(id, await asyncio.to_thread(write)))
        for part, data, truncations in todo:
            if id(part) not in written:
                continue
            if part.truncations != truncations:
                await asyncio.to_thread(delete_snapshot, part.log.directory)
            else:
                part.snapshot_through = data["through"]

    def _producer_expiration_ms(self) -> int:
        """producer.id.expiration.ms as the metadata's dynamic broker configs leave it."""
        try:
            return max(1, self.image.effective_broker_config().get_int("producer.id.expiration.ms"))
        except ConfigError as exc:
            log.warning("producer.id.expiration.ms: %s; using 1 day", exc)
            return 86_400_000

    def _expire_producers(self) -> None:
        """Every producer.id.expiration.check.interval.ms, on every replica here (Kafka's
        PeriodicProducerExpirationCheck, leaders and followers alike): P-EXPIRE with the
        producer.id.expiration.ms in effect now (a dynamic broker config)."""
        now = self.clock()
        expiration = self._producer_expiration_ms()
        expired = partitions = 0
        for part in list(self._partitions.values()):
            gone = part.expire_producers(now, expiration)
            if gone:
                expired += len(gone)
                partitions += 1
        if expired:
            log.info("expired %d producer id states on %d partitions (producer.id.expiration.ms=%d)",
                     expired, partitions, expiration)

    def _retention(self) -> None:
        """Delete whole segments below the HW that breach retention (the log's rules)."""
        now = self.clock()
        for part in list(self._partitions.values()):
            if part.log.delete_old_segments(now, high_watermark=part.hw):
                part.on_log_start_moved()
                self.purgatory.on_state_change(part.key)      # F6: parked fetches see the new log start

    # ================================================================ flushing

    async def _flush_through(self, part: Partition, offset: int) -> None:
        """fsync `part` up to `offset`, sharing one flush among concurrent callers."""
        lg = part.log
        key = part.key
        while lg.recovery_point < offset <= lg.log_end_offset and not lg.closed:
            fut = self._flushing.get(key)
            if fut is None:
                fut = asyncio.ensure_future(asyncio.to_thread(lg.flush))
                self._flushing[key] = fut
                fut.add_done_callback(lambda f, k=key: self._flushing.pop(k, None)
                                      if self._flushing.get(k) is f else None)
            await asyncio.shield(fut)

    # -- FetcherHooks -----------------------------------------------------------

    def flush(self, parts: list[Partition]) -> Awaitable[Any] | None:
        """Follower appends are fsynced before the next Fetch acknowledges them (with
        minibroker.fsync.before.ack); None when there is nothing to wait for."""
        if self.fsync_before_ack:
            return asyncio.gather(*(self._flush_through(p, p.leo) for p in parts))
        return None

    def on_follower_progress(self, part: Partition, old_hw: int, appended_bytes: int) -> None:
        """R9: a follower's HW rose: wake consumer reads it serves (KIP-392)."""
        if self.purgatory.watching(part.key):
            if appended_bytes:
                self.purgatory.on_append(part.key, appended_bytes)
            new_hw = part.hw
            if new_hw > old_hw:
                self.purgatory.on_hw_move(part.key, part.readable_bytes(old_hw, new_hw))
        else:
            self.purgatory.touched(part.key)

    def state_changes(self) -> int:
        """The purgatory's change count: it moves with every append, HW move, truncation,
        log start move and role change on any partition."""
        return self.purgatory.changes

    def changed_since(self, count: int) -> set[Any] | None:
        return self.purgatory.changed_since(count)

    def on_follower_truncated(self, part: Partition) -> None:
        self.purgatory.on_state_change(part.key)

    # ================================================================ completions

    def _defer(self, action: Callable[[], None]) -> None:
        """Triggered when a delayed request can complete (a parked fetch woken, an acks=all produce
        resolved): it runs after the handler that caused it has finished, never inside it (Kafka's
        ActionQueue), so a completion never sees a handler's half-made change and never dispatches
        into it. At that handler's end, or on the loop's next turn when no handler is running."""
        self._actions.append(action)
        if not self._depth and not self._acting and not self._actions_soon:
            self._actions_soon = True
            self._running_loop().call_soon(self._run_actions_soon)

    def _run_actions_soon(self) -> None:
        self._actions_soon = False
        self._run_actions()

    def _leave(self) -> None:
        """A handler (or a step of one) ends: the completions it caused run now."""
        self._depth -= 1
        if not self._depth and self._actions:
            self._run_actions()

    def _run_actions(self) -> None:
        """Each deferred completion in turn; one that a completion defers runs in the same pass.
        A handler may run them early, where its own state is complete (a produce once appended, a
        fetch once read): a completion only reads and answers (the request server admits the
        requests an answer lets in on a later turn), so it cannot change what the handler holds.
        Not re-entered."""
        if self._acting:
            return
        self._acting = True
        try:
            actions = self._actions
            while actions:
                action = actions.popleft()
                try:
                    action()
                except Exception:
                    log.exception("completing a delayed request failed")
        finally:
            self._acting = False

    # ================================================================ Produce

    def handle_produce(self, ctx: RequestContext | None, body: dict) -> Reply | Awaitable[dict | None]:
        """P1-P8, along Kafka's ReplicaManager.appendRecords seams: the acks value is
        validated once (isValidRequiredAcks), each partition appended (appendToLocalLog,
        with the core's min-ISR check), then a delayed produce is parked only when
        required (delayedProduceRequestRequired: acks=-1 and some partition appended).
        acks=0: no response, and a failed partition closes the connection; acks=1:
        answer after the local append; acks=-1: until the core resolves every appended
        partition or timeout_ms passes.

        A produce of fewer than REQUEST_SLICE partitions, none compressed, whose connection
        has no earlier produce still appending, appends in this call (the common case);
        the others append in `_produce_slowly`, which yields to the loop between pieces."""
        conn = ctx.conn if ctx is not None else None
        before = getattr(conn, "produce_appending", None)
        if (before is not None and not before.done()) or not _appends_at_once(body["topics"], self._partitions):
            # One connection's produces append in arrival order, as Kafka handles a connection's requests
            # one at a time: this one may yield while it appends, so the next waits for it (from now:
            # the next may arrive before the task that appends this one first runs).
            appending: asyncio.Future[None] | None = None
            if conn is not None:
                appending = self._running_loop().create_future()
                conn.produce_appending = appending
            return self._produce_slowly(ctx, appending, before, body)
        self._depth += 1
        try:
            acks = body["acks"]
            valid_acks = acks in (-1, 0, 1)
            now = self.clock()
            topics_out: list[dict] = []
            appended: list[_LocalAppend] = []
            failed = False
            for t in body["topics"]:
                plist = []
                for p in t["partitions"]:
                    entry = self._append_entry(t["topic"], p, acks, valid_acks, now, appended)
                    failed = failed or entry["error"] != 0
                    plist.append(entry)
                topics_out.append({"topic": t["topic"], "partitions": plist})
            self._run_actions()                 # the fetches the append woke answer first
            return self._after_append(ctx, body, now, topics_out, appended, failed)
        finally:
            self._leave()

    async def _produce_slowly(self, ctx: RequestContext | None, appending: asyncio.Future[None] | None,
                              before: asyncio.Future[None] | None, body: dict) -> dict | None:
        """`handle_produce` for a produce that may yield while it appends (many partitions, a compressed
        batch, an earlier produce of its connection still appending): after `before`, the connection's
        previous produce; `appending` is resolved once this one has appended."""
        acks = body["acks"]
        valid_acks = acks in (-1, 0, 1)
        topics_out: list[dict] = []
        appended: list[_LocalAppend] = []
        failed = False
        try:
            if before is not None and not before.done():
                await asyncio.shield(before)
            now = self.clock()
            done = 0
            for t in body["topics"]:
                plist = []
                for p in t["partitions"]:
                    done += 1
                    if done % REQUEST_SLICE == 0 or is_compressed(p["records"]):
                        # issue 10: no request holds the loop; a compressed batch's check may
                        # decompress up to 16 x max.message.bytes, so each gets its own turn
                        await asyncio.sleep(0)
                    if valid_acks:
                        try:
                            p = await self._recompressed(t["topic"], p, acks)
                        except KafkaError as exc:
                            failed = True
                            plist.append(_produce_entry(p["partition"], exc.code, exc.message))
                            continue
                    self._depth += 1
                    try:
                        entry = self._append_entry(t["topic"], p, acks, valid_acks, now, appended)
                    finally:
                        self._leave()
                    failed = failed or entry["error"] != 0
                    plist.append(entry)
                topics_out.append({"topic": t["topic"], "partitions": plist})
        finally:
            if appending is not None and not appending.done():
                appending.set_result(None)
        return await self._after_append(ctx, body, now, topics_out, appended, failed)

    async def _recompressed(self, topic: str, p: dict, acks: int) -> dict:
        """One partition of a Produce with its batches in the codec its log's compression.type names,
        rebuilt in a worker thread when they are not (validated there first: KafkaError as the append's).
        Left as it came where the append refuses it before validating (not led here, P2; min ISR, P3)."""
        part = self._partitions.get((topic, p["partition"]))
        core = part.core if part is not None else None
        if part is None or core is None or core.check_produce(acks) != ErrorCode.NONE:
            return p
        target = part.log.config.target_codec
        if target is None or not needs_recompression(p["records"], target):
            return p
        return {**p, "records": await asyncio.to_thread(recompress, p["records"], target,
                                                        part.log.config.max_message_bytes)}

    def _append_entry(self, topic: str, p: dict, acks: int, valid_acks: bool, now: int,
                      appended: list[_LocalAppend]) -> dict:
        """One partition of a Produce: its response entry; an append joins `appended`."""
        if not valid_acks:
            return _produce_entry(p["partition"], ErrorCode.INVALID_REQUIRED_ACKS,
                                  f"acks must be -1, 0 or 1, not {acks}")
        res = self._append_to_local_log(topic, p, acks, now)
        if res.part is not None:
            appended.append(res)
        return res.entry

    def _after_append(self, ctx: RequestContext | None, body: dict, now: int, topics_out: list[dict],
                      appended: list[_LocalAppend], failed: bool) -> Reply | Awaitable[dict | None]:
        """What a Produce does once its partitions are appended: flush them when the topic or broker
        says so (then answer from a task), else answer at once (acks=0 or 1) or park (acks=-1)."""
        acks = body["acks"]
        flushes = [(r.part, r.next_offset, r.entry) for r in appended
                   if r.part is not None and (self.fsync_before_ack or
                                              (acks == -1 and r.part.log.config.flush_on_acks_all))]
        if flushes:
            return self._flush_then_answer(ctx, body, now, topics_out, appended, failed, flushes)
        if acks == 0:
            if failed and ctx is not None:
                ctx.conn.abort("acks=0 produce failed on a partition; closing so the client refreshes metadata")
            return Reply.of(None)
        return self._maybe_delay_produce(acks, appended, now, body["timeout_ms"], {"topics": topics_out})

    async def _flush_then_answer(self, ctx: RequestContext | None, body: dict, now: int, topics_out: list[dict],
                                 appended: list[_LocalAppend], failed: bool,
                                 flushes: list[tuple[Partition, int, dict]]) -> dict | None:
        acks = body["acks"]
        if acks == 0:
            if failed and ctx is not None:
                ctx.conn.abort("acks=0 produce failed on a partition; closing so the client refreshes metadata")
            else:
                await self._flush_all(flushes)
            return None
        reply = self._maybe_delay_produce(acks, appended, now, body["timeout_ms"], {"topics": topics_out})
        try:
            flush_errors = await self._flush_all(flushes)
            resp = await reply
        except BaseException:
            reply.cancel()
            raise
        for entry, code, message in flush_errors:          # not acknowledged if not on disk
            entry["error"], entry["message"] = code, message
        return resp

    def _append_to_local_log(self, topic: str, p: dict, acks: int, now: int) -> _LocalAppend:
        """One partition of a Produce (Kafka appendToLocalLog / appendRecordsToLeader):
        hosted and led here (P2), the core's min-ISR check for acks=-1 (P3), the append
        stamped with our epoch (P4), then the core's decision carried out."""
        key = (topic, p["partition"])
        part = self._partitions.get(key)
        core = part.core if part is not None else None
        if part is None or core is None:
            return _LocalAppend(_produce_entry(p["partition"], self._not_hosted_error(key)))
        code = core.check_produce(acks)
        if code != ErrorCode.NONE:
            return _LocalAppend(_produce_entry(p["partition"], code, f"ISR {list(core.isr)} is below "
                                                                     f"min.insync.replicas {core.effective_min_isr}"))
        records = p["records"]
        try:
            first, last, d, append_time = part.append_as_leader(records, now)
        except KafkaError as exc:
            refused = _produce_entry(p["partition"], exc.code, exc.message)
            if exc.record_errors:                   # Kafka's RecordErrors: the records at fault
                refused["record_errors"] = [[i, why] for i, why in exc.record_errors]
            return _LocalAppend(refused)
        entry = _produce_entry(p["partition"], ErrorCode.NONE)
        entry["base_offset"], entry["log_start_offset"] = first, part.log_start_offset
        if append_time >= 0:                # a LogAppendTime stamp, or a duplicate's stored max timestamp
            entry["log_append_time_ms"] = append_time
        if d is not None:                 # None: a duplicate idempotent batch, nothing appended
            if self.purgatory.watching(key):
                self.purgatory.on_append(key, len(records))
            else:
                self.purgatory.touched(key)
            self._apply(part, d, now)
        return _LocalAppend(entry, part, last + 1, core)

    def _maybe_delay_produce(self, acks: int, appended: list[_LocalAppend], now: int, timeout_ms: int,
                             resp: dict) -> Reply:
        """Kafka delayedProduceRequestRequired: acks=-1 with at least one partition appended
        parks one DelayedProduce with a waiter per appended partition (the core resolves it);
        `resp` is answered once every one is resolved or timeout_ms passes."""
        if acks != -1 or not appended:
            return Reply.of(resp)
        parked = _ParkedProduce(self, resp)
        delayed = parked.delayed
        registered = parked.registered
        for r in appended:
            part, core = r.part, r.core
            if part is None or core is None:
                continue
            if part.core is not core:
                # Leadership moved while the request yielded to the loop, before this waiter
                # existed to be failed: not acknowledged (Kafka's checkEnoughReplicasReachOffset).
                r.entry["error"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                r.entry["message"] = "leadership moved before the write was replicated"
                continue
            w = delayed.add(r.entry, part.key)
            registered.append((core, w))
            self._apply(part, core.add_waiter(r.next_offset, w, now), now)
        delayed.arm()
        if not delayed.done:
            parked.timer = self._running_loop().call_later(max(timeout_ms, 0) / 1000, parked.expire)
        return parked.reply

    async def _flush_all(self, flushes: list[tuple[Partition, int, dict]]) -> list[tuple[dict, int, str]]:
        """fsync before acknowledging (minibroker.fsync.before.ack); returns the
        entries whose flush failed, with KAFKA_STORAGE_ERROR."""
        errors: list[tuple[dict, int, str]] = []

        async def one(part: Partition, offset: int, entry: dict) -> None:
            try:
                await self._flush_through(part, offset)
            except KafkaError as exc:
                errors.append((entry, int(exc.code), exc.message))
            except OSError as exc:
                errors.append((entry, int(ErrorCode.KAFKA_STORAGE_ERROR), str(exc)))
        await asyncio.gather(*(one(*f) for f in flushes))
        return errors

    def _not_hosted_error(self, key: PartitionKey) -> ErrorCode:
        """P2: a known partition without a local leader replica is
        NOT_LEADER_OR_FOLLOWER; an unknown one UNKNOWN_TOPIC_OR_PARTITION."""
        if key in self.image.partitions:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # ================================================================ Fetch

    def handle_fetch(self, ctx: RequestContext, body: dict) -> Reply:
        """F1-F12. Followers (replica_id >= 0, authenticated only) read to
        the LEO and update their state on the leader on this initial read
        only; consumers read to the HW of the replica they hit. Parks until
        min_bytes are readable, a partition's state changes, or max_wait_ms.

        Answers with a Reply, completed in this call when the read answers, or by the
        completion that wakes the parked fetch. A Fetch of more than REQUEST_SLICE partitions
        is read (and re-read) a slice per loop turn."""
        replica_id = body["replica_id"]
        if replica_id >= 0 and not ctx.authenticated:
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             f"Fetch as replica {replica_id} needs an authenticated inter-broker connection")
        call = _FetchCall(body, replica_id)
        call.reply = Reply(on_cancel=lambda: self._fetch_cancelled(call))
        requests = _one_fetch_entry(body["topics"])
        if requests is not None:
            self._fetch_step(call, self._fetch_open, requests)
        else:
            self._fetch_step(call, self._fetch_dedupe, {}, 0, 0)
        return call.reply

    def _fetch_step(self, call: _FetchCall, step: Callable[..., None], *args: Any) -> None:
        """Run one step of a Fetch as a handler (its completions run when it ends); a step that
        raises answers the Fetch with that error."""
        if call.reply.done or call.reply.cancelled:
            return
        self._depth += 1
        try:
            step(call, *args)
        except Exception as exc:
            self._fetch_close(call)
            call.reply.fail(exc)
        finally:
            self._leave()

    def _fetch_next_turn(self, call: _FetchCall, step: Callable[..., None], *args: Any) -> None:
        """The rest of a large Fetch goes on at the loop's next turn (issue 10: no request holds the loop)."""
        call.later = self._running_loop().call_soon(self._fetch_step, call, step, *args)

    def _fetch_dedupe(self, call: _FetchCall, out: dict[PartitionKey, tuple[str, dict]], ti: int, pi: int) -> None:
        """A partition named twice is fetched once, as Kafka's FetchRequest map keeps one entry per
        partition (the first position, the last entry's fields); 16 slices of entries per turn."""
        topics = call.body["topics"]
        n = 0
        while ti < len(topics):
            t = topics[ti]
            topic, parts = t["topic"], t["partitions"]
            while pi < len(parts):
                p = parts[pi]
                out[(topic, p["partition"])] = (topic, p)
                pi += 1
                n += 1
                if n >= 16 * REQUEST_SLICE:
                    self._fetch_next_turn(call, self._fetch_dedupe, out, ti, pi)
                    return
            ti += 1
            pi = 0
        self._fetch_open(call, list(out.values()))

    def _fetch_open(self, call: _FetchCall, requests: list[tuple[str, dict]]) -> None:
        """The replica fetch session (KS1, KS3) and, for an incremental Fetch, which quiet
        partitions need no read; then the initial read."""
        body = call.body
        now = self.clock()
        call.now = now
        if call.replica_id >= 0:
            opened = self.fetch_sessions.open(call.replica_id, body.get("session_id", INVALID_SESSION_ID),
                                              body.get("session_epoch", FINAL_EPOCH), requests,
                                              body.get("forgotten_topics"))
            if opened.error != ErrorCode.NONE:
                call.reply.complete({"error": int(opened.error), "message": opened.message,
                                     "session_id": INVALID_SESSION_ID, "throttle_time_ms": 0, "topics": []})
                return
            session, requests, call.full = opened.session, opened.requests, opened.full
            call.session = session
            call.stamps = []
            call.changes_before = self.purgatory.changes
            if session is not None and not call.full and session.quiet:
                since = self.purgatory.changed_since(session.quiet_at)
                if since is not None and self._refetch_quiet(session, body, now, since):
                    call.moved = since
                    call.skipped = True
                    quiet = session.quiet
                    requests = [e for k, e in session.partitions.items() if k not in quiet or k in since]
        call.requests = requests
        self._fetch_budget(call)
        self._fetch_read(call, 0)

    def _fetch_budget(self, call: _FetchCall) -> None:
        """The record bytes the answer to `call` may carry, for its number of entries: the frame's room,
        and within it the request's max_bytes (both depend on nothing else)."""
        room = fetch_records_budget(self.max_frame_bytes, self.max_frame_bytes, len(call.requests))
        call.room = room
        call.budget = max(0, min(call.body["max_bytes"], room))       # fetch_records_budget(max_bytes, ...)

    def _fetch_read(self, call: _FetchCall, lo: int) -> None:
        """The initial read, REQUEST_SLICE partitions per turn. For an incremental session Fetch, a
        partition the follower did not name whose state has not moved since its last quiet read is
        answered as then, without reading (`_fetched_again`)."""
        requests, body, now = call.requests, call.body, call.now
        stamps, results = call.stamps, call.results
        quiet = call.session.quiet if call.session is not None and not call.full else None
        n = len(requests)
        hi = n if n - lo <= REQUEST_SLICE else lo + REQUEST_SLICE
        respond_now = call.respond_now
        partitions = self._partitions
        for i in range(lo, hi):
            topic, p = requests[i]
            key = (topic, p["partition"])
            part = partitions.get(key)
            if quiet:
                prev = quiet.get(key)
                if prev is not None:
                    stamp = _stamp(part)
                    if stamp == prev[0]:
                        r = self._fetched_again(part, p, body, now, prev[1])   # type: ignore[arg-type]
                        stamps.append(stamp)          # type: ignore[union-attr]
                        respond_now = respond_now or bool(r.error)
                        results.append(r)
                        continue
            if stamps is not None:          # the state the read sees (before its side effects)
                stamps.append(_stamp(part))
            r = self._read_within(call, part, key, p, True)
            if r.error or r.diverging_epoch is not None or r.preferred_read_replica >= 0:
                respond_now = True
            results.append(r)
        call.respond_now = respond_now
        total = call.total
        if hi < len(requests):
            self._fetch_next_turn(call, self._fetch_read, hi)
            return
        if (respond_now or body["max_wait_ms"] <= 0 or not (requests or call.skipped)
                or total >= body["min_bytes"]):
            self._fetch_answer(call)
            return
        self._run_actions()                     # what the read completed (an acks=all produce) answers first
        self._fetch_park(call)

    def _fetch_park(self, call: _FetchCall) -> None:
        """F9: park until min_bytes are readable, a watched partition's state changes or max_wait_ms."""
        body, session = call.body, call.session
        standing = self._standing_watch(session) if session is not None else None
        needed = body["min_bytes"] - call.total

        def woken() -> None:
            self._defer(lambda: self._fetch_step(call, self._fetch_woken))
        if standing is not None and standing.op is None:       # the session's partitions, watched already
            op = DelayedFetch([], needed, follower=True, on_complete=woken)
        else:
            op = DelayedFetch(list(session.partitions) if call.skipped and session is not None
                              else [(t, p["partition"]) for t, p in call.requests],
                              needed, follower=call.replica_id >= 0, on_complete=woken)
        if call.throttled:
            op.throttled = frozenset(call.throttled)               # RQ4: their appends do not complete it
        call.op, call.standing = op, standing
        self.purgatory.watch(op, standing)
        # What moved while they were read (None: more than the change log holds, or unknown); what
        # moves from now on is in op.changed.
        call.during_read = self.purgatory.changed_since(call.changes_before) if call.stamps is not None else None
        call.later = self._running_loop().call_later(max(body["max_wait_ms"], 0) / 1000, self._fetch_expired, call)

    def _fetch_expired(self, call: _FetchCall) -> None:
        """max_wait_ms passed: the parked Fetch answers with what it has."""
        call.later = None
        if call.op is not None:
            self._depth += 1
            try:
                call.op.complete()
            finally:
                self._leave()

    def _fetch_close(self, call: _FetchCall) -> None:
        """Unregister a parked Fetch and stop its timer (or its next slice). Drops the call's
        reference to its op, whose completion refers back to the call."""
        if call.later is not None:
            call.later.cancel()
            call.later = None
        op = call.op
        if op is not None:
            op.done = True
            self.purgatory.close(op, call.standing)
            call.op = None
            call.standing = None

    def _fetch_cancelled(self, call: _FetchCall) -> None:
        """Its connection closed: nobody wants the answer."""
        self._fetch_close(call)

    def _fetch_woken(self, call: _FetchCall) -> None:
        """A parked Fetch completed (enough bytes, a state change, max_wait_ms or shutdown): read again
        what may have moved, then answer."""
        op = call.op
        assert op is not None
        changed_op = op.changed
        self._fetch_close(call)
        if call.stamps is None:
            call.results, call.total, call.respond_now = [], 0, False
            call.now = self.clock()
            self._fetch_reread_all(call, 0)
            return
        during = call.during_read
        changed = None if during is None or changed_op is None else changed_op | during
        session = call.session
        if call.skipped and session is not None and (changed is None or changed):
            self._readmit_quiet(session, call.requests, call.results, call.stamps, changed, call.moved)
            self._fetch_budget(call)            # more entries, less room (`total` holds: quiet results carry none)
        if changed is None or changed:
            call.now = self.clock()
            call.changed = changed
            self._fetch_reread(call, 0)
            return
        self._fetch_answer(call)

    def _fetch_reread_all(self, call: _FetchCall, lo: int) -> None:
        """A consumer's parked Fetch: every partition read again, REQUEST_SLICE per turn."""
        requests, results = call.requests, call.results
        n = len(requests)
        hi = n if n - lo <= REQUEST_SLICE else lo + REQUEST_SLICE
        partitions = self._partitions
        for i in range(lo, hi):
            topic, p = requests[i]
            key = (topic, p["partition"])
            results.append(self._read_within(call, partitions.get(key), key, p, False))
        if hi < len(requests):
            self._fetch_next_turn(call, self._fetch_reread_all, hi)
            return
        self._fetch_answer(call)

    def _fetch_reread(self, call: _FetchCall, lo: int) -> None:
        """After a parked replica Fetch: read again only the partitions whose state moved
        while it waited (the others would read the same): those in `changed` when the
        purgatory saw every move, else those whose stamp differs. An idle follower of
        1,000 partitions costs the leader one read of each per Fetch instead of two."""
        requests, results, stamps = call.requests, call.results, call.stamps
        assert stamps is not None
        changed = call.changed
        n = len(requests)
        hi = n if n - lo <= REQUEST_SLICE else lo + REQUEST_SLICE
        partitions = self._partitions
        for i in range(lo, hi):
            topic, p = requests[i]
            key = (topic, p["partition"])
            if changed is not None and key not in changed:
                continue
            part = partitions.get(key)
            stamp = _stamp(part)
            if changed is None and stamps[i] is not None and stamp == stamps[i]:
                continue
            call.total -= len(results[i].records)
            stamps[i] = stamp
            results[i] = self._read_within(call, part, key, p, False)
        if hi < len(requests):
            self._fetch_next_turn(call, self._fetch_reread, hi)
            return
        self._fetch_answer(call)

    def _fetch_answer(self, call: _FetchCall) -> None:
        session = call.session
        if session is not None and call.stamps is not None:
            self._remember_quiet(session, call.requests, call.results, call.stamps, call.changes_before)
        if self.leader_quota.active and call.replica_id >= 0 and call.total:
            self._record_throttled(call)
        call.reply.complete(self._fetch_response(call.requests, call.results, session, call.full))

    def _record_throttled(self, call: _FetchCall) -> None:
        """RQ3: the record bytes a follower Fetch carries of the partitions throttled on this leader."""
        quota = self.leader_quota
        n = sum(len(r.records) for (topic, p), r in zip(call.requests, call.results, strict=True)
                if r.records and quota.is_throttled(topic, p["partition"]))
        if n:
            quota.record(n, self.clock())

    def _standing_watch(self, session: FetchSession) -> StandingWatch:
        """The follower's standing watch, registered on its session's partitions as they are now
        (re-registered only when the session or its set of partitions changed)."""
        entry = self._standing.get(session.replica_id)
        if entry is not None and entry[0] is session and entry[1] == session.generation:
            return entry[2]
        watch = entry[2] if entry is not None else StandingWatch()
        self.purgatory.stand(watch, session.partitions)
        self._standing[session.replica_id] = (session, session.generation, watch)
        return watch

    def _refetch_quiet(self, session: FetchSession, body: dict, now: int, moved: set[Any]) -> bool:
        """An incremental Fetch: the session's quiet partitions not in `moved` (the partitions
        whose state moved since their stamps were known to hold, `quiet_at`) would read as
        then, so only the follower-fetch rule is applied to each (`on_follower_refetch`: its
        fetch keeps it caught up, I3/L1) and they are left out of the read and the response
        (KS4: nothing to tell). Done at most every `quiet_refresh_ms` with the same broker
        epoch (KS3): in between, True without asking the cores. False when some core needs the
        full rule: the caller then reads them all."""
        replica, broker_epoch = body["replica_id"], body["broker_epoch"]
        last, epoch = session.quiet_refreshed
        if epoch == broker_epoch and 0 <= now - last < self.quiet_refresh_ms:
            return True
        parts = session.partitions
        for key, q in session.quiet.items():
            if key in moved:
                continue
            p = parts[key][1]
            if not q[2].on_follower_refetch(replica, p["fetch_offset"], now, broker_epoch=broker_epoch,
                                            log_start_offset=p["log_start_offset"]):
                return False
        session.quiet_refreshed = (now, broker_epoch)
        return True

    @staticmethod
    def _readmit_quiet(session: FetchSession, requests: list[tuple[str, dict]], results: list[ReadResult],
                       stamps: list[tuple[Any, ...] | None], changed: set[PartitionKey] | None,
                       moved: set[Any]) -> None:
        """After a park that left the quiet partitions out (all but those in `moved`, read
        already): those that moved while it waited (all, when the purgatory did not see every
        move) rejoin the request with their quiet stamp and result, for `_fetch_reread`."""
        parts, quiet = session.partitions, session.quiet
        for key in quiet if changed is None else sorted(k for k in changed if k in quiet):
            if key not in moved:
                stamp, r, _core = quiet[key]
                requests.append(parts[key])
                results.append(r)
                stamps.append(stamp)

    def _remember_quiet(self, session: FetchSession, requests: list[tuple[str, dict]], results: list[ReadResult],
                        stamps: list[tuple[Any, ...] | None], changes_start: int) -> None:
        """After a session Fetch: the partitions whose follower is at the LEO with nothing to
        read or report, with the state they were read in (`_fetch_read` answers them again
        without reading while neither moves). Every quiet stamp now holds unless its
        partition moved after change count `changes_start` (read before any stamp of this
        Fetch was taken or trusted): the next Fetch skips those the purgatory's change log
        does not name since then (`_refetch_quiet`)."""
        quiet = session.quiet
        parts = self._partitions
        for (topic, p), r, stamp in zip(requests, results, stamps, strict=True):
            key = (topic, p["partition"])
            if (stamp is not None and r.error == ErrorCode.NONE and not r.records and r.diverging_epoch is None
                    and p["fetch_offset"] == stamp[2]):
                part = parts.get(key)
                if part is not None and part.core is not None:
                    quiet[key] = (stamp, r, part.core)
                    continue
            quiet.pop(key, None)
        session.quiet_at = changes_start

    def _fetched_again(self, part: Partition, p: dict, body: dict, now: int, quiet: ReadResult) -> ReadResult:
        """A session partition the follower did not name, in the state of its last quiet read:
        the same answer, after the follower-fetch rule (its fetch keeps it caught up, I3/L1)."""
        core = part.core
        assert core is not None
        if core.on_follower_refetch(body["replica_id"], p["fetch_offset"], now, broker_epoch=body["broker_epoch"],
                                    log_start_offset=p["log_start_offset"]):
            return quiet
        d = core.on_follower_fetch(body["replica_id"], p["fetch_offset"], now, broker_epoch=body["broker_epoch"],
                                   log_start_offset=p["log_start_offset"],
                                   has_leader_epoch=p["current_leader_epoch"] >= 0)
        if d.error != ErrorCode.NONE:
            return ReadResult(d.error, quiet.high_watermark, quiet.log_start_offset)
        self._apply(part, d, now, local_isr_change=True)
        return quiet

    def _read_within(self, call: _FetchCall, part: Partition | None, key: PartitionKey, p: dict, initial: bool
                     ) -> ReadResult:
        """One partition of a Fetch (`part` is the hosted replica of `key`, or None), read within what the
        Fetch has left (partition_max_bytes, the request's budget and the frame's room); `call.total`
        counts the record bytes taken. A KIP-74 first batch that cannot fit the frame beside the other
        entries is left out. `initial`: the Fetch's first read (a follower's fetch is applied then only)."""
        body, now, total = call.body, call.now, call.total
        max_bytes = call.budget - total
        pmax = p["partition_max_bytes"]
        if pmax < max_bytes:
            max_bytes = pmax
        if part is None or part.role == NONE:
            return ReadResult(self._not_hosted_error(key))
        epoch = p["current_leader_epoch"]
        if epoch >= 0 and epoch != part.leader_epoch:                 # F3, before the leader check
            return ReadResult(part.check_leader_epoch(epoch))
        replica_id = body["replica_id"]
        offset = p["fetch_offset"]
        core = part.core
        if replica_id >= 0:
            if core is None:
                return ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            hw, log_start = core.hw, part.log.log_start_offset       # F7: before side effects
            err, div = part.divergence(offset, p["last_fetched_epoch"])
            if err:
                return ReadResult(err, hw, log_start)
            if div is not None:
                return ReadResult(ErrorCode.NONE, hw, log_start, diverging_epoch=div)
            if initial:
                d = core.on_follower_fetch(replica_id, offset, now, broker_epoch=body["broker_epoch"],
                                           log_start_offset=p["log_start_offset"], has_leader_epoch=epoch >= 0)
                if d.error:
                    return ReadResult(d.error, hw, log_start)
                self._apply(part, d, now, local_isr_change=True)
                if self._low_watermark_waits:
                    self._maybe_complete_delete_records(part)
            quota = self.leader_quota
            if quota.active and quota.maybe_throttle(key[0], key[1], replica_id in core.isr, now):   # RQ4
                if call.throttled is None:
                    call.throttled = set()
                call.throttled.add(key)
                return ReadResult(ErrorCode.NONE, hw, log_start)
            limit = part.log.log_end_offset
        else:
            rack = body["rack_id"]
            if core is None:
                if not rack:                                          # F2: no client metadata
                    return ReadResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                hw = part.hw                                          # FF4: our own HW
            else:
                hw = core.hw
                if rack and self.rack_aware:
                    pref = self._preferred_read_replica(part, core, offset, rack)
                    if pref != self.node_id:                          # FF3: redirect, no read
                        return ReadResult(ErrorCode.NONE, hw, part.log_start_offset,
                                          preferred_read_replica=pref)
            log_start = part.log.log_start_offset
            limit = hw
        try:
            records = part.read(offset, max_bytes if max_bytes > 0 else 0, limit, total == 0)
        except KafkaError as exc:
            return ReadResult(_code(exc.code), hw, log_start, message=exc.message)  # type: ignore[arg-type]
        size = len(records)
        if size:
            if total + size > call.room:
                records = b""
            else:
                call.total = total + size
        return ReadResult(ErrorCode.NONE, hw, log_start, records)

    def _preferred_read_replica(self, part: Partition, core: PartitionLeader, offset: int, rack: str) -> int:
        """FF1-FF2: the rule is minibroker.replication.read_replica.select_read_replica."""
        return select_read_replica(self.node_id, self.rack, rack, offset, core.isr, core.followers,
                                   {r: self._broker_view(r) for r in core.isr if r != self.node_id})

    def _broker_view(self, broker_id: int) -> BrokerView | None:
        b = self.image.brokers.get(broker_id)
        return None if b is None else BrokerView(b.rack, b.fenced, b.in_controlled_shutdown, b.broker_epoch)

    def _fetch_response(self, requests: list[tuple[str, dict]], results: list[ReadResult],
                        session: FetchSession | None = None, full: bool = True) -> dict:
        """Every partition read, or, for an incremental Fetch of a session, only those with
        news for the follower (KIP-227)."""
        topics: dict[str, list[dict]] = {}
        for (topic, p), r in zip(requests, results, strict=True):
            if session is not None and not session.include((topic, p["partition"]), full, r.error, r.high_watermark,
                                                           r.log_start_offset, bool(r.records),
                                                           r.diverging_epoch is not None):
                continue
            entry = {
                "partition": p["partition"], "error": int(r.error), "high_watermark": r.high_watermark,
                "last_stable_offset": r.high_watermark, "log_start_offset": r.log_start_offset,
                "diverging_epoch": ({"epoch": r.diverging_epoch[0], "end_offset": r.diverging_epoch[1]}
                                    if r.diverging_epoch is not None else None),
                "preferred_read_replica": r.preferred_read_replica,
                "current_leader": None, "records": r.records,
            }
            if r.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
                rec = self.image.partitions.get((topic, p["partition"]))
                if rec is not None:
                    entry["current_leader"] = {"leader_id": rec.leader, "leader_epoch": rec.leader_epoch}
            if r.message:
                entry["message"] = r.message
            topics.setdefault(topic, []).append(entry)
        return {"error": 0, "throttle_time_ms": 0,
                "session_id": session.session_id if session is not None else INVALID_SESSION_ID,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    # ================================================================ DeleteRecords

    async def handle_delete_records(self, body: dict) -> dict:
        """DeleteRecords (Kafka's ReplicaManager.deleteRecords): on each partition led here, the log start
        offset moves to the requested offset (-1: the HW; negative or above the HW: OFFSET_OUT_OF_RANGE);
        followers learn it from their next Fetch answer and report theirs. A partition is answered with its
        low watermark once every alive replica's log start reached the offset (DelayedDeleteRecords), or
        REQUEST_TIMED_OUT after timeout_ms; NOT_LEADER_OR_FOLLOWER as soon as this broker stops leading it."""
        timeout_s = max(body.get("timeout_ms", 30_000), 0) / 1000
        out: list[dict] = []
        waits: list[tuple[dict, Partition, int, asyncio.Future[bool]]] = []
        async for t, plist, p in _each_partition(body, out):
            entry: dict = {"partition": p["partition"], "low_watermark": -1, "error": 0}
            plist.append(entry)
            key = (t["topic"], p["partition"])
            part = self._partitions.get(key)
            core = part.core if part is not None else None
            if part is None or core is None:
                entry["error"] = int(self._not_hosted_error(key) if part is None or part.role == NONE
                                     else ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            offset = core.hw if p["offset"] == -1 else p["offset"]
            if not 0 <= offset <= core.hw:
                entry["error"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                entry["message"] = (f"Cannot increment the log start offset to {offset} of partition {part.name} "
                                    f"since it is larger than the high watermark {core.hw}"
                                    if offset > core.hw else f"the deletion offset {offset} is negative")
                continue
            if part.log.maybe_increment_log_start_offset(offset, reason=f"DeleteRecords up to {offset}"):
                part.on_log_start_moved()
                self.purgatory.on_state_change(key)         # F6: followers and consumers see the new start
            low = core.low_watermark(self._alive)
            if low >= offset:
                entry["low_watermark"] = low
                continue
            fut: asyncio.Future[bool] = self._running_loop().create_future()
            self._low_watermark_waits.setdefault(key, []).append((offset, fut))
            waits.append((entry, part, offset, fut))
        if waits:
            await asyncio.wait([w[3] for w in waits], timeout=timeout_s)
        for entry, part, offset, fut in waits:
            pending = self._low_watermark_waits.get(part.key)
            if pending is not None:
                pending[:] = [w for w in pending if w[1] is not fut]
                if not pending:
                    del self._low_watermark_waits[part.key]
            core = part.core if self._partitions.get(part.key) is part else None
            if core is None:
                entry["error"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif (low := core.low_watermark(self._alive)) >= offset:
                entry["low_watermark"] = low
            else:
                entry["error"] = int(ErrorCode.REQUEST_TIMED_OUT)
        return {"topics": out}

    def _wake_delete_records(self, part: Partition) -> None:
        """Triggered when this broker stops leading `part` (it becomes a follower or no replica): its
        DeleteRecords answer now, NOT_LEADER_OR_FOLLOWER, as Kafka's DelayedDeleteRecords does."""
        for _offset, fut in self._low_watermark_waits.get(part.key, ()):
            if not fut.done():
                fut.set_result(False)

    def _alive(self, broker_id: int) -> bool:
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced

    def _maybe_complete_delete_records(self, part: Partition) -> None:
        """Triggered by a follower's Fetch (it reports its log start): resolve the DeleteRecords of this
        partition whose offset the low watermark now reaches."""
        pending = self._low_watermark_waits.get(part.key)
        core = part.core
        if not pending or core is None:
            return
        low = core.low_watermark(self._alive)
        for offset, fut in pending:
            if offset <= low and not fut.done():
                fut.set_result(True)

    # ================================================================ ListOffsets

    async def handle_list_offsets(self, ctx: RequestContext, body: dict) -> dict:
        """EARLIEST -> log start; LATEST -> the HW for clients (OFFSET_NOT_AVAILABLE
        while the leader's HW is below its epoch start, T4), the LEO for
        replicas. Only the leader answers; epochs are checked first (F3)."""
        replica_id = body["replica_id"]
        if replica_id >= 0 and not ctx.authenticated:
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                             f"ListOffsets as replica {replica_id} needs an authenticated connection")
        out: list[dict] = []
        async for t, plist, p in _each_partition(body, out):
            entry = self._list_offset(t["topic"], p, replica_id)
            if entry.pop("by_time", False):
                entry = await self._list_offset_by_time(t["topic"], p, entry)
            plist.append(entry)
        return {"topics": out}

    async def _list_offset_by_time(self, topic: str, p: dict, entry: dict) -> dict:
        """A timestamp >= 0 or MAX_TIMESTAMP, looked up in the log below the HW off the loop;
        no match answers offset -1, as Kafka."""
        part = self._partitions.get((topic, p["partition"]))
        if part is None or part.core is None:
            entry["error"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return entry
        ts, hw = p["timestamp"], part.core.hw
        try:
            if ts == MAX_TIMESTAMP:
                found = await asyncio.to_thread(part.log.offset_of_max_timestamp, hw)
            else:
                found = await asyncio.to_thread(part.log.offset_for_timestamp, ts, hw)
        except (OSError, ValueError) as exc:
            entry["error"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
            entry["message"] = f"timestamp lookup failed: {exc}"
            return entry
        except KafkaError as exc:                     # a batch whose records do not decode
            entry["error"], entry["message"] = int(exc.code), f"timestamp lookup failed: {exc.message}"
            return entry
        if found is not None:
            entry["offset"], entry["timestamp"] = found
            epoch = part.log.epoch_cache.epoch_for_offset(found[0])
            entry["leader_epoch"] = -1 if epoch is None else epoch
        return entry

    def _list_offset(self, topic: str, p: dict, replica_id: int) -> dict:
        entry: dict[str, Any] = {"partition": p["partition"], "error": 0, "offset": -1,
                                 "leader_epoch": -1, "timestamp": -1}
        key = (topic, p["partition"])
        part = self._partitions.get(key)
        if part is None or part.role == NONE:
            entry["error"] = int(self._not_hosted_error(key))
            return entry
        code = part.check_leader_epoch(p["current_leader_epoch"])
        if code == ErrorCode.NONE and part.core is None:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if code != ErrorCode.NONE:
            entry["error"] = int(code)
            return entry
        core = part.core
        assert core is not None
        ts = p["timestamp"]
        if ts == EARLIEST_TIMESTAMP:
            start = part.log_start_offset
            epoch = part.log.epoch_cache.epoch_for_offset(start)
            entry["offset"], entry["leader_epoch"] = start, -1 if epoch is None else epoch
        elif ts == LATEST_TIMESTAMP:
            if replica_id >= 0:
                entry["offset"] = part.leo
            elif core.epoch_start_offset > core.hw:
                entry["error"] = int(ErrorCode.OFFSET_NOT_AVAILABLE)
                return entry
            else:
                entry["offset"] = core.hw
            entry["leader_epoch"] = core.leader_epoch
        elif ts >= 0 or ts == MAX_TIMESTAMP:
            entry["by_time"] = True
        else:
            entry["error"] = int(ErrorCode.INVALID_REQUEST)
            entry["message"] = f"timestamp {ts}: expected -1 (latest), -2 (earliest), -3 (max timestamp) or >= 0"
        return entry

    # ================================================================ status

    def describe_log_dirs(self, topics: list[dict] | None) -> list[dict]:
        """DescribeLogDirs' topics for this broker's one log directory: every replica it hosts (or those
        `topics` names), with its log's size in bytes and Kafka's offset lag (max(HW - LEO, 0), 0 unless
        the replica's own HW is ahead of its log); no future replicas (no log-dir moves)."""
        wanted = None if topics is None else {(t["topic"], p) for t in topics for p in t["partitions"]}
        by_topic: dict[str, list[dict]] = {}
        for key in sorted(self._partitions):
            if wanted is not None and key not in wanted:
                continue
            part = self._partitions[key]
            by_topic.setdefault(key[0], []).append({
                "partition": key[1], "size": part.log.size_bytes, "offset_lag": max(part.hw - part.leo, 0),
                "is_future": False})
        return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]

    def replica_status(self, topics: list[str] | None) -> dict:
        """Body of the ReplicaStatus response: this broker's view of each replica."""
        now = self.clock()
        wanted = set(topics) if topics is not None else None
        out = []
        for key in sorted(self._partitions):
            if wanted is not None and key[0] not in wanted:
                continue
            part = self._partitions[key]
            core = part.core
            entry: dict[str, Any] = {
                "topic": key[0], "partition": key[1], "role": part.role,
                "leader": part.leader_id, "leader_epoch": part.leader_epoch,
                "partition_epoch": part.partition_epoch, "leo": part.leo, "hw": part.hw,
                "log_start_offset": part.log_start_offset,
                "adding_replicas": list(part.adding_replicas), "removing_replicas": list(part.removing_replicas),
            }
            if core is not None:
                pending = core.pending
                entry.update({
                    "partition_epoch": core.partition_epoch,
                    "isr": list(core.isr), "maximal_isr": list(core.maximal_isr),
                    "pending": None if pending is None else {
                        "kind": pending.kind, "isr": list(pending.isr), "replicas": list(pending.replicas)},
                    "epoch_start_offset": core.epoch_start_offset,
                    "replicas": [self._replica_view(core, r, now, part) for r in core.replicas],
                })
            else:
                st = self.fetchers.state(key)
                entry.update({
                    "isr": list(part.isr), "maximal_isr": list(part.isr), "pending": None,
                    "replicas": [{"broker_id": r, "leo": part.leo if r == self.node_id else -1,
                                  "last_caught_up_ms_ago": None, "last_fetch_ms_ago": None,
                                  "in_isr": r in part.isr, "caught_up": None} for r in part.replicas],
                    "fetch_state": None if st is None else {**st.core.status(now),
                                                            "throttled": self.fetchers.is_throttled(key)},
                })
            out.append(entry)
        return {"node_id": self.node_id, "partitions": out,
                "fetch_sessions": self.fetch_sessions.status(),
                "fetchers": [f.status() for _, f in sorted(self.fetchers.fetchers().items())],
                "throttles": {"leader": self.leader_quota.status(now), "follower": self.follower_quota.status(now)}}

    def _replica_view(self, core: PartitionLeader, r: int, now: int, part: Partition) -> dict:
        if r == self.node_id:
            return {"broker_id": r, "leo": part.leo, "last_caught_up_ms_ago": 0, "last_fetch_ms_ago": 0,
                    "in_isr": True, "caught_up": True}
        f = core.followers[r]
        return {
            "broker_id": r, "leo": f.leo,
            "last_caught_up_ms_ago": None if f.last_caught_up_ms is None else now - f.last_caught_up_ms,
            "last_fetch_ms_ago": None if f.last_fetch_ms is None else now - f.last_fetch_ms,
            "in_isr": r in core.isr, "caught_up": core.is_caught_up(r, now),
        }

    def leaderships(self) -> list[tuple[str, int]]:
        return sorted(k for k, p in self._partitions.items() if p.core is not None)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        part = self._partitions.get((topic, partition))
        return None if part is None else part.hw

    def partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))


# Entries of one request handled between two yields to the event loop.
REQUEST_SLICE = 256


def _one_fetch_entry(topics: list[dict]) -> list[tuple[str, dict]] | None:
    """A Fetch of one partition (a follower's or consumer's steady state) as `_fetch_dedupe`
    has it, without looking further; None for any other."""
    if len(topics) == 1:
        t = topics[0]
        parts = t["partitions"]
        if len(parts) == 1:
            return [(t["topic"], parts[0])]
    return None


def _appends_at_once(topics: list[dict], hosted: dict[PartitionKey, Partition]) -> bool:
    """A produce that appends without yielding to the loop: fewer than REQUEST_SLICE partitions, none
    compressed (a compressed batch's check may decompress up to 16 x max.message.bytes), none to a
    log whose compression.type may ask for its batches to be rebuilt (in a worker thread)."""
    n = 0
    for t in topics:
        name = t["topic"]
        for p in t["partitions"]:
            n += 1
            if n >= REQUEST_SLICE or is_compressed(p["records"]):
                return False
            part = hosted.get((name, p["partition"]))
            if part is not None and part.log.config.compression_type != "producer":
                return False
    return True
