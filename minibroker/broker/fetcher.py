"""Follower fetchers: one per (this broker, leader broker) pair.

Owns: the per-partition fetch state of every partition this broker follows
(Kafka's AbstractFetcherThread.PartitionFetchState: the leader epoch it
fetches in, back-off, failed-until-new-metadata), the fetch loop to each
leader, and the follower's reaction to each partition's answer (R3-R7):
append the leader's batches verbatim, take min(leader HW, own LEO) as HW,
truncate on a diverging epoch (several rounds when needed), refetch after
OFFSET_OUT_OF_RANGE via ListOffsets, back off on errors, stop on fencing.

Must not know: leader-side rules, purgatory, metadata handling. The
`ReplicaManager` adds and removes partitions (on new leader epochs only,
R1) and is told, through `FetcherHooks`, when a follower's HW rose or its
log changed so parked reads can be woken.

The next Fetch is sent as soon as the previous response is processed: its
fetch offsets are the follower's acknowledgement. Long-polling happens on the
leader (replica.fetch.wait.max.ms), never here.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Awaitable, Callable

from minibroker.broker.partition import Partition
from minibroker.config import Config
from minibroker.errors import ErrorCode, KafkaError, error_name
from minibroker.events import Event, EventSink
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKey
from minibroker.storage import UnexpectedAppendOffset

log = logging.getLogger("minibroker.broker.fetcher")

PartitionKey = tuple[str, int]


class FetcherHooks(Protocol):
    def on_follower_progress(self, part: Partition, old_hw: int, appended_bytes: int) -> None:
        """After an append and/or HW update on a follower replica."""

    def on_follower_truncated(self, part: Partition) -> None:
        """After a truncation of a follower replica's log."""

    def flush(self, parts: list[Partition]) -> Awaitable[None]:
        """fsync the given logs before the next Fetch acknowledges them (or nothing)."""


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
    """One followed partition. Replaced (never reset) when a new leader
    epoch restarts fetching, so an in-flight answer for the old state is
    recognised and dropped.

    Invariant: `failed` only after FENCED_LEADER_EPOCH at `leader_epoch`;
    cleared by the ReplicaManager replacing this state on a newer epoch.
    """

    __slots__ = ("partition", "leader_epoch", "backoff_until_ms", "failed", "sent_offset",
                 "last_error", "truncating_rounds")

    def __init__(self, partition: Partition, leader_epoch: int) -> None:
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.backoff_until_ms = 0
        self.failed = False
        self.sent_offset = -1
        self.last_error: int = 0
        self.truncating_rounds = 0


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker.

    Invariant: at most one Fetch in flight; `_states` holds exactly the
    partitions assigned to this leader.
    """

    def __init__(self, leader_id: int, *, settings: FetcherSettings, peers: Any,
                 broker_epoch: Callable[[], int], hooks: FetcherHooks, sink: EventSink,
                 clock: Callable[[], int]) -> None:
        self.leader_id = leader_id
        self.settings = settings
        self.peers = peers
        self.broker_epoch = broker_epoch
        self.hooks = hooks
        self._sink = sink
        self._clock = clock
        self._states: dict[PartitionKey, FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._transport_error = ""
        self.requests = 0

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: PartitionKey) -> FetchState | None:
        return self._states.get(key)

    def add(self, part: Partition, leader_epoch: int) -> FetchState:
        st = FetchState(part, leader_epoch)
        self._states[part.key] = st
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return st

    def remove(self, key: PartitionKey) -> None:
        self._states.pop(key, None)

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
        try:
            while True:
                now = self._clock()
                ready = [st for st in self._states.values()
                         if not st.failed and st.backoff_until_ms <= now]
                if not ready:
                    await self._idle(now)
                    continue
                await self._fetch_once(ready)
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - a bug; keep the broker alive and say so
            log.exception("fetcher from broker %d died", self.leader_id)
            raise

    async def _idle(self, now: int) -> None:
        self._wake.clear()
        pending = [st.backoff_until_ms for st in self._states.values() if not st.failed]
        timeout = max(0, min(pending) - now) / 1000 if pending else None
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            pass

    async def _fetch_once(self, ready: list[FetchState]) -> None:
        try:
            conn = await self.peers.get(self.leader_id)
        except KafkaError as exc:
            self._on_transport_error(ready, exc)
            return
        body = self._build(ready)
        timeout = self.settings.socket_timeout_ms + self.settings.wait_max_ms
        self.requests += 1
        try:
            resp = await conn.request(ApiKey.FETCH, body, timeout_ms=timeout)
        except KafkaError as exc:
            if exc.code == ErrorCode.REQUEST_TIMED_OUT:
                self.peers.drop(self.leader_id)
            self._on_transport_error(ready, exc)
            return
        code = resp.get("error", 0)
        if code:
            self._on_transport_error(ready, KafkaError(code, resp.get("message", ""), remote=True))
            return
        if self._transport_error:
            self._transport_error = ""
            self._emit("fetcher_recovered", "", None, None, f"fetching from broker {self.leader_id} again")
        await self._process(conn, resp, {st.partition.key: st for st in ready})

    def _build(self, ready: list[FetchState]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        pmax = self.settings.partition_max_bytes
        for st in ready:
            part = st.partition
            offset, last_epoch = part.fetch_position()
            st.sent_offset = offset
            topics.setdefault(part.topic, []).append({
                "partition": part.index, "fetch_offset": offset,
                "current_leader_epoch": st.leader_epoch, "last_fetched_epoch": last_epoch,
                "log_start_offset": part.log_start_offset, "partition_max_bytes": pmax})
        s = self.settings
        return {"replica_id": s.replica_id, "broker_epoch": self.broker_epoch(),
                "max_wait_ms": s.wait_max_ms, "min_bytes": s.min_bytes, "max_bytes": s.response_max_bytes,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    async def _process(self, conn: Any, resp: dict[str, Any], sent: dict[PartitionKey, FetchState]) -> None:
        now = self._clock()
        appended: list[Partition] = []
        progress: list[tuple[Partition, int, int]] = []
        out_of_range: list[FetchState] = []
        unanswered = dict(sent)
        for t in resp.get("topics", ()):
            topic = t["topic"]
            for e in t["partitions"]:
                key = (topic, e["partition"])
                st = unanswered.pop(key, None)
                if st is None or self._states.get(key) is not st:
                    continue            # removed or restarted while the request was in flight
                part = st.partition
                if part.leo != st.sent_offset:
                    continue            # the log moved meanwhile (R3.1): refetch from the new LEO
                code = e.get("error", 0)
                if code == 0:
                    div = e.get("diverging_epoch")
                    if div is not None and div.get("epoch", -1) >= -1 and div.get("end_offset", -1) >= 0:
                        self._truncate(st, div["epoch"], div["end_offset"], now)
                        continue
                    try:
                        n = part.append_as_follower(e.get("records") or b"", now)
                    except UnexpectedAppendOffset as exc:
                        self._partition_error(st, exc.code, now, str(exc))
                        continue
                    except KafkaError as exc:
                        self._partition_error(st, exc.code, now, exc.message)
                        continue
                    old_hw = part.update_follower_hw(e.get("high_watermark", -1),
                                                     e.get("log_start_offset", -1), now)
                    st.truncating_rounds = 0
                    if st.last_error:
                        st.last_error = 0
                    if n:
                        appended.append(part)
                    progress.append((part, old_hw, n))
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append(st)
                elif code == ErrorCode.FENCED_LEADER_EPOCH:
                    # Our request carried st.leader_epoch (a newer epoch replaces the state).
                    st.failed = True
                    self._note_error(st, code, now, f"leader {self.leader_id} fenced our epoch "
                                     f"{st.leader_epoch}: stop fetching until newer metadata (R7)")
                else:
                    self._partition_error(st, code, now, e.get("message", ""))
        for key, st in unanswered.items():
            if self._states.get(key) is st:
                self._partition_error(st, ErrorCode.UNKNOWN_SERVER_ERROR, now,
                                      "the leader's answer left this partition out")
        if appended:
            await self.hooks.flush(appended)
        for part, old_hw, n in progress:
            self.hooks.on_follower_progress(part, old_hw, n)
        for st in out_of_range:
            if self._states.get(st.partition.key) is st:
                await self._handle_out_of_range(conn, st)

    # ------------------------------------------------------------ reactions

    def _truncate(self, st: FetchState, epoch: int, end_offset: int, now: int) -> None:
        """R4: truncate by the leader's diverging epoch; maybe another round."""
        part = st.partition
        _, done = part.truncate_on_divergence(epoch, end_offset, now)
        st.truncating_rounds = 0 if done else st.truncating_rounds + 1
        self.hooks.on_follower_truncated(part)

    async def _handle_out_of_range(self, conn: Any, st: FetchState) -> None:
        """R6: ask the leader for its LEO (as a replica) and log start, then
        truncate to its LEO, or restart at its log start, or just refetch."""
        part = st.partition
        now = self._clock()
        try:
            leader_leo = await self._list_offset(conn, st, LATEST_TIMESTAMP)
            if self._states.get(part.key) is not st:
                return
            if leader_leo < part.leo:
                part.truncate_to(leader_leo, now, f"leader {self.leader_id} LEO {leader_leo} is below "
                                 f"ours after OFFSET_OUT_OF_RANGE (R6)")
                self.hooks.on_follower_truncated(part)
                return
            leader_start = await self._list_offset(conn, st, EARLIEST_TIMESTAMP)
            if self._states.get(part.key) is not st:
                return
            if leader_start > part.leo:
                part.truncate_fully_and_start_at(
                    leader_start, now, f"leader {self.leader_id} log starts at {leader_start}, "
                    f"beyond our LEO {part.leo} (R6)")
                self.hooks.on_follower_truncated(part)
                return
            self._partition_error(st, ErrorCode.OFFSET_OUT_OF_RANGE, now,
                                  f"leader log [{leader_start}, {leader_leo}] holds our LEO {part.leo}")
        except KafkaError as exc:
            self._partition_error(st, exc.code, now, f"ListOffsets after OFFSET_OUT_OF_RANGE: {exc}")

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

    def _partition_error(self, st: FetchState, code: int, now: int, message: str) -> None:
        """R7: back off this partition for replica.fetch.backoff.ms."""
        st.backoff_until_ms = now + self.settings.backoff_ms
        self._note_error(st, code, now, message)

    def _note_error(self, st: FetchState, code: int, now: int, message: str) -> None:
        if st.last_error != code:
            st.last_error = code
            self._emit("fetch_error", st.partition.name, None, error_name(code),
                       f"fetch from leader {self.leader_id} at epoch {st.leader_epoch}: "
                       f"{error_name(code)}{': ' + message if message else ''}",
                       leader=self.leader_id, failed=st.failed)

    def _on_transport_error(self, sts: list[FetchState], exc: KafkaError) -> None:
        now = self._clock()
        for st in sts:
            st.backoff_until_ms = now + self.settings.backoff_ms
        msg = str(exc)
        if msg != self._transport_error:
            self._transport_error = msg
            log.info("fetch from broker %d failed: %s; backing off %d ms", self.leader_id, msg,
                     self.settings.backoff_ms)
            self._emit("fetch_error", "", None, exc.name, f"fetch from broker {self.leader_id}: {msg}",
                       leader=self.leader_id, partitions=len(sts))

    def _emit(self, kind: str, partition: str, before: Any, after: Any, reason: str, **extra: Any) -> None:
        self._sink(Event(kind, self._clock(), partition, before, after, reason, extra))


class FetcherManager:
    """All fetchers of this broker, by leader broker id.

    Invariant: a partition key is in at most one fetcher, the one of the
    leader it follows; `_leader_of` says which.
    """

    def __init__(self, *, settings: FetcherSettings, peers: Any, broker_epoch: Callable[[], int],
                 hooks: FetcherHooks, sink: EventSink, clock: Callable[[], int]) -> None:
        self.settings = settings
        self.peers = peers
        # Each new fetcher shares these; the manager itself only routes partitions to fetchers.
        self._new_fetcher = functools.partial(ReplicaFetcher, settings=settings, peers=peers,
                                              broker_epoch=broker_epoch, hooks=hooks, sink=sink, clock=clock)
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[PartitionKey, int] = {}

    def fetchers(self) -> dict[int, ReplicaFetcher]:
        return dict(self._fetchers)

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
