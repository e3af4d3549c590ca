"""Structured events: one record per state transition, with a reason.

Cores return or emit `Event`s; drivers log them, keep a ring buffer for
`watch`, and tests assert on them. Kinds are stable strings:

  isr_shrink, isr_expand, isr_proposed, isr_rejected, hw_move, election,
  became_leader, became_follower, fenced, unfenced, truncation,
  produce_refused, produce_completed, broker_registered, offline, recovery,
  controlled_shutdown, topic_created, topic_deleted, elr_change, controller_resumed,
  reassignment (a partition's replicas change: `phase` started, changed, completed or cancelled),
  leader_epoch_bump (the same leader, a new epoch: replicas left the partition),
  fetch_error, fetcher_recovered, follower_stuck (a follower's fetch answer
  did not move it forward; `after` is the reason, it backs off), its end
  follower_resumed, and the
  leader core's follower_fetch, fetch_rejected, isr_change, isr_update_ignored,
  isr_metadata, replica_eligibility
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    time_ms: int
    partition: str
    before: Any = None
    after: Any = None
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "kind": self.kind,
            "time_ms": self.time_ms,
            "partition": self.partition,
            "before": self.before,
            "after": self.after,
            "reason": self.reason,
        }
        if self.extra:
            d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        known = {"kind", "time_ms", "partition", "before", "after", "reason"}
        return cls(
            kind=d["kind"], time_ms=d["time_ms"], partition=d["partition"],
            before=d.get("before"), after=d.get("after"), reason=d.get("reason", ""),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=list)


EventSink = Callable[[Event], None]

# Kinds that happen once per request on the hot path. An HW move is routine
# unless an ISR change, new metadata or an election caused it (a "jump").
ROUTINE_KINDS = frozenset({"hw_move", "produce_completed", "follower_fetch"})
_JUMP_TRIGGERS = ("ISR", "metadata", "became")


def is_routine(kind: str, trigger: Any = "") -> bool:
    """Whether an event is per-request noise (logged at DEBUG, hidden by `watch`)."""
    if kind not in ROUTINE_KINDS:
        return False
    return not (kind == "hw_move" and str(trigger or "").startswith(_JUMP_TRIGGERS))


def discard(_: Event) -> None:
    """An EventSink that drops everything."""
