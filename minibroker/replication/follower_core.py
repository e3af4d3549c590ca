"""The partition follower core: one partition, seen from one of its followers.

Owns, for one followed partition in one leader epoch (Kafka's
AbstractFetcherThread.PartitionFetchState plus the fetcher's reactions,
R3-R7): the phase (fetching, truncating, delayed, failed), the offset the
last Fetch was sent at, the back-off deadline, the last error, the rounds
of a multi-round truncation, and whether the follower is stuck (an answer
that did not move it forward) and why.

Must not know: sockets, asyncio, files or the clock (every event takes
`now_ms`), the log itself (each event brings a `LogView` snapshot and the
driver carries the returned actions out: append, truncate, ask the leader
for its offsets), request parsing, or the leader's rules.

A new leader epoch gets a new core (the driver replaces it), so an answer
to a request sent under an older core is recognised and dropped.

No loop without progress (issue 9): an answer that leaves the follower
where it was (the same divergence twice with the same local log, a
truncation that changed nothing, the same error twice) delays the
partition by `replica.fetch.backoff.ms` and emits `follower_stuck` with the
reason (the event's `after` says which of the three; its reason says
why); the next answer that moves the follower emits `follower_resumed`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, NamedTuple

from minibroker.errors import ErrorCode, error_name
from minibroker.events import Event, EventSink, discard
from minibroker.replication.follower import epoch_end_offset, truncation_offset

UNDEFINED = -1
# Makes a NamedTuple from a tuple of all its fields without its Python-level __new__ (as its _make does).
_new = tuple.__new__


class FetchPhase(enum.Enum):
    FETCHING = "fetching"
    TRUNCATING = "truncating"       # a truncation round did not finish (KIP-279): fetch again, maybe truncate more
    DELAYED = "delayed"             # backing off until `delayed_until_ms`
    FAILED = "failed"               # fenced: nothing until newer metadata replaces this core (R7)


class LogView(NamedTuple):
    """What the core needs to know of the local log at one event (a NamedTuple, as the values
    below: one is made per partition answered, and per Fetch entry built).

    Invariant: `epochs` ascend by epoch and start offset (the epoch cache)."""
    leo: int
    log_start_offset: int
    epochs: tuple[tuple[int, int], ...] = ()

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else UNDEFINED

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return epoch_end_offset(self.epochs, self.leo, epoch)


class FetchPosition(NamedTuple):
    """One partition's entry in the next Fetch (R2)."""
    fetch_offset: int
    last_fetched_epoch: int
    current_leader_epoch: int
    log_start_offset: int


class FetchAnswer(NamedTuple):
    """One partition's entry in the leader's Fetch answer."""
    error: int = 0
    high_watermark: int = UNDEFINED
    log_start_offset: int = UNDEFINED
    has_records: bool = False
    diverging_epoch: tuple[int, int] | None = None
    message: str = ""


# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Append:
    """Append the answer's batches verbatim (R3), then report `on_appended`."""


class UpdateHighWatermark(NamedTuple):
    """HW = follower_high_watermark(leader HW, log start, LEO); follow the leader's log start (R3.4/R3.5).
    (A NamedTuple: one is made per partition answered.)"""
    leader_hw: int
    leader_log_start: int


@dataclass(frozen=True, slots=True)
class Truncate:
    """Truncate the log to `offset` (R4/R5/R6), then report `on_truncated`."""
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    """The leader's log starts beyond our LEO: restart empty at `offset` (R6)."""
    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class ListLeaderOffset:
    """Ask the leader (as a replica) for its LEO (`latest`) or log start (`earliest`) (R6)."""
    which: str                      # "latest" | "earliest"


Action = Append | UpdateHighWatermark | Truncate | TruncateFullyAndStartAt | ListLeaderOffset

APPEND = Append()

# Why a fetch answer made no progress (the `after` of a follower_stuck event).
StuckKind = Literal["empty_truncation", "same_divergence", "repeated_error"]


def _epochs(log: LogView) -> str:
    return ",".join(f"{e}:{s}" for e, s in log.epochs) or "-"


# ---------------------------------------------------------------- rules as functions


def follower_high_watermark(leader_hw: int, log_start_offset: int, leo: int) -> int:
    """R3.4: a follower's HW is the leader's, clamped to [log start, LEO]; it may drop."""
    return min(max(leader_hw, log_start_offset), leo)


def follows_log_start(leader_log_start: int, log_start_offset: int, leo: int) -> bool:
    """R3.5: the follower moves its log start up to the leader's when it holds that offset."""
    return log_start_offset < leader_log_start <= leo


# ---------------------------------------------------------------- the core


