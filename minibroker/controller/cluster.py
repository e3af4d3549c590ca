"""Registered brokers and their liveness, as the controller sees them.

Owns: the latest `BrokerRecord` per broker (replayed from the metadata log)
and, per broker, a volatile session (incarnation id, last heartbeat time,
the metadata offset it reported, its controlled-shutdown offset). Decides a
heartbeating broker's next state (Kafka's
`BrokerHeartbeatManager.calculateNextBrokerState`) and which unfenced broker
has gone stale (C1).

Must not know: partitions, topics, the log's storage, sockets or the clock
(every time is an argument). It never emits records; `ControllerState`
does, and replays them back into `apply`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from collections.abc import Callable

from minibroker.metadata import BrokerRecord

NO_OFFSET = -1


class BrokerState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)


@dataclass(slots=True)
class BrokerSession:
    """What the controller remembers about one incarnation between records.

    Invariant: lost on controller restart (rebuilt at startup with
    last_contact_ms = startup time, as Kafka's newly active controller does);
    `incarnation_id` is "" when unknown (after a restart).
    """
    incarnation_id: str
    last_contact_ms: int
    metadata_offset: int = NO_OFFSET
    controlled_shutdown_offset: int = NO_OFFSET


class Cluster:
    """Invariant: `sessions` has an entry for every broker in `brokers`;
    `registration_offset[b] == brokers[b].broker_epoch` (a broker epoch is the
    offset of its registration record)."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRecord] = {}
        self.sessions: dict[int, BrokerSession] = {}

    # -- replay --------------------------------------------------------------
    def apply(self, rec: BrokerRecord, now_ms: int) -> bool:
        """Replay a broker record; True if it starts a new incarnation."""
        prev = self.brokers.get(rec.broker_id)
        self.brokers[rec.broker_id] = rec
        new = prev is None or prev.broker_epoch != rec.broker_epoch
        if new or rec.broker_id not in self.sessions:
            self.sessions[rec.broker_id] = BrokerSession("", now_ms)
        return new

    def restart_sessions(self, now_ms: int) -> None:
        """Triggered once after log replay: every broker gets a fresh session."""
        self.sessions = {b: BrokerSession("", now_ms) for b in self.brokers}

    # -- queries -------------------------------------------------------------
    def is_registered(self, b: int) -> bool:
        return b in self.brokers

    def is_active(self, b: int) -> bool:
        """Kafka's ClusterControlManager.isActive: registered, unfenced, not shutting down."""
        r = self.brokers.get(b)
        return r is not None and not r.fenced and not r.in_controlled_shutdown

    def registration_offset(self, b: int) -> int:
        return self.brokers[b].broker_epoch

    def state(self, b: int) -> BrokerState:
        r = self.brokers[b]
        if r.fenced:
            return BrokerState.FENCED
        if r.in_controlled_shutdown:
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.UNFENCED

    def stale_broker_epoch(self, b: int, epoch: int) -> str | None:
        """Why `epoch` is not broker b's current one (KIP-903), or None."""
        r = self.brokers.get(b)
        if r is None:
            return f"broker {b} is not registered"
        if r.broker_epoch != epoch:
            return f"broker {b} epoch {epoch} is stale: the current registration has epoch {r.broker_epoch}"
        return None

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset reported by an active broker (no active broker: unbounded)."""
        offs = [self.sessions[b].metadata_offset for b in self.brokers if self.is_active(b)]
        return min(offs) if offs else 2 ** 63 - 1

    # -- decisions -----------------------------------------------------------
    def next_state(self, b: int, *, want_fence: bool, want_shut_down: bool, metadata_offset: int,
                   has_leaderships: Callable[[], bool]) -> BrokerState:
        """Triggered by a heartbeat: the state the broker moves to (calculateNextBrokerState)."""
        cur = self.state(b)
        if cur is BrokerState.FENCED:
            if want_shut_down:
                return BrokerState.SHUTDOWN_NOW
            if not want_fence and metadata_offset >= self.registration_offset(b):
                return BrokerState.UNFENCED
            return BrokerState.FENCED
        if cur is BrokerState.UNFENCED:
            if want_fence:
                return BrokerState.SHUTDOWN_NOW if want_shut_down else BrokerState.FENCED
            if want_shut_down:
                return BrokerState.CONTROLLED_SHUTDOWN if has_leaderships() else BrokerState.SHUTDOWN_NOW
            return BrokerState.UNFENCED
        # CONTROLLED_SHUTDOWN: done once it leads nothing and every active broker has seen that.
        if has_leaderships():
            return BrokerState.CONTROLLED_SHUTDOWN
        if self.sessions[b].controlled_shutdown_offset <= self.lowest_active_offset():
            return BrokerState.SHUTDOWN_NOW
        return BrokerState.CONTROLLED_SHUTDOWN

    def find_one_stale(self, now_ms: int, session_timeout_ms: int) -> tuple[int, int] | None:
        """The unfenced broker silent the longest, if past the session timeout: (id, silent ms)."""
        worst: tuple[int, int] | None = None
        for b, rec in self.brokers.items():
            if rec.fenced:
                continue
            silent = now_ms - self.sessions[b].last_contact_ms
            if silent > session_timeout_ms and (worst is None or silent > worst[1]):
                worst = (b, silent)
        return worst
