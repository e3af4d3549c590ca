"""Follower fetchers: one per (this broker, leader broker) pair.

Owns: the fetch loop to each leader and the carrying of events and actions
between the wire, each followed partition's `PartitionFollower` core
(minibroker.replication.follower_core: every follower rule, R3-R7, and the
no-progress back-off) and its `Partition` (the log): it builds each Fetch
from the cores' positions, hands each partition's answer to its core, and
carries out the actions (append verbatim, HW update, truncate, ListOffsets
to the leader after OFFSET_OUT_OF_RANGE); it leaves out of each Fetch the
partitions the follower quota holds back (RQ5, the rule in
minibroker.replication.throttle) and counts the bytes of the throttled ones.

Must not know: any replication rule (the core decides), leader-side rules,
purgatory, metadata handling. The
`ReplicaManager` adds and removes partitions (on new leader epochs only,
R1) and is told, through `FetcherHooks`, when a follower's HW rose or its
log changed so parked reads can be woken; its change count and change log
(`FetcherHooks.state_changes`, `changed_since`) let a fetcher resend its
last entries without looking at each partition, or rebuild only those of
the partitions that moved.

The next Fetch is sent as soon as the previous response is carried out (its
appends written, and flushed when the hooks say so): its fetch offsets are
the follower's acknowledgement. Only the reports to the hooks
(`on_follower_progress`) wait for the loop's next turn, after it has left.
A plain answer is carried out in the callback that decoded it, which writes
the next Fetch itself (the fast lane, `_on_answer`); the loop's task
(`_run`) takes over for connecting, errors, flushes to wait for, offsets out
of range and idleness. Long-polling happens on the leader
(replica.fetch.wait.max.ms), never here.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Awaitable, Callable

from minibroker.aio import wait_event
from minibroker.broker.fetch_session import INVALID_SESSION_ID, FollowerSession
from minibroker.broker.partition import Partition
from minibroker.config import Config
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event, EventSink
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from minibroker.replication.follower_core import (Action, Append, FetchAnswer, ListLeaderOffset, LogView,
                                                  PartitionFollower, Truncate, TruncateFullyAndStartAt,
                                                  UpdateHighWatermark)
from minibroker.replication.throttle import UNLIMITED, ReplicationQuota
from minibroker.storage import UnexpectedAppendOffset

log = logging.getLogger("minibroker.broker.fetcher")

PartitionKey = tuple[str, int]
# Makes a NamedTuple from a tuple of all its fields without its Python-level __new__ (as its _make does):
# the follower core's values are made once or twice per partition answered.
_new = tuple.__new__
SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)


class FetcherHooks(Protocol):
    def on_follower_progress(self, part: Partition, old_hw: int, appended_bytes: int) -> None:
        """After an append and/or HW update on a follower replica: on the loop's next turn, once
        the Fetch that acknowledges it has left."""

    def on_follower_truncated(self, part: Partition) -> None:
        """After a truncation of a follower replica's log."""

    def flush(self, parts: list[Partition]) -> Awaitable[None] | None:
        """fsync the given logs before the next Fetch acknowledges them: what to wait on for
        that, or None when there is nothing to wait for (no fsync before acks)."""

    def state_changes(self) -> int:
        """A count that moves whenever any replica's log end, log start, HW or role moves."""

    def changed_since(self, count: int) -> set[Any] | None:
        """The partitions whose log end, log start, HW or role moved after change count `count`,
        or None when that is too long ago to say."""


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    replica_id: int
    wait_max_ms: int = 500
    min_bytes: int = 1
    partition_max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000

    @classmethod
    def from_config(cls, config: Config, replica_id: int) -> FetcherSettings:
        return cls(
            replica_id=replica_id,
            wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
            min_bytes=config.get_int("replica.fetch.min.bytes"),
            partition_max_bytes=config.get_int("replica.fetch.max.bytes"),
            response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            backoff_ms=config.get_int("replica.fetch.backoff.ms"),
            socket_timeout_ms=config.get_int("replica.socket.timeout.ms"),
        )


