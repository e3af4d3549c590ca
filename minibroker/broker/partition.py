"""One partition replica hosted on this broker: the driver half of Kafka's Partition.scala.

Owns, for one partition: its `PartitionLog`, its role (leader / follower /
none) as metadata last said, the leader id and epochs it knows, the HW when
it is not leader, and, while it leads, the `PartitionLeader` core that makes
every replication decision (ISR, HW, acks=all waiters). Also a small record
of recent append sizes so parked fetches can count readable bytes without
touching the log.

Must not know: sockets, requests or responses as a whole, purgatory, other
partitions, the controller. Methods change local state and return what
changed (`Decision`s from the core, byte counts); the `ReplicaManager`
completes waiters and wakes parked fetches afterwards.

Every check that Kafka's Partition does before a read lives here
(epoch fencing F3, the divergence check F5, read bounds F1/F6); the
leader's rules about followers (L2, I3, H1...) stay in the leader core, and
a follower's rules (truncation target, HW from the leader, log start, R3-R7)
in the follower core (minibroker.replication.follower_core), whose actions
the fetcher carries out through this class's follower methods.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, NamedTuple
from collections.abc import Iterable

from minibroker.broker.tail import TailCache
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event, EventSink
from minibroker.metadata import NO_LEADER, PartitionRecord
from minibroker.records import HEADER_SIZE, batch_crc_ok, parse_header, stamp, with_log_append_time
from minibroker.replication import Decision, PartitionLeader, Profile
from minibroker.replication.follower_core import follower_high_watermark, follows_log_start
from minibroker.replication.producer_state import NO_PRODUCER_ID, ProducerState
from minibroker.storage.producer_snapshot import delete_snapshot, read_snapshot

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"
UNDEFINED = -1
_NO_DIVERGENCE: tuple[ErrorCode, None] = (ErrorCode.NONE, None)


class ByteTracker:
    """Cumulative bytes appended, by batch boundary, for recent appends.

    Invariant: `_ends` ascends; `_cum[i]` is the bytes appended up to
    offset `_ends[i]`; offsets below `_ends[0]` are unknown (None).
    """

    __slots__ = ("_ends", "_cum", "_cap")

    def __init__(self, start_offset: int, cap: int = 8192) -> None:
        self._ends = [start_offset]
        self._cum = [0]
        self._cap = cap

    def on_append(self, next_offset: int, nbytes: int) -> None:
        """An append ended at `next_offset` (exclusive) and added `nbytes`."""
        if next_offset <= self._ends[-1]:
            self.reset(next_offset)
            return
        self._ends.append(next_offset)
        self._cum.append(self._cum[-1] + nbytes)
        if len(self._ends) > self._cap:
            half = len(self._ends) // 2
            del self._ends[:half]
            del self._cum[:half]

    def bytes_between(self, start: int, end: int) -> int | None:
        """Bytes between offsets `start` and `end` (batch-granular), or None
        when `start` is older than what is tracked."""
        if end <= start:
            return 0
        if start < self._ends[0]:
            return None
        i = bisect.bisect_right(self._ends, start) - 1
        j = bisect.bisect_right(self._ends, end) - 1
        return self._cum[j] - self._cum[i]

    def truncate(self, offset: int) -> None:
        """The log was truncated to `offset`: forget boundaries above it."""
        j = bisect.bisect_right(self._ends, offset)
        if j == 0:
            self.reset(offset)
            return
        del self._ends[j:]
        del self._cum[j:]

    def reset(self, offset: int) -> None:
        self._ends = [offset]
        self._cum = [0]


@dataclass(slots=True)
class ReadResult:
    """One partition's share of a Fetch response, before it is put on the wire.

    HW, LSO and log start are captured before any side effect (F7).
    """
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = UNDEFINED
    log_start_offset: int = UNDEFINED
    records: bytes = b""
    diverging_epoch: tuple[int, int] | None = None
    preferred_read_replica: int = UNDEFINED
    message: str = ""


class LeaderAppend(NamedTuple):
    """What a Produce's batches got on the leader (`Partition.append_as_leader`)."""
    first_offset: int
    last_offset: int
    decision: Decision | None       # None: a duplicate idempotent batch (P-DUP), nothing appended
    log_append_time: int            # the answer's log_append_time_ms: the stamp of a LogAppendTime topic,
    #                                 a duplicate's stored max timestamp (as Kafka), else -1


