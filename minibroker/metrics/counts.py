"""Counters of structured events, by kind: the source of every `_total` metric.

Owns: how many events of each kind this process emitted since it started,
and the ISR shrinks/expands they stand for. Fed by the event ring buffer's
subscriber hook, so a counter can never disagree with the log and `watch`,
which read the same events. Must not know who emits events or why.
"""
from __future__ import annotations

from minibroker.events import Event

# The leader core's events that apply a new ISR (before/after are the ISRs).
ISR_CHANGE_KINDS = frozenset({"isr_shrink", "isr_expand", "isr_change", "isr_metadata"})


class EventCounts:
    """Invariant: `by_kind[k]` is the number of events of kind k observed;
    `isr_shrinks`/`isr_expands` count the ISR changes a leader applied that removed/added
    replicas, whether its own AlterPartition answer (`isr_shrink`, `isr_expand`,
    `isr_change`) or the metadata (`isr_metadata`: the controller's change, or the
    leader's own when the metadata arrived before the answer) brought them.
    A change that both removes and adds counts once for each."""

    def __init__(self) -> None:
        self.by_kind: dict[str, int] = {}
        self.isr_shrinks = 0
        self.isr_expands = 0

    def observe(self, event: Event) -> None:
        """Triggered by every event the process appends to its ring buffer."""
        self.by_kind[event.kind] = self.by_kind.get(event.kind, 0) + 1
        if event.kind in ISR_CHANGE_KINDS and isinstance(event.before, list) and isinstance(event.after, list):
            left = [r for r in event.before if r not in event.after]
            joined = [r for r in event.after if r not in event.before]
            self.isr_shrinks += 1 if left else 0
            self.isr_expands += 1 if joined else 0