class FetchState:
    """One followed partition: the `Partition` and its `PartitionFollower` core.
    Replaced (never reset) when a new leader epoch restarts fetching, so an
    in-flight answer for the old state is recognised and dropped."""

    __slots__ = ("partition", "core", "_epochs", "_epochs_cache", "_epochs_version")

    def __init__(self, partition: Partition, core: PartitionFollower) -> None:
        self.partition = partition
        self.core = core
        # Invariant: `_epochs` are the entries of the epoch cache `_epochs_cache` at version `_epochs_version`.
        self._epochs: tuple[tuple[int, int], ...] = ()
        self._epochs_cache: Any = None
        self._epochs_version = -1

    def view(self) -> LogView:
        """`log_view(self.partition)`, copying the epoch entries only when the epoch cache moved."""
        log = self.partition.log
        cache = log.epoch_cache
        if cache is not self._epochs_cache or cache.version != self._epochs_version:
            self._epochs = tuple(cache.entries)
            self._epochs_cache, self._epochs_version = cache, cache.version
        return _new(LogView, (log.log_end_offset, log.log_start_offset, self._epochs))

    @property
    def leader_epoch(self) -> int:
        return self.core.leader_epoch

    @property
    def in_sync(self) -> bool:
        """RQ5: caught up with the leader's HW of its last answer (Kafka's `isReplicaInSync`: no lag)."""
        hw = self.core.leader_hw
        return hw >= 0 and self.partition.log.log_end_offset >= hw

    @property
    def failed(self) -> bool:
        return self.core.failed

    @property
    def backoff_until_ms(self) -> int:
        return self.core.delayed_until_ms

    @property
    def last_error(self) -> int:
        return self.core.last_error