_new_append = tuple.__new__
NO_SNAPSHOT = -1
STALE_SNAPSHOT = -2


class Partition:
    """Invariant: `core` is not None exactly when role == LEADER, and then
    core.leader_epoch == leader_epoch. `_hw` is meaningful only when not
    leader (the core owns the leader's HW); log_start <= hw <= LEO."""

    def __init__(self, topic: str, index: int, *, node_id: int, log: Any, hw: int,
                 sink: EventSink) -> None:
        self.topic = topic
        self.index = index
        self.key = (topic, index)
        self.name = f"{topic}-{index}"
        self.node_id = node_id
        self.log = log
        self._sink = sink
        self.role = NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = UNDEFINED          # T3: a new partition starts at -1
        self.partition_epoch = UNDEFINED
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()         # as metadata says (followers keep no ISR of their own)
        # Invariant: as metadata says: during a reassignment, the replicas being added and removed (C10).
        self.adding_replicas: tuple[int, ...] = ()
        self.removing_replicas: tuple[int, ...] = ()
        self.core: PartitionLeader | None = None
        self._hw = self._clamp(hw)
        self.tracker = ByteTracker(log.log_end_offset)
        self.tail = TailCache()
        self.last_fetch_error: ErrorCode | None = None
        # The topic id of the topic this replica was created for (None: not known), set by its creator:
        # a topic deleted and created again under its name has another (KIP-516).
        self.topic_id: str | None = None
        # Invariant: describes every batch of the log below LEO (idempotent
        # producers, KIP-98) but those of expired producers, whatever the role,
        # so a new leader knows it.
        self.producers = self._load_producer_state()
        # Bumped on every truncation: a snapshot taken before one is stale.
        self.truncations = 0
        # `producers.through` when its snapshot was last written (NO_SNAPSHOT: never, by this
        # process; STALE_SNAPSHOT: producers expired since it was).
        self.snapshot_through = NO_SNAPSHOT

    def _load_producer_state(self) -> ProducerState:
        """Log recovery: the snapshot if it is usable, then the headers of
        the batches after it (from the log start without one)."""
        lg = self.log
        state: ProducerState | None = None
        directory = getattr(lg, "directory", None)
        data = read_snapshot(directory) if directory else None
        if data is not None:
            try:
                state = ProducerState.from_snapshot(data, self.name)
            except ValueError:
                state = None
        if state is None or not lg.log_start_offset <= state.through <= lg.log_end_offset:
            if state is not None and state.through > lg.log_end_offset:
                state.truncate_to(lg.log_end_offset)      # recovery cut a tail the snapshot covered
            else:
                state = ProducerState(self.name)
                state.through = lg.log_start_offset
        state.truncate_head(lg.log_start_offset)
        for pid, epoch, seq, base, last, max_ts in lg.producer_batches(state.through):
            state.on_batch(pid, epoch, seq, base, last, max_ts)
        return state

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """P-EXPIRE on this replica, triggered by the broker's periodic check and when the
        replica is loaded: forget the producers idle for `expiration_ms`. A snapshot written
        before is marked stale, so the next checkpoint rewrites it. Returns their ids."""
        gone = self.producers.remove_expired(now_ms, expiration_ms)
        if gone and self.snapshot_through != NO_SNAPSHOT:
            self.snapshot_through = STALE_SNAPSHOT
        return gone

    # ------------------------------------------------------------ queries

    @property
    def hw(self) -> int:
        core = self.core
        return core.hw if core is not None else self._hw

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def is_leader(self) -> bool:
        return self.core is not None

    def _clamp(self, hw: int) -> int:
        return min(max(hw, self.log.log_start_offset), self.log.log_end_offset)

    def check_leader_epoch(self, requested: int) -> ErrorCode:
        """F3: a request's current leader epoch against ours (-1 = not given)."""
        if requested < 0 or requested == self.leader_epoch:
            return ErrorCode.NONE
        if requested < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # ------------------------------------------------------------ role changes

    def make_leader(self, rec: PartitionRecord, now_ms: int, *, profile: Profile, lag_max_ms: int,
                    min_isr: int, broker_epoch: int,
                    eligibility: Iterable[tuple[int, bool, int]]) -> list[Decision]:
        """Metadata names this broker leader (T1). A new leader epoch writes
        the epoch-cache entry (E2) before anything else; an existing core
        takes the update itself (I7, re-election L4). Returns the core's
        decisions for the driver to carry out."""
        decisions: list[Decision] = []
        new_epoch = rec.leader_epoch > self.leader_epoch
        if new_epoch:
            self.log.assign_leader_epoch(rec.leader_epoch)
        core = self.core
        if core is not None:
            decisions.append(core.on_metadata(list(rec.isr), rec.partition_epoch, rec.leader_epoch,
                                              list(rec.replicas), now_ms))
        else:
            isr = list(rec.isr) if self.node_id in rec.isr else [*rec.isr, self.node_id]
            core = PartitionLeader(
                self.name, list(rec.replicas), self.node_id,
                leader_epoch=rec.leader_epoch, partition_epoch=rec.partition_epoch, isr=isr,
                leo=self.log.log_end_offset, hw=self._clamp(self._hw),
                log_start_offset=self.log.log_start_offset, lag_max_ms=lag_max_ms, min_isr=min_isr,
                profile=profile, now_ms=now_ms, sink=self._sink, broker_epoch=broker_epoch,
                routine_events=False)
            self.core = core
            decisions.append(core.initial_decision)
        for replica, eligible, epoch in eligibility:
            if replica != self.node_id:
                decisions.append(core.set_replica_eligibility(replica, eligible, epoch, now_ms))
        self.role = LEADER
        self._adopt(rec)
        return decisions

    def make_follower(self, rec: PartitionRecord, now_ms: int) -> tuple[Decision | None, bool]:
        """Metadata names another broker (or nobody) leader (T2). Fails the
        acks=all waiters of a lost leadership; keeps the log as it is (no
        eager truncation, R1). Returns (that failure decision, whether the
        leader epoch rose, i.e. fetching must restart)."""
        failed = None
        core = self.core
        was = self.role
        if core is not None:
            self._hw = core.hw
            failed = core.fail_all_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms)
            self.core = None
        new_epoch = rec.leader_epoch > self.leader_epoch
        self.role = FOLLOWER
        before = {"role": was, "leader": self.leader_id, "leader_epoch": self.leader_epoch}
        self._adopt(rec)
        if new_epoch or was != FOLLOWER:
            self._emit("became_follower", now_ms, before,
                       {"role": FOLLOWER, "leader": rec.leader, "leader_epoch": rec.leader_epoch},
                       rec.reason or "metadata", leo=self.leo, hw=self._hw)
        return failed, new_epoch

    def make_none(self, now_ms: int, reason: str) -> Decision | None:
        """This broker no longer hosts a replica (reassigned away, topic deleted)."""
        failed = None
        if self.core is not None:
            self._hw = self.core.hw
            failed = self.core.fail_all_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms)
            self.core = None
        if self.role != NONE:
            self._emit("stopped_replica", now_ms, self.role, NONE, reason)
        self.role = NONE
        return failed

    def _adopt(self, rec: PartitionRecord) -> None:
        self.leader_id = rec.leader
        self.leader_epoch = rec.leader_epoch
        self.partition_epoch = rec.partition_epoch
        self.replicas = rec.replicas
        self.isr = rec.isr
        self.adding_replicas = rec.adding_replicas
        self.removing_replicas = rec.removing_replicas

    # ------------------------------------------------------------ leader: produce

    def append_as_leader(self, records: bytes, now_ms: int) -> LeaderAppend:
        """Produce path (P4): check an idempotent batch against the producer
        state (from its header: no per-record work), validate, stamp with our
        epoch (and, for message.timestamp.type=LogAppendTime, with `now_ms` as
        each batch's time), append, tell the core the new LEO. A duplicate
        batch (P-DUP) is validated as any other (Kafka validates before its
        producer-state check), then answered with its original offsets and
        stored max timestamp and no decision, appending nothing. Raises
        KafkaError (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...) with nothing
        written."""
        core = self.core
        assert core is not None
        h = parse_header(records) if len(records) >= HEADER_SIZE else None
        pid = h.producer_id if h is not None else NO_PRODUCER_ID
        if h is not None and pid != NO_PRODUCER_ID:
            if h.size != len(records):
                raise KafkaError(ErrorCode.INVALID_RECORD, f"{self.name}: a produce of idempotent producer {pid} "
                                                           "must carry exactly one batch per partition")
            if h.size >= HEADER_SIZE and batch_crc_ok(records, 0, h.size):
                check = self.producers.check_client_batch(pid, h.producer_epoch, h.base_sequence,
                                                          h.last_offset_delta)
                if check.kind == "reject":
                    raise KafkaError(check.error, check.message)
                if check.kind == "duplicate":
                    self.log.check_as_leader(records, now_ms)
                    return _new_append(LeaderAppend, (check.base_offset, check.last_offset, None, check.timestamp))
        append_time = -1
        if self.log.config.log_append_time:
            records = with_log_append_time(records, now_ms)
            append_time = now_ms
        res = self.log.append_as_leader(records, core.leader_epoch, now_ms=now_ms)
        next_offset = res.last_offset + 1
        if h is not None:
            self.producers.on_batch(pid, h.producer_epoch, h.base_sequence, res.first_offset, res.last_offset,
                                    now_ms if append_time >= 0 else h.max_timestamp)
        self.tracker.on_append(next_offset, len(records))
        stamped = self.log.take_stamped()
        if stamped is None:
            stamped = stamp(records, res.first_offset, core.leader_epoch)
        self.tail.on_append(res.first_offset, next_offset, stamped)
        return _new_append(LeaderAppend, (res.first_offset, res.last_offset, core.on_append(next_offset, now_ms),
                                          append_time))

    # ------------------------------------------------------------ leader: fetch

    def divergence(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[ErrorCode, tuple[int, int] | None]:
        """F5 for a follower fetch carrying its last fetched epoch: (error,
        diverging (epoch, end offset) or None)."""
        if last_fetched_epoch < 0:
            return _NO_DIVERGENCE
        lg = self.log
        if last_fetched_epoch == lg.epoch_cache.latest_epoch:       # the common case: (epoch, LEO)
            if fetch_offset < lg.log_start_offset:
                return ErrorCode.OFFSET_OUT_OF_RANGE, None
            if lg.log_end_offset < fetch_offset:
                return ErrorCode.NONE, (last_fetched_epoch, lg.log_end_offset)
            return _NO_DIVERGENCE
        epoch, end = lg.end_offset_for_epoch(last_fetched_epoch)
        if epoch == UNDEFINED or end == UNDEFINED:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if fetch_offset < self.log.log_start_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE, None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return ErrorCode.NONE, (epoch, end)
        return ErrorCode.NONE, None

    def read(self, fetch_offset: int, max_bytes: int, limit: int, min_one: bool) -> bytes:
        """Whole batches from `fetch_offset` below `limit` (HW or LEO): from
        the tail cache when it holds them, else from the log. Raises
        KafkaError(OFFSET_OUT_OF_RANGE) outside [log start, LEO]."""
        lg = self.log
        if lg.log_start_offset <= fetch_offset:
            if fetch_offset < limit:
                if limit <= lg.log_end_offset:
                    cached = self.tail.read(fetch_offset, max_bytes, limit)
                    if cached is not None:
                        return cached
            elif fetch_offset <= lg.log_end_offset and not lg.closed:
                return b""                  # nothing below the limit: a parked fetch's first read
        return lg.read(fetch_offset, max_bytes, limit, min_one_batch=min_one)

    def readable_bytes(self, fetch_offset: int, limit: int) -> int | None:
        return self.tracker.bytes_between(fetch_offset, limit)

    # ------------------------------------------------------------ follower

    def initial_fetch_offset(self, now_ms: int) -> int:
        """R1: the LEO when the log has epochs; otherwise the HW, truncating
        to it first (a no-op for an empty log)."""
        if self.log.latest_epoch is not None:
            return self.log.log_end_offset
        if self._hw < self.log.log_end_offset:
            self.truncate_to(self._hw, now_ms, "becoming follower of a log without leader epochs: "
                                              f"truncate to HW {self._hw} (R1)")
        return self.log.log_end_offset

    def append_as_follower(self, records: bytes, now_ms: int) -> int:
        """Append the leader's batches verbatim (R3). Returns bytes appended.
        Raises UnexpectedAppendOffset / KafkaError(CORRUPT_MESSAGE)."""
        if not records:
            return 0
        last, headers = self.log.append_batches_as_follower(records, now_ms=now_ms)
        on_batch = self.producers.on_batch
        for h in headers:
            base = h.base_offset
            on_batch(h.producer_id, h.producer_epoch, h.base_sequence, base, base + h.last_offset_delta,
                     h.max_timestamp)
        n = len(records)
        self.tracker.on_append(last + 1, n)
        self.tail.on_append(headers[0].base_offset, last + 1, records if type(records) is bytes else bytes(records))
        return n

    def update_follower_hw(self, leader_hw: int, leader_log_start: int, now_ms: int) -> int:
        """R3.4/R3.5: HW = clamp(leader HW, log start, LEO), and follow the
        leader's log start forward. Returns the old HW (the HW may drop)."""
        lg = self.log
        start, leo = lg.log_start_offset, lg.log_end_offset
        if follows_log_start(leader_log_start, start, leo):
            lg.maybe_increment_log_start_offset(
                leader_log_start, reason=f"leader {self.leader_id} log start offset is {leader_log_start}")
            start = lg.log_start_offset
            self.producers.truncate_head(start)
        old = self._hw
        new = follower_high_watermark(leader_hw, start, leo)
        if new != old:
            self._hw = new
            if new < old:
                self._emit("hw_move", now_ms, old, new,
                           f"leader {self.leader_id} (epoch {self.leader_epoch}) reports HW {leader_hw}; "
                           "a follower's HW is not monotonic (R3)", role=FOLLOWER)
        return old

    def on_log_start_moved(self) -> None:
        """H6: the log start moved (retention): the leader core learns it (fetches below
        are out of range, F6); a follower's HW is pushed up to it."""
        if self.core is None:
            self._hw = self._clamp(self._hw)
        else:
            self.core.on_log_start_offset(self.log.log_start_offset)
        self.producers.truncate_head(self.log.log_start_offset)

    def truncate_to(self, offset: int, now_ms: int, reason: str) -> int:
        """R5: drop everything at or above `offset` (and epoch entries from
        there). The log emits the `truncation` event; truncation below the
        HW (unclean elections) is named in its reason."""
        hw = self.hw
        if offset < hw:
            reason += f" (below HW {hw})"
        new_leo = self.log.truncate_to(offset, reason=reason)
        self._truncate_producers(new_leo)
        self.tracker.truncate(new_leo)
        self.tail.truncate(new_leo)
        if self._hw > new_leo:
            self._hw = new_leo
        return new_leo

    def truncate_fully_and_start_at(self, offset: int, now_ms: int, reason: str) -> None:
        """R6: the leader's log starts beyond our LEO: restart empty at `offset`."""
        self.log.truncate_fully_and_start_at(offset, reason=reason)
        self.truncations += 1
        self.producers.reset(offset)
        self._drop_snapshot()
        self.tracker.reset(offset)
        self.tail.clear()
        self._hw = offset

    def _truncate_producers(self, new_leo: int) -> None:
        self.truncations += 1
        self.producers.truncate_to(new_leo)
        self._drop_snapshot()

    def _drop_snapshot(self) -> None:
        directory = getattr(self.log, "directory", None)
        if directory:
            delete_snapshot(directory)

    # ------------------------------------------------------------ events

    def _emit(self, kind: str, now_ms: int, before: Any, after: Any, reason: str, **extra: Any) -> None:
        self._sink(Event(kind, now_ms, self.name, before, after, reason, extra))

