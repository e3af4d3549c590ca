"""The broker's lifecycle towards the controller: a pure state machine.

Owns (Kafka's BrokerLifecycleManager state): the broker's state (STARTING,
RECOVERY, RUNNING, PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN), its broker
epoch and incarnation, fenced / caught-up / ready-to-unfence flags, and the
bodies of the registration and heartbeat requests.

Must not know: sockets, asyncio, the clock (events take `now_ms`), the
metadata image or the data path. `minibroker.broker.controller_channel`
drives it.
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any

from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event

# Heartbeat answers meaning "the controller does not know this incarnation": register again.
_REREGISTER = frozenset({ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_NOT_AVAILABLE})

STARTING_HEARTBEAT_MS = 10             # Kafka: heartbeat quickly while catching up


class BrokerState(enum.StrEnum):
    """Kafka's BrokerState, as ApiVersions reports it."""
    STARTING = "STARTING"                                  # registering, catching up with metadata
    RECOVERY = "RECOVERY"                                  # caught up; log recovery, waiting to be unfenced
    RUNNING = "RUNNING"                                    # unfenced, serving
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class HeartbeatOutcome(enum.Enum):
    OK = "ok"
    REGISTER = "register"          # the controller no longer knows this broker epoch
    RETRY = "retry"                # transient: resend at the next tick


@dataclass
class BrokerLifecycle:
    """What the broker has told the controller and what it has heard back.

    Events in: registration and heartbeat responses, `set_ready_to_unfence`
    (logs recovered, metadata published to the data path),
    `begin_controlled_shutdown`. Decisions out: the next request body, the
    delay before the next heartbeat, state transitions (as `Event`s)."""
    node_id: int
    rack: str | None
    listeners: list[dict[str, Any]]
    previous_broker_epoch: int = -1                        # KIP-966: -1 after an unclean shutdown
    incarnation_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    state: BrokerState = BrokerState.STARTING
    broker_epoch: int = -1          # Invariant: -1 until the first successful registration
    needs_registration: bool = True
    fenced: bool = True
    caught_up: bool = False         # Invariant: once True stays True (Kafka's initial catch-up)
    ready_to_unfence: bool = False
    should_shut_down: bool = False
    registrations: int = 0

    def registration_request(self) -> dict[str, Any]:
        return {"broker_id": self.node_id, "incarnation_id": self.incarnation_id, "rack": self.rack,
                "listeners": self.listeners, "previous_broker_epoch": self.previous_broker_epoch}

    def on_registration_response(self, resp: dict[str, Any], now_ms: int) -> list[Event]:
        """Triggered by a BrokerRegistration response; raises KafkaError on refusal."""
        code = resp.get("error", 0)
        if code:
            raise KafkaError(code, resp.get("message", ""), remote=True)
        before = self.broker_epoch
        self.broker_epoch = int(resp["broker_epoch"])
        # This incarnation's logs are intact from here on: a later re-registration is not unclean.
        self.previous_broker_epoch = self.broker_epoch
        self.needs_registration = False
        self.fenced = True
        self.registrations += 1
        return [Event("broker_registered", now_ms, "", before, self.broker_epoch,
                      "registered" if self.registrations == 1 else "re-registered after the controller "
                      "refused the previous broker epoch",
                      {"broker_id": self.node_id, "incarnation_id": self.incarnation_id})]

    def heartbeat_request(self, metadata_offset: int) -> dict[str, Any]:
        return {"broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": metadata_offset,
                "want_fence": not self.ready_to_unfence,
                "want_shut_down": self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN}

    def on_heartbeat_response(self, resp: dict[str, Any], now_ms: int) -> tuple[HeartbeatOutcome, list[Event]]:
        """Triggered by a BrokerHeartbeat response."""
        code = resp.get("error", 0)
        events: list[Event] = []
        if code in _REREGISTER:
            self.needs_registration = True
            self.fenced = True
            return HeartbeatOutcome.REGISTER, events
        if code:
            return HeartbeatOutcome.RETRY, events
        fenced = bool(resp.get("is_fenced", True))
        if fenced != self.fenced:
            events.append(Event("fenced" if fenced else "unfenced", now_ms, "", self.fenced, fenced,
                                "controller heartbeat response", {"broker_id": self.node_id,
                                                                  "broker_epoch": self.broker_epoch}))
        self.fenced = fenced
        if resp.get("is_caught_up", False):
            self.caught_up = True
        if resp.get("should_shut_down", False) and self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self.should_shut_down = True
            events += self._move(BrokerState.SHUTTING_DOWN, now_ms, "controller completed controlled shutdown")
        events += self.maybe_advance(now_ms)
        return HeartbeatOutcome.OK, events

    def maybe_advance(self, now_ms: int) -> list[Event]:
        """STARTING -> RECOVERY once caught up; RECOVERY -> RUNNING once ready and unfenced."""
        if self.state is BrokerState.STARTING and self.caught_up:
            return self._move(BrokerState.RECOVERY, now_ms, "caught up with the metadata log")
        if self.state is BrokerState.RECOVERY and self.ready_to_unfence and not self.fenced:
            return self._move(BrokerState.RUNNING, now_ms, "unfenced by the controller")
        return []

    def set_ready_to_unfence(self, now_ms: int) -> list[Event]:
        """Triggered when logs are recovered and metadata is published."""
        self.ready_to_unfence = True
        return self.maybe_advance(now_ms)

    def begin_controlled_shutdown(self, now_ms: int, reason: str) -> list[Event]:
        if self.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return []
        if self.broker_epoch < 0:
            return self._move(BrokerState.SHUTTING_DOWN, now_ms, f"{reason}; never registered")
        return self._move(BrokerState.PENDING_CONTROLLED_SHUTDOWN, now_ms, reason)

    def begin_shutdown(self, now_ms: int, reason: str) -> list[Event]:
        if self.state is BrokerState.SHUTTING_DOWN:
            return []
        return self._move(BrokerState.SHUTTING_DOWN, now_ms, reason)

    def next_heartbeat_delay_ms(self, interval_ms: int) -> int:
        return STARTING_HEARTBEAT_MS if self.state is BrokerState.STARTING else interval_ms

    def _move(self, to: BrokerState, now_ms: int, reason: str) -> list[Event]:
        before, self.state = self.state, to
        return [Event("broker_state", now_ms, "", before.value, to.value, reason, {"broker_id": self.node_id})]