class _Build:
    """A fetcher's last Fetch build: the ready states it was built for (in order), the hooks' change
    count it saw, each state's entry (in that order), the states by key, and each key's row."""

    __slots__ = ("ready", "changes", "entries", "sent", "index")

    def __init__(self, ready: list[FetchState], changes: int, entries: list[tuple[str, dict[str, Any]]],
                 sent: dict[PartitionKey, FetchState], index: dict[PartitionKey, int]) -> None:
        self.ready = ready
        self.changes = changes
        self.entries = entries
        self.sent = sent
        self.index = index


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker.

    Invariant: at most one Fetch in flight; `_states` holds exactly the
    partitions assigned to this leader.
    """

    def __init__(self, leader_id: int, *, settings: FetcherSettings, peers: Any,
                 broker_epoch: Callable[[], int], hooks: FetcherHooks, sink: EventSink,
                 clock: Callable[[], int], quota: ReplicationQuota | None = None) -> None:
        self.leader_id = leader_id
        self.quota = quota if quota is not None else ReplicationQuota()      # RQ5: shared by every fetcher
        # Invariant: the partitions the last `_ready` left out as throttled (RQ5).
        self._throttled: set[PartitionKey] = set()
        self.settings = settings
        self.peers = peers
        # The open connection to a peer without a coroutine (None: ask `peers.get`), when the peers offer it.
        self._current: Callable[[int], Any] | None = getattr(peers, "current", None)
        self.broker_epoch = broker_epoch
        self.hooks = hooks
        self._sink = sink
        self._clock = clock
        self._states: dict[PartitionKey, FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None     # Invariant: the running fetch loop, None once stopped
        self._transport_error = ""
        self._session = FollowerSession()
        # Invariant: `_built[k]` is the Fetch entry last built for state `st` of partition k, with the LEO, log
        # start and epoch-cache version it was built at; it is reused while those hold and k is not in `_dirty`
        # (answered or truncated since), so an idle follower does not rebuild 1,000 positions per Fetch.
        self._built: dict[PartitionKey, tuple[FetchState, int, int, int, dict[str, Any]]] = {}
        self._dirty: set[PartitionKey] = set()
        # Invariant: the last build; while its ready states and change count hold and nothing is dirty,
        # the next build gives the same entries.
        self._last_build: _Build | None = None
        # Invariant: while not None, `list(self._states.values())`.
        self._all: list[FetchState] | None = None
        # Invariant: every state outside `_held_back` was ready when last checked and its core has not
        # been handed an event since, except those in `_recheck` (None: all of them may have been).
        self._held_back: dict[PartitionKey, FetchState] = {}
        self._recheck: set[PartitionKey] | None = None
        self._lane_ready: list[FetchState] = []    # Invariant: the states the Fetch in flight was built from
        # The loop `_run` runs on, for the fast lane (each asyncio.get_running_loop() is a getpid() on 3.11).
        self._loop: asyncio.AbstractEventLoop | None = None
        self.requests = 0
        self.last_named = 0               # partitions the last Fetch named (all, or in a session the changed)

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: PartitionKey) -> FetchState | None:
        return self._states.get(key)

    def status(self) -> dict[str, int]:
        """For ReplicaStatus: this fetcher's session with its leader and its last Fetch."""
        session_id, epoch = self._session.request_ids
        return {"leader_id": self.leader_id, "partitions": len(self._states), "requests": self.requests,
                "session_id": session_id, "session_epoch": epoch, "last_named": self.last_named}

    def add(self, part: Partition, leader_epoch: int) -> FetchState:
        core = PartitionFollower(part.name, self.leader_id, leader_epoch, self.settings.backoff_ms, self._sink)
        st = FetchState(part, core)
        self._states[part.key] = st
        self._all = None
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return st

    @property
    def throttled(self) -> set[PartitionKey]:
        """The partitions the last `_ready` left out, throttled (RQ5)."""
        return self._throttled

    def wake(self) -> None:
        """An idle loop looks at its partitions again (RQ5: the throttles changed)."""
        self._wake.set()

    def remove(self, key: PartitionKey) -> None:
        self._states.pop(key, None)
        self._built.pop(key, None)
        self._held_back.pop(key, None)
        self._all = None
        self._last_build = None

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def wait_stopped(self) -> None:
        t = self._task
        self.stop()
        if t is not None:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        """The fetch loop, started by the first `add`; it ends when cancelled or, should a
        cancel ever be lost on the way (3.11's wait_for, gh-86296), once `stop` has let go of it.

        One round per Fetch: the ready states, the connection, the Fetch, its answer carried out
        (`_take`), the flush of what it appended; rounds of plain answers run in the fast lane
        (`_on_answer`) while this task waits on `lane`. The HW and progress reports of the round
        (`_report`) run on the loop's next turn, after the next Fetch has left: that Fetch
        acknowledges the appends (and names the log start the round may have moved), so only
        they (and their flush) stand between an answer and the next Fetch."""
        me = asyncio.current_task()
        loop = self._loop = asyncio.get_running_loop()
        current = self._current
        leader = self.leader_id
        timeout = self.settings.socket_timeout_ms + self.settings.wait_max_ms
        try:
            while self._task is me:
                now = self._clock()
                ready = self._ready(now)
                if not ready:
                    await self._idle(now)
                    continue
                conn = current(leader) if current is not None else None
                if conn is None:
                    try:
                        conn = await self.peers.get(leader)
                    except KafkaError as exc:
                        self._on_transport_error(ready, exc)
                        continue
                body, full, sent = self._build(ready)
                self.requests += 1
                lane = loop.create_future()
                try:
                    self._send(conn, ready, body, full, sent, lane, timeout)
                    # What the fast lane (`_on_answer`) left to this loop: an answer it did not carry out,
                    # or one it did whose flush or out-of-range offsets need awaiting; `ready` is then the
                    # states its last Fetch was built from.
                    ready, resp, full, sent, flushing, progress, out_of_range = await lane
                except KafkaError as exc:
                    self._session.reset()
                    if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                        self.peers.drop(leader)
                    self._on_transport_error(self._lane_ready, exc)
                    continue
                if resp is not None:
                    code = resp.get("error", 0)
                    if code:
                        self._on_fetch_error(ready, code, resp.get("message", ""))
                        continue
                    self._session.on_response(resp.get("session_id", INVALID_SESSION_ID))
                    if self._transport_error:
                        self._transport_error = ""
                        self._emit("fetcher_recovered", "", None, None, f"fetching from broker {leader} again")
                    appended, progress, out_of_range = self._take(resp, sent, full)
                    flushing = self.hooks.flush(appended) if appended else None
                if flushing is not None:
                    await flushing
                if progress:
                    loop.call_soon(self._report, progress)
                for st in out_of_range:
                    if self._states.get(st.partition.key) is st:
                        await self._handle_out_of_range(conn, st)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - a bug; keep the broker alive and say so
            log.exception("fetcher from broker %d died", self.leader_id)
            raise

    def _send(self, conn: Any, ready: list[FetchState], body: dict[str, Any], full: bool,
              sent: dict[PartitionKey, FetchState], lane: asyncio.Future[Any], timeout: int) -> None:
        self._lane_ready = ready
        conn.send_request(ApiKey.FETCH, body, functools.partial(self._on_answer, conn, full, sent, lane, timeout),
                          timeout_ms=timeout)

    def _on_answer(self, conn: Any, full: bool, sent: dict[PartitionKey, FetchState], lane: asyncio.Future[Any],
                   timeout: int, resp: dict[str, Any] | None, error: KafkaError | None) -> None:
        """Triggered by a Fetch's answer, in the read callback that decoded it (or by its failure, a
        later loop turn). The fast lane: a plain answer on the peers' current connection is carried out
        here and the next Fetch written at once, without waking the loop's task for each round; anything
        else (an error, a flush to await, offsets out of range, no state ready, no current connection)
        goes to `_run` through `lane`, which the task awaits. Stopped (`lane` cancelled), it does nothing."""
        if lane.done():
            return
        if error is not None:
            lane.set_exception(error)
            return
        assert resp is not None
        ready = self._lane_ready
        current = self._current
        if resp.get("error", 0) or self._transport_error or current is None or current(self.leader_id) is not conn:
            lane.set_result((ready, resp, full, sent, None, (), ()))
            return
        try:
            self._session.on_response(resp.get("session_id", INVALID_SESSION_ID))
            appended, progress, out_of_range = self._take(resp, sent, full)
            flushing = self.hooks.flush(appended) if appended else None
            if flushing is not None or out_of_range:
                lane.set_result((ready, None, full, sent, flushing, progress, out_of_range))
                return
            if progress:
                self._loop.call_soon(self._report, progress)
            ready = self._ready(self._clock())
            if not ready or current(self.leader_id) is not conn:
                lane.set_result((ready, None, full, sent, None, (), ()))
                return
            body, full, sent = self._build(ready)
            self.requests += 1
            self._send(conn, ready, body, full, sent, lane, timeout)
        except Exception as exc:  # pragma: no cover - a bug: the task ends with it, as it would have
            lane.set_exception(exc)

    def _ready(self, now: int) -> list[FetchState]:
        """The states to fetch now, in the order they were added. Only the cores handed an event
        since the last call (and those held back) are asked, so a follower of 1,000 partitions
        does not ask 1,000 cores before each Fetch; while none is held back the list is the same
        object as last time (`_build` then compares nothing)."""
        states, held = self._states, self._held_back
        if self._all is None:
            self._all = list(states.values())
            self._recheck = None
        recheck = self._recheck
        if recheck is None:
            held.clear()
            for key, st in states.items():
                if not st.core.is_ready(now):
                    held[key] = st
        else:
            for key in recheck:
                st = states.get(key)
                if st is None or st.core.is_ready(now):
                    held.pop(key, None)
                else:
                    held[key] = st
        self._recheck = set()
        if held:
            for key in [k for k, st in held.items() if st.core.is_ready(now)]:
                del held[key]
        ready = self._all if not held else [st for st in self._all if st.partition.key not in held]
        if self.quota.active or self._throttled:
            return self._unthrottled(ready, now)
        return ready

    def _unthrottled(self, ready: list[FetchState], now: int) -> list[FetchState]:
        """RQ5: `ready` without the partitions throttled here that are not in sync, while the follower
        quota is exceeded (the same list when it leaves none out)."""
        throttled = self._throttled
        throttled.clear()
        quota = self.quota
        if quota.active and quota.bound < UNLIMITED and quota.is_exceeded(now):    # else none waits
            for st in ready:
                part = st.partition
                if quota.maybe_throttle(part.topic, part.index, st.in_sync, now):
                    throttled.add(part.key)
        if not throttled:
            return ready
        return [st for st in ready if st.partition.key not in throttled]

    async def _idle(self, now: int) -> None:
        """Nothing to fetch: wait for a partition's back-off to end, or, with partitions throttled
        (RQ5), replica.fetch.backoff.ms; or for `_wake` (a partition added, the throttles changed)."""
        self._wake.clear()
        throttled = self._throttled
        pending = [st.core.delayed_until_ms for key, st in self._states.items()
                   if not st.failed and key not in throttled]
        if throttled:
            pending.append(now + self.settings.backoff_ms)
        timeout = max(0, min(pending) - now) / 1000 if pending else None
        await wait_event(self._wake, timeout)      # not wait_for: on 3.11 it can swallow the stop's cancel

    def _on_fetch_error(self, ready: list[FetchState], code: int, message: str) -> None:
        """A Fetch answered with a top-level error: the next Fetch is full; a session error
        (the leader lost or moved on from our session) is retried at once, any other backs off."""
        self._session.reset()
        if code in SESSION_ERRORS:
            log.info("fetch session with broker %d reset: %s", self.leader_id, message)
            return
        self._on_transport_error(ready, KafkaError(code, message, remote=True))

    def _build(self, ready: list[FetchState]) -> tuple[dict[str, Any], bool, dict[PartitionKey, FetchState]]:
        """The next Fetch: in a session (KIP-227) it names only the partitions whose position
        changed and forgets those no longer fetched; returns (the body, whether it is full,
        the state of each partition it fetches). With the same partitions as the last build,
        only those the hooks' change log (or `_dirty`) names since then are looked at."""
        dirty = self._dirty
        changes = self.hooks.state_changes()
        last = self._last_build
        if last is not None and (last.ready is ready or last.ready == ready):
            if last.changes == changes:
                if not dirty:
                    return (*self._body(last.entries, None), last.sent)     # idle: nothing an entry depends on moved
                moved: set[Any] | None = dirty
            else:
                moved = self.hooks.changed_since(last.changes)
                if moved is not None and dirty:
                    moved = moved | dirty
            if moved is not None:
                return self._build_changed(ready, changes, last, moved)
        entries: list[tuple[str, dict[str, Any]]] = []
        for st in ready:
            entries.append(self._entry(st))
        if len(ready) == len(self._states):
            dirty.clear()
        else:                   # a partition left out (backing off, throttled) keeps its mark for when it is back
            for st in ready:
                dirty.discard(st.partition.key)
        sent = {st.partition.key: st for st in ready}
        self._last_build = _Build(ready, changes, entries, sent, {key: i for i, key in enumerate(sent)})
        return (*self._body(entries, False), sent)

    def _build_changed(self, ready: list[FetchState], changes: int, last: _Build, moved: set[Any]) -> tuple[
            dict[str, Any], bool, dict[PartitionKey, FetchState]]:
        """`_build` when only the partitions in `moved` (the change log's and `_dirty`) can have a
        new position: the last build's entries with theirs rebuilt, in the same order."""
        entries, index = last.entries, last.index
        if len(moved) == 1:
            i = index.get(next(iter(moved)))
            rows = [] if i is None else [i]
        else:
            rows = sorted(i for k in moved if (i := index.get(k)) is not None)
        changed: list[tuple[str, dict[str, Any]]] = []
        for i in rows:
            e = self._entry(ready[i])
            if e[1] is not entries[i][1]:
                entries[i] = e
                changed.append(e)
        if len(ready) == len(self._states):
            self._dirty.clear()
        else:
            for st in ready:
                self._dirty.discard(st.partition.key)
        last.changes = changes
        return (*self._body(entries, changed), last.sent)

    def _entry(self, st: FetchState) -> tuple[str, dict[str, Any]]:
        """One partition's Fetch entry: the one last built while nothing it depends on moved."""
        part = st.partition
        key = part.key
        cached = self._built.get(key)
        log = part.log
        if cached is not None and cached[0] is st and key not in self._dirty:
            if (cached[1] == log.log_end_offset and cached[2] == log.log_start_offset
                    and cached[3] == log.epoch_cache.version):
                return part.topic, cached[4]
        view = st.view()
        pos = st.core.next_position(view)
        entry = {"partition": part.index, "fetch_offset": pos.fetch_offset,
                 "current_leader_epoch": pos.current_leader_epoch, "last_fetched_epoch": pos.last_fetched_epoch,
                 "log_start_offset": pos.log_start_offset, "partition_max_bytes": self.settings.partition_max_bytes}
        self._built[key] = (st, view.leo, view.log_start_offset, log.epoch_cache.version, entry)
        return part.topic, entry

    def _body(self, entries: list[tuple[str, dict[str, Any]]],
              changed: list[tuple[str, dict[str, Any]]] | bool | None) -> tuple[dict[str, Any], bool]:
        """`changed`: None, the same entries as the last build; a list, the last build's entries
        but for these; False, any entries."""
        session = self._session
        session_id, epoch = session.session_id, session.epoch
        built = session.build_changed(changed) if changed.__class__ is list else None
        if built is None:
            built = session.build(entries, same=changed is None)
        send, forgotten, full = built
        self.last_named = len(send)
        if len(send) == 1:
            topic, entry = send[0]
            topics = [{"topic": topic, "partitions": [entry]}]
        else:
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for topic, entry in send:
                by_topic.setdefault(topic, []).append(entry)
            topics = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        s = self.settings
        return {"replica_id": s.replica_id, "broker_epoch": self.broker_epoch(),
                "max_wait_ms": s.wait_max_ms, "min_bytes": s.min_bytes, "max_bytes": s.response_max_bytes,
                "session_id": session_id, "session_epoch": epoch, "forgotten_topics": forgotten or None,
                "topics": topics}, full

    def _take(self, resp: dict[str, Any], sent: dict[PartitionKey, FetchState], full: bool) -> tuple[
            list[Partition], list[tuple[FetchState, int, int]], list[FetchState]]:
        """Triggered by each Fetch response: every partition in it goes to its core, whose actions
        are carried out but for the reports to the hooks. An incremental response leaves out the
        partitions with nothing new (KIP-227). Returns (the partitions appended to, to flush; the
        (state, old HW, bytes appended) to report, `_report`; the states whose offset is out of
        range, for `_handle_out_of_range`)."""
        now = self._clock()
        appended: list[Partition] = []
        progress: list[tuple[FetchState, int, int]] = []
        out_of_range: list[FetchState] = []
        answered: set[PartitionKey] = set()
        recheck = self._recheck if self._recheck is not None else set()
        dirty, states = self._dirty, self._states
        quota = self.quota if self.quota.active else None
        for t in resp.get("topics", ()):
            topic = t["topic"]
            for e in t["partitions"]:
                key = (topic, e["partition"])
                dirty.add(key)
                recheck.add(key)
                if key in answered:
                    continue
                answered.add(key)
                st = sent.get(key)
                if st is None or states.get(key) is not st:
                    continue            # removed or restarted while the request was in flight
                part = st.partition
                core = st.core
                written = 0
                for action in core.on_fetch_answer(fetch_answer(e), st.view(), now):
                    if isinstance(action, Append):      # verbatim; a refusal backs the core off
                        try:
                            written = part.append_as_follower(e.get("records") or b"", now)
                        except UnexpectedAppendOffset as exc:
                            core.on_error(exc.code, now, str(exc))
                            break
                        except KafkaError as exc:
                            core.on_error(exc.code, now, exc.message)
                            break
                        if written:
                            appended.append(part)
                            if core.stuck is not None:      # else on_appended does nothing
                                core.on_appended(written, now)
                            if quota is not None and quota.is_throttled(topic, part.index):     # RQ3
                                quota.record(written, now)
                    elif isinstance(action, UpdateHighWatermark):
                        old_hw = part.update_follower_hw(action.leader_hw, action.leader_log_start, now)
                        progress.append((st, old_hw, written))
                    elif isinstance(action, ListLeaderOffset):
                        out_of_range.append(st)
                    else:
                        self._carry_truncation(st, action, now)
        if full:
            for key, st in sent.items():
                if key not in answered and states.get(key) is st:
                    recheck.add(key)
                    st.core.on_error(ErrorCode.UNKNOWN_SERVER_ERROR, now,
                                     "the leader's answer left this partition out")
        return appended, progress, out_of_range

    def _report(self, progress: list[tuple[FetchState, int, int]]) -> None:
        """A round's appends and HW moves, told to the hooks (parked reads wake) once its next
        Fetch has left; a state replaced meanwhile was reported by whatever replaced it."""
        states, hooks, last = self._states, self.hooks, self._last_build
        before = hooks.state_changes()
        for st, old_hw, n in progress:
            part = st.partition
            if states.get(part.key) is st:
                hooks.on_follower_progress(part, old_hw, n)
        if last is not None and last.changes == before and last is self._last_build:
            last.changes = hooks.state_changes()     # the reports moved no Fetch entry: the next build need not look

    # ------------------------------------------------------------ carrying actions out

    def _carry_truncation(self, st: FetchState, action: Action, now: int) -> None:
        part = st.partition
        self._dirty.add(part.key)
        before = log_view(part)
        if isinstance(action, Truncate):
            part.truncate_to(action.offset, now, action.reason)
        elif isinstance(action, TruncateFullyAndStartAt):
            part.truncate_fully_and_start_at(action.offset, now, action.reason)
        else:  # pragma: no cover - every action kind is handled above
            raise TypeError(f"unexpected follower action {action!r}")
        st.core.on_truncated(before, log_view(part), now)
        self.hooks.on_follower_truncated(part)

    async def _handle_out_of_range(self, conn: Any, st: FetchState) -> None:
        """R6: ask the leader for its LEO (as a replica) and, when the core asks, its
        log start; the core decides between truncating, restarting and backing off."""
        part = st.partition
        now = self._clock()
        try:
            leader_leo = await self._list_offset(conn, st, LATEST_TIMESTAMP)
            if self._states.get(part.key) is not st:
                return
            now = self._clock()
            actions = st.core.on_leader_log_end(leader_leo, log_view(part), now)
            if actions and isinstance(actions[0], ListLeaderOffset):
                leader_start = await self._list_offset(conn, st, EARLIEST_TIMESTAMP)
                if self._states.get(part.key) is not st:
                    return
                now = self._clock()
                actions = st.core.on_leader_log_start(leader_start, leader_leo, log_view(part), now)
            for action in actions:
                self._carry_truncation(st, action, now)
        except KafkaError as exc:
            st.core.on_error(exc.code, self._clock(), f"ListOffsets after OFFSET_OUT_OF_RANGE: {exc}")

    async def _list_offset(self, conn: Any, st: FetchState, timestamp: int) -> int:
        part = st.partition
        resp = await conn.request(ApiKey.LIST_OFFSETS, {
            "replica_id": self.settings.replica_id,
            "topics": [{"topic": part.topic, "partitions": [{
                "partition": part.index, "timestamp": timestamp,
                "current_leader_epoch": st.leader_epoch}]}]},
            timeout_ms=self.settings.socket_timeout_ms)
        if resp.get("error", 0):
            raise KafkaError(resp["error"], resp.get("message", ""), remote=True)
        for t in resp.get("topics", ()):
            for p in t.get("partitions", ()):
                if t.get("topic") == part.topic and p.get("partition") == part.index:
                    if p.get("error", 0):
                        raise KafkaError(p["error"], "ListOffsets", remote=True)
                    return int(p["offset"])
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "ListOffsets answer misses the partition")

    def _on_transport_error(self, sts: list[FetchState], exc: KafkaError) -> None:
        now = self._clock()
        self._recheck = None
        for st in sts:
            st.core.on_transport_error(now)
        msg = str(exc)
        if msg != self._transport_error:
            self._transport_error = msg
            log.info("fetch from broker %d failed: %s; backing off %d ms", self.leader_id, msg,
                     self.settings.backoff_ms)
            self._emit("fetch_error", "", None, exc.name, f"fetch from broker {self.leader_id}: {msg}",
                       leader=self.leader_id, partitions=len(sts))

    def _emit(self, kind: str, partition: str, before: Any, after: Any, reason: str, **extra: Any) -> None:
        self._sink(Event(kind, self._clock(), partition, before, after, reason, extra))


