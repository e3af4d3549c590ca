"""The partition leader core: one partition, seen from its leader.

Owns, for one partition: the replica list (first = preferred leader), the
leader id, leader epoch, partition epoch and the offset where the leader
epoch started, the leader's LEO, the HW, the committed ISR and any pending
ISR change, per-follower fetch state, and the acks=all waiters.

Must not know: sockets, asyncio, files or the clock (every event takes
`now_ms`), record contents, the log itself (the driver appends and tells us
the new LEO), request parsing, or how an AlterPartition reaches the
controller. The driver feeds events in and carries `Decision`s out.

Rules follow Kafka's Partition.scala / Replica.scala (see
docs/kafka-mapping.md, "Partition leader core"); the `Profile` switches
select between the lesson's rules and Kafka 4.x.

Fetch errors are *returned* in `Decision.error`, never raised: an unknown
replica, a stale broker incarnation (KIP-903) or an offset outside
[log start, LEO] leaves the state untouched. Programming errors (an ISR
without the leader, a LEO going backwards) raise ValueError.
"""
from __future__ import annotations

import functools
import heapq
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple
from collections.abc import Callable, Iterable, Mapping

from minibroker.errors import ErrorCode
from minibroker.events import Event, EventSink, discard
from minibroker.replication.profile import Profile

# AlterPartition errors after which the leader reverts to the last committed
# state and does not retry (I6).
_REVERT_ON = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
# AlterPartition errors after which the change stays pending until metadata
# overrides it (I6). 100 is UNKNOWN_TOPIC_ID.
_STAY_PENDING_ON = frozenset({
    int(ErrorCode.FENCED_LEADER_EPOCH), int(ErrorCode.INVALID_UPDATE_VERSION),
    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), 100, int(ErrorCode.INVALID_REQUEST),
    int(ErrorCode.NEW_LEADER_ELECTED),
})

UNKNOWN = -1


@functools.lru_cache(maxsize=4096)
def _joined(replicas: tuple[int, ...]) -> str:
    """ "1,2,3": a replica set as events name it (one string per set, made once; an HW move names its ISR)."""
    return ",".join(str(r) for r in replicas)


class FollowerState(NamedTuple):
    """What the leader knows about one follower (L1). Replaced, never mutated (a named
    tuple: every follower fetch builds one, and a tuple is the cheapest immutable record).

    Invariant: leo == -1 means unknown (no fetch since this broker became
    leader); last_caught_up_ms / last_fetch_ms None means never (Kafka's 0).
    """
    leo: int
    last_caught_up_ms: int | None
    last_fetch_ms: int | None
    last_fetch_leader_leo: int
    broker_epoch: int = UNKNOWN
    log_start_offset: int = UNKNOWN


@dataclass(frozen=True, slots=True)
class PendingIsrChange:
    """An ISR change proposed to the controller and not yet answered (I2/I3).

    Invariant: at most one per partition (I4); `isr` is in Kafka's ISR order and
    contains the leader.
    """
    kind: str                   # 'expand' | 'shrink'
    isr: tuple[int, ...]        # the proposed ISR
    replicas: tuple[int, ...]   # who joins (expand) or leaves (shrink)
    proposed_at_ms: int
    partition_epoch: int        # the committed partition epoch it builds on