@dataclass(slots=True)
class _Stuck:
    reason: str
    since_ms: int
    count: int = 1


@dataclass(slots=True)
class PartitionFollower:
    """Invariant: `failed` only after FENCED_LEADER_EPOCH at `leader_epoch`;
    `stuck` is None exactly when the last answer moved the follower (or no
    answer was seen); `sent_offset` is the fetch offset of the request in
    flight or last answered (-1 before the first)."""
    name: str
    leader_id: int
    leader_epoch: int
    backoff_ms: int
    sink: EventSink = discard
    sent_offset: int = UNDEFINED
    delayed_until_ms: int = 0
    failed: bool = False
    last_error: int = 0
    truncating_rounds: int = 0
    stuck: _Stuck | None = None
    # Invariant: the (divergence, local leo, local latest epoch) of the last truncation asked for.
    _last_divergence: tuple[int, int, int, int] | None = None
    answers: int = 0
    # Invariant: the leader's HW in the last error-free answer (-1 before one); the
    # follower's lag as Kafka's FetcherLagMetrics reports it is max(0, leader_hw - LEO).
    leader_hw: int = UNDEFINED

    # ------------------------------------------------------------ queries

    def phase(self, now_ms: int) -> FetchPhase:
        if self.failed:
            return FetchPhase.FAILED
        if self.delayed_until_ms > now_ms:
            return FetchPhase.DELAYED
        if self.truncating_rounds:
            return FetchPhase.TRUNCATING
        return FetchPhase.FETCHING

    def is_ready(self, now_ms: int) -> bool:
        """Whether the next Fetch includes this partition."""
        return not self.failed and self.delayed_until_ms <= now_ms

    @property
    def stuck_reason(self) -> str | None:
        return None if self.stuck is None else self.stuck.reason

    def status(self, now_ms: int) -> dict[str, object]:
        """The ReplicaStatus `fetch_state` of this partition."""
        return {
            "leader": self.leader_id, "leader_epoch": self.leader_epoch, "phase": self.phase(now_ms).value,
            "failed": self.failed, "backing_off": self.delayed_until_ms > now_ms, "last_error": self.last_error,
            "stuck": self.stuck is not None, "stuck_reason": self.stuck_reason,
            "stuck_count": 0 if self.stuck is None else self.stuck.count,
            "leader_hw": self.leader_hw,
        }

    # ------------------------------------------------------------ events in

    def next_position(self, log: LogView) -> FetchPosition:
        """Triggered when the driver builds a Fetch including this partition (R2)."""
        leo, start, epochs = log
        self.sent_offset = leo
        return _new(FetchPosition, (leo, epochs[-1][0] if epochs else UNDEFINED, self.leader_epoch, start))

    def on_fetch_answer(self, answer: FetchAnswer, log: LogView, now_ms: int) -> list[Action]:
        """Triggered by this partition's entry in the leader's Fetch answer."""
        if log.leo != self.sent_offset or self.failed:
            return []                   # the log moved meanwhile (R3.1), or fenced: refetch / ignore
        self.answers += 1
        code, leader_hw, leader_log_start, has_records, diverging, _ = answer
        if not code:                    # ErrorCode.NONE
            if diverging is not None:
                return self._on_divergence(diverging, log, now_ms)
            self.truncating_rounds = 0
            self._last_divergence = None
            self.leader_hw = leader_hw
            if self.last_error:
                self.last_error = 0
            if self.stuck is not None:
                self._progress(now_ms, "appending the leader's batches" if has_records
                               else "the leader answered without error or divergence")
            update = _new(UpdateHighWatermark, (leader_hw, leader_log_start))
            return [APPEND, update] if has_records else [update]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return [ListLeaderOffset("latest")]
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            self.failed = True
            self._note_error(code, now_ms, f"leader {self.leader_id} fenced our epoch {self.leader_epoch}: "
                             "stop fetching until newer metadata (R7)")
            return []
        self.on_error(code, now_ms, answer.message)
        return []

    def on_appended(self, appended_bytes: int, now_ms: int) -> None:
        """Triggered after the driver carried out `Append` (the bytes it wrote)."""
        if appended_bytes and self.stuck is not None:
            self._progress(now_ms, f"appended {appended_bytes} bytes")

    def on_truncated(self, before: LogView, after: LogView, now_ms: int) -> None:
        """Triggered after the driver carried out `Truncate` / `TruncateFullyAndStartAt`.
        A truncation that changed neither the LEO nor the epoch cache is no progress."""
        if before == after:
            self._maybe_stuck(now_ms, "empty_truncation", f"truncation changed nothing (LEO {after.leo}, "
                              f"epochs {_epochs(after)})")
        else:
            self._progress(now_ms, f"truncated to {after.leo}")

    def on_leader_log_end(self, leader_leo: int, log: LogView, now_ms: int) -> list[Action]:
        """Triggered by the leader's LEO, asked after OFFSET_OUT_OF_RANGE (R6)."""
        if leader_leo < log.leo:
            return [Truncate(leader_leo, f"leader {self.leader_id} LEO {leader_leo} is below ours after "
                                         "OFFSET_OUT_OF_RANGE (R6)")]
        return [ListLeaderOffset("earliest")]

    def on_leader_log_start(self, leader_start: int, leader_leo: int, log: LogView, now_ms: int) -> list[Action]:
        """Triggered by the leader's log start, asked after OFFSET_OUT_OF_RANGE (R6)."""
        if leader_start > log.leo:
            return [TruncateFullyAndStartAt(leader_start, f"leader {self.leader_id} log starts at {leader_start}, "
                                                          f"beyond our LEO {log.leo} (R6)")]
        self.on_error(ErrorCode.OFFSET_OUT_OF_RANGE, now_ms,
                      f"leader log [{leader_start}, {leader_leo}] holds our LEO {log.leo}")
        return []

    def on_error(self, code: int, now_ms: int, message: str = "") -> None:
        """Triggered by a partition error, a failed ListOffsets, or the leader leaving the
        partition out of its answer: back off for replica.fetch.backoff.ms (R7); the same
        error twice in a row is a stuck follower."""
        repeated = self.last_error == code
        self.delayed_until_ms = now_ms + self.backoff_ms
        self._note_error(code, now_ms, message)
        if repeated:
            self._maybe_stuck(now_ms, "repeated_error",
                              f"leader {self.leader_id} answered {error_name(code)} again"
                              f"{': ' + message if message else ''}", delay=False)

    def on_transport_error(self, now_ms: int) -> None:
        """Triggered when the Fetch itself failed (connection, timeout): back off (R7)."""
        self.delayed_until_ms = now_ms + self.backoff_ms

    # ------------------------------------------------------------ reactions

    def _on_divergence(self, diverging: tuple[int, int], log: LogView, now_ms: int) -> list[Action]:
        """R4: truncate by the leader's diverging epoch; maybe another round (KIP-279)."""
        epoch, end = diverging
        key = (epoch, end, log.leo, log.latest_epoch)
        if key == self._last_divergence:
            self._maybe_stuck(now_ms, "same_divergence",
                              f"leader {self.leader_id} answered diverging epoch {epoch} ending at {end} "
                              f"again for the same local log (LEO {log.leo}, latest epoch {log.latest_epoch})")
            return []
        self._last_divergence = key
        target, done = truncation_offset(epoch, end, log.end_offset_for, log.leo)
        self.truncating_rounds = 0 if done else self.truncating_rounds + 1
        reason = (f"leader {self.leader_id} (epoch {self.leader_epoch}) answered diverging epoch "
                  f"{epoch} ending at {end}; local LEO {log.leo}"
                  + ("" if done else "; epoch unknown to us, fetching again"))
        return [Truncate(target, reason)]

    def _maybe_stuck(self, now_ms: int, kind: StuckKind, why: str, *, delay: bool = True) -> None:
        if delay:
            self.delayed_until_ms = now_ms + self.backoff_ms
        if self.stuck is not None and self.stuck.reason == why:
            self.stuck.count += 1
            return
        self.stuck = _Stuck(why, now_ms)
        self._emit("follower_stuck", now_ms, None, kind,
                   f"{why}; backing off {self.backoff_ms} ms (replica.fetch.backoff.ms)",
                   leader=self.leader_id, leader_epoch=self.leader_epoch, backoff_ms=self.backoff_ms)

    def _progress(self, now_ms: int, what: str) -> None:
        if self.stuck is not None:
            was = self.stuck
            self.stuck = None
            self._emit("follower_resumed", now_ms, "stuck", None,
                       f"fetch from leader {self.leader_id} moves again ({what}) after {was.count} "
                       f"answer(s) without progress ({was.reason})", leader=self.leader_id,
                       leader_epoch=self.leader_epoch)

    def _note_error(self, code: int, now_ms: int, message: str) -> None:
        if self.last_error != code:
            self.last_error = code
            self._emit("fetch_error", now_ms, None, error_name(code),
                       f"fetch from leader {self.leader_id} at epoch {self.leader_epoch}: "
                       f"{error_name(code)}{': ' + message if message else ''}",
                       leader=self.leader_id, failed=self.failed)

    def _emit(self, kind: str, now_ms: int, before: object, after: object, reason: str, **extra: object) -> None:
        self.sink(Event(kind, now_ms, self.name, before, after, reason, dict(extra)))