def log_view(part: Partition) -> LogView:
    """The local log as the follower core sees it."""
    return LogView(part.leo, part.log_start_offset, tuple(part.log.epoch_cache.entries))


def fetch_answer(e: dict[str, Any]) -> FetchAnswer:
    """One partition's entry of a Fetch answer, as the follower core takes it."""
    div = e.get("diverging_epoch")
    diverging = None
    if div is not None and div.get("epoch", -1) >= -1 and div.get("end_offset", -1) >= 0:
        diverging = (int(div["epoch"]), int(div["end_offset"]))
    return _new(FetchAnswer, (e.get("error", 0), e.get("high_watermark", -1), e.get("log_start_offset", -1),
                              bool(e.get("records")), diverging, e.get("message", "") or ""))


class FetcherManager:
    """All fetchers of this broker, by leader broker id.

    Invariant: a partition key is in at most one fetcher, the one of the
    leader it follows; `_leader_of` says which.
    """

    def __init__(self, *, settings: FetcherSettings, peers: Any, broker_epoch: Callable[[], int],
                 hooks: FetcherHooks, sink: EventSink, clock: Callable[[], int],
                 quota: ReplicationQuota | None = None) -> None:
        self.settings = settings
        self.peers = peers
        self.quota = quota if quota is not None else ReplicationQuota()
        # Each new fetcher shares these; the manager itself only routes partitions to fetchers.
        self._new_fetcher = functools.partial(ReplicaFetcher, settings=settings, peers=peers,
                                              broker_epoch=broker_epoch, hooks=hooks, sink=sink, clock=clock,
                                              quota=self.quota)
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    def fetchers(self) -> dict[int, ReplicaFetcher]:
        return dict(self._fetchers)

    def is_throttled(self, key: PartitionKey) -> bool:
        """RQ5: whether the last Fetch for `key` left it out, throttled."""
        leader = self._leader_of.get(key)
        return leader is not None and key in self._fetchers[leader].throttled

    def wake_all(self) -> None:
        """Triggered when the throttles changed (RQ5): every idle fetcher looks at its partitions again."""
        for f in self._fetchers.values():
            f.wake()

    def state(self, key: PartitionKey) -> FetchState | None:
        leader = self._leader_of.get(key)
        return self._fetchers[leader].state(key) if leader is not None else None

    def add(self, part: Partition, leader_id: int, leader_epoch: int) -> FetchState:
        """Start (or restart) fetching `part` from `leader_id` at `leader_epoch`."""
        self.remove(part.key)
        f = self._fetchers.get(leader_id)
        if f is None:
            f = self._new_fetcher(leader_id)
            self._fetchers[leader_id] = f
        self._leader_of[part.key] = leader_id
        return f.add(part, leader_epoch)

    def remove(self, key: PartitionKey) -> None:
        leader = self._leader_of.pop(key, None)
        if leader is None:
            return
        f = self._fetchers.get(leader)
        if f is not None:
            f.remove(key)
            if not len(f):
                f.stop()
                del self._fetchers[leader]

    async def shutdown(self) -> None:
        fs = list(self._fetchers.values())
        self._fetchers.clear()
        self._leader_of.clear()
        for f in fs:
            await f.wait_stopped()