@dataclass(slots=True)
class Decision:
    """What one event changed, for the driver to act on.

    `isr_proposal` (kafka profile): an AlterPartition the driver must send
    (or resend), the proposed ISR (a joiner last). `completed`: acks=all
    waiters resolved by this event, in offset order, after the state change.
    `error`: a per-partition error for the event itself (fetch only).
    """
    old_hw: int
    new_hw: int
    hw_moved: bool = False
    isr_proposal: list[int] | None = None
    isr_changed: bool = False
    completed: list[tuple[object, ErrorCode]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class _Waiter:
    required_offset: int
    seq: int
    token: object
    alive: bool = True

    def __lt__(self, other: _Waiter) -> bool:
        return (self.required_offset, self.seq) < (other.required_offset, other.seq)


@dataclass(slots=True)
class _Eligibility:
    eligible: bool = True
    broker_epoch: int = UNKNOWN   # the metadata's epoch for that broker


def _later(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


class PartitionLeader:
    """Leader-side replication state machine for one partition.

    Constructing it is Kafka's `makeLeader` for a new leader epoch (T1/L4):
    the epoch starts at `leo`; follower state is reset; the HW is tried once
    (`initial_decision` holds that step's events). Writing the epoch-cache
    entry for the new epoch (E2) is the driver's job.
    """

    def __init__(
        self,
        partition: str,
        replicas: list[int],
        leader_id: int,
        *,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        leo: int,
        hw: int,
        log_start_offset: int = 0,
        lag_max_ms: int,
        min_isr: int,
        profile: Profile,
        now_ms: int,
        sink: EventSink = discard,
        broker_epoch: int = UNKNOWN,
        routine_events: bool = True,
    ) -> None:
        replicas_t = tuple(replicas)
        if not replicas_t or len(set(replicas_t)) != len(replicas_t):
            raise ValueError(f"replicas must be non-empty and distinct: {replicas!r}")
        if leader_id not in replicas_t:
            raise ValueError(f"leader {leader_id} is not a replica of {replicas_t}")
        if not 0 <= log_start_offset <= hw <= leo:
            raise ValueError(f"need 0 <= log_start_offset <= hw <= leo, got "
                             f"{log_start_offset}, {hw}, {leo}")
        if lag_max_ms < 0 or min_isr < 1:
            raise ValueError("lag_max_ms must be >= 0 and min_isr >= 1")
        self.partition = partition
        self.leader_id = leader_id
        self.profile = profile
        self.lag_max_ms = lag_max_ms
        self.min_isr = min_isr            # changed by `on_min_isr_changed` only
        self.broker_epoch = broker_epoch  # this leader's own incarnation (I5)
        # Invariant: False only skips the routine per-request events: follower_fetch, and produce_completed
        # for waiters that succeeded (a failure is always emitted).
        self._routine_events = routine_events
        self._sink = sink
        self._replicas: tuple[int, ...] = replicas_t
        # Invariant: contains the leader; a subset of replicas; in the controller's order
        # (a rejoining replica is appended at the end, as Kafka keeps it).
        self._isr: tuple[int, ...] = self._ordered(isr)
        self._check_isr(self._isr)
        self._pending: PendingIsrChange | None = None
        self._maximal: tuple[int, ...] = self._isr
        # Invariant: effective_min_isr and under_min_isr are `_min_isr_rule` of min_isr, the replicas and the
        # committed ISR as they are now (plain attributes: asked several times per record).
        self.effective_min_isr, self.under_min_isr = self._min_isr_rule()
        self._leader_epoch = leader_epoch
        self._partition_epoch = partition_epoch
        # Invariant: epoch_start_offset <= leo; the LEO when this epoch began.
        self._epoch_start_offset = leo
        # Invariant: log_start_offset <= hw <= leo; hw never decreases. A plain attribute (the driver reads
        # it twice per Fetch), written only by this core (`_maybe_increment_hw`).
        self._leo = leo
        self.hw = hw
        self._log_start_offset = log_start_offset
        self._followers: dict[int, FollowerState] = {}
        self._eligibility: dict[int, _Eligibility] = {}
        # Invariant: heap ordered by (required_offset, seq); dead entries are
        # skipped lazily; _waiter_by_id holds exactly the live ones.
        self._waiters: list[_Waiter] = []
        self._waiter_by_id: dict[int, _Waiter] = {}
        self._seq = itertools.count()
        for r in replicas_t:
            if r != leader_id:
                self._followers[r] = self._fresh_follower(r, now_ms)
        d = self._begin()
        self._emit(d, "became_leader", now_ms, None,
                   {"leader": leader_id, "leader_epoch": leader_epoch, "isr": list(self._isr)},
                   f"leader epoch {leader_epoch} starts at offset {leo}",
                   epoch_start_offset=leo, partition_epoch=partition_epoch)
        self._maybe_increment_hw(d, now_ms, "became leader")
        self.initial_decision = self._finish(d)

    # ------------------------------------------------------------------ queries

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def leo(self) -> int:
        return self._leo

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR, in the controller's order (a rejoiner last)."""
        return self._isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed ISR plus a pending expansion's joiner (at the end)."""
        return self._maximal

    @property
    def pending(self) -> PendingIsrChange | None:
        return self._pending

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def epoch_start_offset(self) -> int:
        return self._epoch_start_offset

    @property
    def followers(self) -> Mapping[int, FollowerState]:
        return MappingProxyType(self._followers)

    @property
    def waiting(self) -> int:
        """How many acks=all waiters are registered."""
        return len(self._waiter_by_id)

    def is_isr_eligible(self, replica: int) -> bool:
        """Not fenced, not shutting down, and its fetch incarnation matches (I3)."""
        el = self._eligibility.get(replica)
        if el is None:
            return True
        if not el.eligible:
            return False
        f = self._followers.get(replica)
        stored = f.broker_epoch if f is not None else UNKNOWN
        return stored == UNKNOWN or el.broker_epoch == UNKNOWN or stored == el.broker_epoch

    def is_caught_up(self, replica: int, now_ms: int) -> bool:
        """L3 against the leader's current LEO (lesson: time only)."""
        f = self._followers[replica]
        if self.profile.leo_equal_is_caught_up and f.leo == self._leo:
            return True
        if f.last_caught_up_ms is None:
            return False
        return now_ms - f.last_caught_up_ms <= self.lag_max_ms

    def isr_join_blocker(self, replica: int) -> str | None:
        """Why `replica` would not join the ISR now, or None if nothing stops it
        (or it is already in). For explanations; the rule lives in
        `_maybe_expand_isr`."""
        if replica in self._isr:
            return None
        if self._pending is not None:
            return f"an ISR {self._pending.kind} is in flight"
        if not self.is_isr_eligible(replica):
            return "not ISR-eligible (fenced, shutting down or stale incarnation)"
        f = self._followers[replica]
        if f.leo < self.hw:
            return f"LEO {f.leo} < HW {self.hw}"
        if self.profile.expand_requires_epoch_start and f.leo < self._epoch_start_offset:
            return f"LEO {f.leo} < leader epoch start offset {self._epoch_start_offset}"
        return None

    def check_produce(self, acks: int) -> ErrorCode:
        """Produce admission (P1/P3); a pure query. acks=all is refused when the
        committed ISR is below the effective min ISR; acks=0/1 never are."""
        if acks not in (-1, 0, 1):
            return ErrorCode.INVALID_REQUIRED_ACKS
        if acks == -1 and self.under_min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    # ------------------------------------------------------------------- events

    def on_append(self, new_leo: int, now_ms: int) -> Decision:
        """The driver appended to the leader's log (P4); LEO moves, maybe HW."""
        if new_leo < self._leo:
            raise ValueError(f"LEO cannot go back from {self._leo} to {new_leo}")
        d = self._begin()
        self._leo = new_leo
        self._maybe_increment_hw(d, now_ms, "leader append")
        return self._finish(d)

    def on_follower_fetch(
        self,
        replica: int,
        fetch_offset: int,
        now_ms: int,
        *,
        broker_epoch: int = UNKNOWN,
        log_start_offset: int = UNKNOWN,
        has_leader_epoch: bool = True,
    ) -> Decision:
        """A follower's fetch arrived (F8): L2 update, maybe expand (I3), maybe HW.

        Call once per initial read, never on a purgatory completion, never when
        a diverging epoch was returned. Errors come back in `Decision.error`
        with no state change: unknown replica -> UNKNOWN_LEADER_EPOCH when the
        request carried a current leader epoch, else NOT_LEADER_OR_FOLLOWER
        (F4); a broker epoch older than the metadata's -> NOT_LEADER_OR_FOLLOWER
        (L5); an offset outside [log start, LEO] -> OFFSET_OUT_OF_RANGE (F6).
        """
        d = self._begin()
        prev = self._followers.get(replica)
        if prev is None:
            d.error = (ErrorCode.UNKNOWN_LEADER_EPOCH if has_leader_epoch
                       else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self._emit(d, "fetch_rejected", now_ms, None, None,
                       f"replica {replica} is not a follower of this partition",
                       replica=replica, error=d.error.name)
            return self._finish(d)
        el = self._eligibility.get(replica)
        if (broker_epoch != UNKNOWN and el is not None and el.broker_epoch != UNKNOWN
                and broker_epoch < el.broker_epoch):
            d.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            self._emit(d, "fetch_rejected", now_ms, None, None,
                       f"broker epoch {broker_epoch} of replica {replica} is older than "
                       f"{el.broker_epoch}", replica=replica, error=d.error.name)
            return self._finish(d)
        if self.fetch_offset_error(fetch_offset) != ErrorCode.NONE:
            d.error = ErrorCode.OFFSET_OUT_OF_RANGE
            self._emit(d, "fetch_rejected", now_ms, None, None,
                       f"fetch offset {fetch_offset} outside [{self._log_start_offset}, "
                       f"{self._leo}]", replica=replica, error=d.error.name)
            return self._finish(d)

        leader_leo = self._leo
        if fetch_offset >= leader_leo:
            branch = 1
            caught_up = _later(prev.last_caught_up_ms, now_ms)
        elif fetch_offset >= prev.last_fetch_leader_leo:
            branch = 2
            caught_up = _later(prev.last_caught_up_ms, prev.last_fetch_ms)
        else:
            branch = 0
            caught_up = prev.last_caught_up_ms
        now = FollowerState(
            leo=fetch_offset,
            last_caught_up_ms=caught_up,
            last_fetch_ms=now_ms,
            last_fetch_leader_leo=max(leader_leo, prev.last_fetch_leader_leo),
            broker_epoch=broker_epoch,
            log_start_offset=log_start_offset if log_start_offset != UNKNOWN else prev.log_start_offset,
        )
        self._followers[replica] = now
        if self._routine_events:
            self._emit_follower_fetch(d, now_ms, replica, fetch_offset, leader_leo, branch, prev, now)
        maximal_before = self._maximal
        self._maybe_expand_isr(d, replica, now_ms)
        if prev.leo != now.leo or self._maximal != maximal_before:
            self._maybe_increment_hw(d, now_ms, fetched=(replica, fetch_offset))
        return self._finish(d)

    def on_follower_refetch(self, replica: int, fetch_offset: int, now_ms: int, *, broker_epoch: int = UNKNOWN,
                            log_start_offset: int = UNKNOWN) -> bool:
        """A follower fetched again at its last fetch's offset (a session Fetch that does not
        name the partition, KS3). When it is in the ISR at the LEO with the same broker epoch
        and log start, and no routine fetch events are on, `on_follower_fetch` would only
        refresh its fetch times (L2 branch 1; no expansion, no HW move, no error): that is
        done here and True returned. Otherwise nothing changes and False says the driver
        must apply `on_follower_fetch`."""
        prev = self._followers.get(replica)
        if (prev is None or self._routine_events or fetch_offset != prev.leo or prev.leo != self._leo
                or replica not in self._isr
                or broker_epoch != prev.broker_epoch
                or (log_start_offset != UNKNOWN and log_start_offset != prev.log_start_offset)):
            return False
        el = self._eligibility.get(replica)
        if el is not None and el.broker_epoch != UNKNOWN and broker_epoch != UNKNOWN \
                and broker_epoch < el.broker_epoch:
            return False
        self._followers[replica] = FollowerState(
            leo=prev.leo, last_caught_up_ms=_later(prev.last_caught_up_ms, now_ms), last_fetch_ms=now_ms,
            last_fetch_leader_leo=max(self._leo, prev.last_fetch_leader_leo), broker_epoch=prev.broker_epoch,
            log_start_offset=prev.log_start_offset)
        return True

    def maybe_shrink_isr(self, now_ms: int) -> Decision:
        """The periodic ISR check (I1/I2): followers not caught up leave.

        Skipped while an ISR change is in flight. The leader never leaves; the
        ISR may shrink below min ISR.
        """
        d = self._begin()
        if self._pending is not None:
            return self._finish(d)
        out = [r for r in self._isr
               if r != self.leader_id and not self.is_caught_up(r, now_ms)]
        if not out:
            return self._finish(d)
        why = "; ".join(self._lag_reason(r, now_ms) for r in out)
        new_isr = tuple(r for r in self._isr if r not in out)
        evidence = {"last_caught_up_ms": {r: self._followers[r].last_caught_up_ms for r in out},
                    "lag_max_ms": self.lag_max_ms}
        if self.profile.commit_isr_immediately:
            self._commit_isr(d, new_isr, self._partition_epoch + 1, now_ms,
                             f"not caught up: {why}", **evidence)
        else:
            self._propose(d, "shrink", new_isr, tuple(out), now_ms,
                          f"not caught up: {why}", **evidence)
        return self._finish(d)

    def add_waiter(self, required_offset: int, token: object, now_ms: int = 0) -> Decision:
        """Register an acks=all produce that needs HW >= required_offset (P5).

        Completes at once if the HW is already there. The token must stay
        registered at most once; remove it with `remove_waiter`.
        """
        d = self._begin()
        if id(token) in self._waiter_by_id:
            raise ValueError("token already registered")
        w = _Waiter(required_offset, next(self._seq), token)
        self._waiter_by_id[id(token)] = w
        heapq.heappush(self._waiters, w)
        self._complete_reached(d, now_ms)
        return self._finish(d)

    def remove_waiter(self, token: object) -> bool:
        """Forget a waiter (driver timeout, connection death). True if it was
        still registered."""
        w = self._waiter_by_id.pop(id(token), None)
        if w is None:
            return False
        w.alive = False
        if len(self._waiters) > 2 * len(self._waiter_by_id) + 64:
            # A frozen HW would otherwise keep every timed-out waiter around.
            self._waiters = [x for x in self._waiters if x.alive]
            heapq.heapify(self._waiters)
        return True

    def fail_all_waiters(self, code: ErrorCode = ErrorCode.NOT_LEADER_OR_FOLLOWER,
                         now_ms: int = 0) -> Decision:
        """Leadership was lost (T2): every waiter completes with `code`."""
        d = self._begin()
        offsets = []
        while self._waiters:
            w = heapq.heappop(self._waiters)
            if w.alive:
                del self._waiter_by_id[id(w.token)]
                d.completed.append((w.token, code))
                offsets.append(w.required_offset)
        if offsets:
            self._emit(d, "produce_completed", now_ms, None, code.name,
                       f"{len(offsets)} waiter(s) failed: leadership lost",
                       required_offsets=offsets)
        return self._finish(d)

    def apply_committed_isr(
        self, isr: list[int], partition_epoch: int, now_ms: int,
        leader_epoch: int | None = None,
    ) -> Decision:
        """The controller answered our AlterPartition with success (I6).

        Ignored when nothing is pending (metadata overrode it), when the
        answer's leader epoch differs from ours, or when its partition epoch
        is older than ours. Otherwise the controller's ISR is adopted (it may
        differ from the proposal), the change is committed, the HW recomputed.
        """
        d = self._begin()
        stale = None
        if self._pending is None:
            stale = "no ISR change is pending"
        elif leader_epoch is not None and leader_epoch != self._leader_epoch:
            stale = f"leader epoch {leader_epoch} != ours {self._leader_epoch}"
        elif partition_epoch < self._partition_epoch:
            stale = f"partition epoch {partition_epoch} < ours {self._partition_epoch}"
        else:
            new_isr = self._ordered(isr)
            if self.leader_id not in new_isr or not set(new_isr) <= set(self._replicas):
                stale = f"ISR {list(isr)} is not a subset of the replicas containing the leader"
        if stale is not None:
            self._emit(d, "isr_update_ignored", now_ms, list(self._isr), list(isr), stale,
                       partition_epoch=partition_epoch)
            return self._finish(d)
        kind = self._pending.kind if self._pending else "change"
        self._commit_isr(d, new_isr, partition_epoch, now_ms,
                         f"controller committed the {kind}")
        return self._finish(d)

    def on_alter_partition_error(self, code: ErrorCode | int, now_ms: int) -> Decision:
        """The controller answered our AlterPartition with an error (I6).

        OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA: revert to the committed
        state, no retry. FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION,
        UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, INVALID_REQUEST,
        NEW_LEADER_ELECTED: stay pending until metadata overrides. Any other
        error: `Decision.isr_proposal` carries the same proposal to resend.
        """
        d = self._begin()
        p = self._pending
        if p is None:
            return self._finish(d)
        name = code.name if isinstance(code, ErrorCode) else str(code)
        if code in _REVERT_ON:
            self._pending = None
            self._maximal = self._isr
            self._emit(d, "isr_rejected", now_ms, list(p.isr), list(self._isr),
                       f"AlterPartition {p.kind} failed with {name}; back to the committed ISR",
                       error=name)
        elif int(code) in _STAY_PENDING_ON:
            self._emit(d, "isr_rejected", now_ms, list(p.isr), list(p.isr),
                       f"AlterPartition {p.kind} failed with {name}; pending until metadata",
                       error=name)
        else:
            d.isr_proposal = list(p.isr)
            self._emit(d, "isr_proposed", now_ms, list(self._isr), list(p.isr),
                       f"resend after {name}", change=p.kind)
        return self._finish(d)

    def on_min_isr_changed(self, min_isr: int, now_ms: int) -> Decision:
        """A topic or dynamic broker config set min.insync.replicas (kafka-configs --alter):
        effective for the next acks=all append and the under-min-ISR checks; a lower value
        may release a HW the strict min ISR rule (H2) had frozen, so the HW is recomputed."""
        if min_isr < 1:
            raise ValueError("min_isr must be >= 1")
        d = self._begin()
        if min_isr != self.min_isr:
            self._emit(d, "min_isr_changed", now_ms, self.min_isr, min_isr,
                       f"min.insync.replicas {self.min_isr} -> {min_isr} (config change)")
            self.min_isr = min_isr
            self.effective_min_isr, self.under_min_isr = self._min_isr_rule()
            self._maybe_increment_hw(d, now_ms, "min.insync.replicas changed")
        return self._finish(d)

    def on_metadata(
        self, isr: list[int], partition_epoch: int, leader_epoch: int,
        replicas: list[int], now_ms: int,
    ) -> Decision:
        """Metadata says this broker still leads (T1 for an existing leader).

        Ignored if the partition epoch is older than ours (I7). Otherwise the
        ISR is overwritten and any pending change discarded. A higher leader
        epoch is a re-election (L4): the epoch restarts at the LEO, follower
        LEOs are kept, caught-up/fetch times reset. The driver handles
        leadership moving elsewhere (fail_all_waiters, drop this object).
        """
        d = self._begin()
        if partition_epoch < self._partition_epoch or leader_epoch < self._leader_epoch:
            self._emit(d, "isr_update_ignored", now_ms, list(self._isr), list(isr),
                       f"stale metadata (partition epoch {partition_epoch}, leader epoch "
                       f"{leader_epoch}; ours {self._partition_epoch}, {self._leader_epoch})")
            return self._finish(d)
        replicas_t = tuple(replicas)
        if self.leader_id not in replicas_t or len(set(replicas_t)) != len(replicas_t):
            raise ValueError(f"metadata replicas {replicas!r} do not contain leader {self.leader_id}")
        old_isr, old_replicas = self._isr, self._replicas
        self._replicas = replicas_t
        new_isr = self._ordered(isr)
        self._check_isr(new_isr)
        for r in list(self._followers):
            if r not in replicas_t:
                del self._followers[r]
                self._eligibility.pop(r, None)
        for r in replicas_t:
            if r != self.leader_id and r not in self._followers:
                self._followers[r] = FollowerState(UNKNOWN, None, None, UNKNOWN)
        self._isr = new_isr
        self._pending = None
        self._maximal = new_isr
        self._partition_epoch = partition_epoch
        self.effective_min_isr, self.under_min_isr = self._min_isr_rule()      # the replicas and ISR changed
        d.isr_changed = old_isr != new_isr
        if leader_epoch > self._leader_epoch:
            self._leader_epoch = leader_epoch
            self._epoch_start_offset = self._leo
            for r, f in self._followers.items():
                t = now_ms if r in new_isr else None
                self._followers[r] = FollowerState(
                    f.leo, t, t, self._epoch_start_offset, f.broker_epoch, f.log_start_offset)
            self._emit(d, "election", now_ms, None,
                       {"leader": self.leader_id, "leader_epoch": leader_epoch},
                       f"re-elected; leader epoch {leader_epoch} starts at offset {self._leo}",
                       epoch_start_offset=self._leo)
        self._emit(d, "isr_metadata", now_ms, list(old_isr), list(new_isr),
                   f"metadata at partition epoch {partition_epoch}",
                   replicas_before=list(old_replicas), replicas=list(replicas_t))
        self._maybe_increment_hw(d, now_ms, "metadata update")
        return self._finish(d)

    def set_replica_eligibility(self, replica: int, eligible: bool, broker_epoch: int,
                                now_ms: int = 0) -> Decision:
        """The controller's view of a broker changed: fenced / shutting down
        (eligible=False) or registered with `broker_epoch` (H1, I3, L5)."""
        d = self._begin()
        el = self._eligibility.setdefault(replica, _Eligibility())
        before = (el.eligible, el.broker_epoch)
        el.eligible, el.broker_epoch = eligible, broker_epoch
        if before != (eligible, broker_epoch):
            self._emit(d, "replica_eligibility", now_ms,
                       {"eligible": before[0], "broker_epoch": before[1]},
                       {"eligible": eligible, "broker_epoch": broker_epoch},
                       "controller metadata", replica=replica)
        return self._finish(d)

    def fetch_offset_error(self, fetch_offset: int) -> ErrorCode:
        """F6: OFFSET_OUT_OF_RANGE outside [log start, LEO], else NONE. The one copy of
        this check: `on_follower_fetch` applies it, and the driver asks it before F5."""
        if fetch_offset < self._log_start_offset or fetch_offset > self._leo:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        return ErrorCode.NONE

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader, read by a DeleteRecords waiting for its offset: the smallest log
        start offset of this leader and of each follower whose broker is `alive` (UNKNOWN, below any
        offset, until the follower's fetch has told it)."""
        low = self._log_start_offset
        for replica in sorted(self._followers):
            start = self._followers[replica].log_start_offset
            if start < low and alive(replica):
                low = start
        return low

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """Triggered when retention (or a follower-side rule) moved the leader's log start
        forward (H6). Never past the HW: retention deletes only below it."""
        if log_start_offset <= self._log_start_offset:
            return
        if log_start_offset > self.hw:
            raise ValueError(f"log start {log_start_offset} above the HW {self.hw}")
        self._log_start_offset = log_start_offset

    def isr_with_broker_epochs(self, isr: Iterable[int], own_broker_epoch: int | None = None
                               ) -> list[tuple[int, int]]:
        """`newIsrWithEpochs` for an AlterPartition (I5): our own broker epoch for the
        leader (`own_broker_epoch`, the current registration, when the driver knows a
        newer one than this core was built with), the stored fetch epoch for followers,
        -1 if unknown."""
        out = []
        for r in isr:
            if r == self.leader_id:
                out.append((r, self.broker_epoch if own_broker_epoch is None else own_broker_epoch))
            else:
                f = self._followers.get(r)
                out.append((r, f.broker_epoch if f is not None else UNKNOWN))
        return out

    # ---------------------------------------------------------------- internals

    def _fresh_follower(self, replica: int, now_ms: int) -> FollowerState:
        in_isr = replica in self._isr
        if self.profile.unknown_follower_leo_after_election:
            # L4, just became leader: LEO unknown, caught up as of now if in ISR.
            return FollowerState(UNKNOWN, now_ms if in_isr else None, None, UNKNOWN)
        # Lesson: followers start at the HW, caught up and fetched "now" if in
        # the ISR, their last fetch having seen the current LEO.
        t = now_ms if in_isr else None
        return FollowerState(self.hw if in_isr else UNKNOWN, t, t, self._leo)

    @staticmethod
    def _ordered(members: Iterable[int]) -> tuple[int, ...]:
        """The ISR in Kafka's order: as the controller keeps it, a joiner appended
        at the end (Partition.prepareIsrExpand), duplicates dropped."""
        return tuple(dict.fromkeys(members))

    def _min_isr_rule(self) -> tuple[int, bool]:
        """(effective min ISR, whether the committed ISR is smaller): min.insync.replicas, capped at the
        replication factor when the profile says so (cap_min_isr_at_rf)."""
        effective = min(self.min_isr, len(self._replicas)) if self.profile.cap_min_isr_at_rf else self.min_isr
        return effective, len(self._isr) < effective

    def _check_isr(self, isr: tuple[int, ...]) -> None:
        if self.leader_id not in isr:
            raise ValueError(f"ISR {list(isr)} must contain the leader {self.leader_id}")
        if not set(isr) <= set(self._replicas):
            raise ValueError(f"ISR {list(isr)} is not a subset of replicas {list(self._replicas)}")

    def _lag_reason(self, r: int, now_ms: int) -> str:
        f = self._followers[r]
        if f.last_caught_up_ms is None:
            return f"{r} never caught up"
        return (f"{r}: {now_ms} - last caught up {f.last_caught_up_ms} = "
                f"{now_ms - f.last_caught_up_ms} > lag max {self.lag_max_ms}")

    def _begin(self) -> Decision:
        return Decision(old_hw=self.hw, new_hw=self.hw)

    def _finish(self, d: Decision) -> Decision:
        d.new_hw = self.hw
        d.hw_moved = d.new_hw != d.old_hw
        return d

    def _emit_follower_fetch(self, d: Decision, now_ms: int, replica: int, fetch_offset: int,
                             leader_leo: int, branch: int, prev: FollowerState, now: FollowerState) -> None:
        if branch == 1:
            reason = f"fetch offset {fetch_offset} >= leader LEO {leader_leo}"
        elif branch == 2:
            reason = (f"fetch offset {fetch_offset} >= leader LEO at previous fetch "
                      f"{prev.last_fetch_leader_leo}")
        else:
            reason = (f"fetch offset {fetch_offset} < leader LEO {leader_leo} and < leader "
                      f"LEO at previous fetch {prev.last_fetch_leader_leo}")
        self._emit(d, "follower_fetch", now_ms,
                   {"leo": prev.leo, "last_caught_up_ms": prev.last_caught_up_ms},
                   {"leo": now.leo, "last_caught_up_ms": now.last_caught_up_ms},
                   reason, replica=replica, branch=branch, fetch_offset=fetch_offset,
                   leader_leo=leader_leo, prev_last_fetch_ms=prev.last_fetch_ms,
                   prev_last_fetch_leader_leo=prev.last_fetch_leader_leo)

    def _emit(self, d: Decision, kind: str, now_ms: int, before: Any, after: Any,
              reason: str, **extra: Any) -> None:
        e = Event(kind, now_ms, self.partition, before, after, reason, extra)
        d.events.append(e)
        self._sink(e)

    def _maybe_expand_isr(self, d: Decision, replica: int, now_ms: int) -> None:
        if replica in self._isr or self._pending is not None:
            return
        if self.isr_join_blocker(replica) is not None:
            return
        f = self._followers[replica]
        new_isr = self._ordered(self._isr + (replica,))
        why = f"{replica} caught up: LEO {f.leo} >= HW {self.hw}"
        if self.profile.expand_requires_epoch_start:
            why += f" and >= epoch start offset {self._epoch_start_offset}"
        evidence = {"follower_leo": f.leo, "hw": self.hw,
                    "epoch_start_offset": self._epoch_start_offset}
        if self.profile.commit_isr_immediately:
            self._commit_isr(d, new_isr, self._partition_epoch + 1, now_ms, why, **evidence)
        else:
            self._propose(d, "expand", new_isr, (replica,), now_ms, why, **evidence)

    def _propose(self, d: Decision, kind: str, new_isr: tuple[int, ...],
                 who: tuple[int, ...], now_ms: int, reason: str, **evidence: Any) -> None:
        self._pending = PendingIsrChange(kind, new_isr, who, now_ms, self._partition_epoch)
        # Expansions count at once; a shrink's maximal ISR is the old ISR.
        self._maximal = new_isr if kind == "expand" else self._isr
        d.isr_proposal = list(new_isr)
        self._emit(d, "isr_proposed", now_ms, list(self._isr), list(new_isr), reason,
                   change=kind, replicas=list(who), **evidence)

    def _commit_isr(self, d: Decision, new_isr: tuple[int, ...], partition_epoch: int,
                    now_ms: int, reason: str, **evidence: Any) -> None:
        old = self._isr
        self._isr = new_isr
        self._maximal = new_isr
        self._pending = None
        self._partition_epoch = partition_epoch
        self.effective_min_isr, self.under_min_isr = self._min_isr_rule()
        d.isr_changed = old != new_isr
        joined = [r for r in new_isr if r not in old]
        left = [r for r in old if r not in new_isr]
        kind = "isr_expand" if joined and not left else "isr_shrink" if left and not joined \
            else "isr_change"
        self._emit(d, kind, now_ms, list(old), list(new_isr), reason,
                   joined=joined, left=left, partition_epoch=partition_epoch, **evidence)
        self._maybe_increment_hw(d, now_ms, "ISR " + ("expanded" if kind == "isr_expand"
                                                       else "shrank" if kind == "isr_shrink"
                                                       else "changed"))

    def _maybe_increment_hw(self, d: Decision, now_ms: int, trigger: str = "",
                            fetched: tuple[int, int] | None = None) -> bool:
        """H1-H3: recompute the HW; it only ever rises. The event's trigger is `trigger`, or for a
        follower fetch (`fetched`: its replica and offset) one naming them, made only if the HW moves."""
        if self.profile.strict_min_isr and self.under_min_isr:
            return False
        candidate = self._leo
        bound = self.leader_id
        counts_caught_up = self.profile.hw_counts_caught_up_eligible
        for r, f in self._followers.items():
            if f.leo < candidate and (
                r in self._maximal
                or (counts_caught_up and self.is_caught_up(r, now_ms) and self.is_isr_eligible(r))
            ):
                candidate = f.leo
                bound = r
        if candidate <= self.hw:
            return False
        old = self.hw
        self.hw = candidate
        over = "maximal ISR" if self._maximal != self._isr else "ISR"
        reason = f"min LEO over {over} {_joined(self._maximal)}"
        if counts_caught_up and bound not in self._maximal:
            reason += f" and caught-up replica {bound}"
        if fetched is not None:
            trigger = f"replica {fetched[0]} fetched {fetched[1]}"
        self._emit(d, "hw_move", now_ms, old, candidate, reason, trigger=trigger, bound_by=bound)
        self._complete_reached(d, now_ms)
        return True

    def _complete_reached(self, d: Decision, now_ms: int) -> None:
        """P6: waiters whose offset the HW reached complete, in offset order."""
        if not self._waiters or self._waiters[0].required_offset > self.hw:
            return
        min_isr = self.effective_min_isr
        code = ErrorCode.NONE if len(self._maximal) >= min_isr else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        offsets = []
        waiters, hw = self._waiters, self.hw
        while waiters and waiters[0].required_offset <= hw:
            w = heapq.heappop(waiters)
            if not w.alive:
                continue
            del self._waiter_by_id[id(w.token)]
            d.completed.append((w.token, code))
            offsets.append(w.required_offset)
        if offsets and (code or self._routine_events):
            self._emit(d, "produce_completed", now_ms, None, code.name,
                       f"HW {hw} reached {len(offsets)} waiter(s); maximal ISR size "
                       f"{len(self._maximal)} vs min ISR {min_isr}",
                       required_offsets=offsets)
