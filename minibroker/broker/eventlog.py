"""The broker's structured events: the EventSink every part of the broker emits to.

Owns: turning each `Event` into plain values (msgpack- and JSON-safe), the
one structured log line per event, and handing events emitted from worker
threads over to the event loop. The ring buffer and the long-poll are the
controller's `minibroker.controller.eventlog.EventLog`, reused as is.
Must not know who emits events or why.
"""
from __future__ import annotations

import asyncio
import enum
import json
import logging
import threading
from typing import Any

from minibroker.controller.eventlog import EventLog as RingBuffer
from minibroker.events import Event, is_routine

log = logging.getLogger("minibroker.events")
# Routine events (minibroker.events.is_routine) stay in the ring buffer but are
# logged only at DEBUG, as Kafka logs every HW increment at DEBUG/TRACE.


def _plain(v: Any) -> Any:
    """Values that both msgpack and JSON carry."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, enum.Enum):
        return _plain(v.value)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (set, frozenset)):
        return sorted((_plain(x) for x in v), key=repr)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


_PLAIN_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def plain_event(event: Event) -> Event:
    """`event` with plain values; the event itself (frozen) when its values are plain already, as
    the routine per-request ones are (an HW move: ints, a reason, a trigger)."""
    scalars = _PLAIN_SCALARS
    if (type(event.time_ms) is int and type(event.partition) is str and type(event.reason) is str
            and type(event.before) in scalars and type(event.after) in scalars
            and type(event.extra) is dict and all(type(k) is str and type(v) in scalars
                                                  for k, v in event.extra.items())):
        return event
    return Event(event.kind, int(event.time_ms), str(event.partition), _plain(event.before), _plain(event.after),
                 str(event.reason), _plain(event.extra) if event.extra else {})


class EventLog:
    """Invariant: every event emitted is appended to `ring` exactly once, on
    the event loop's thread, in emission order per thread."""

    def __init__(self, node_id: int, capacity: int = 10_000) -> None:
        self.node_id = node_id
        self.ring = RingBuffer(capacity)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Triggered once the event loop runs: later emits from other threads are handed to it."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    @property
    def next_seq(self) -> int:
        return self.ring.next_seq

    def emit(self, event: Event) -> None:
        """The broker's EventSink: safe to call from the event loop or a worker thread."""
        ev = plain_event(event)
        if self._loop is not None and threading.get_ident() != self._loop_thread and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._append, ev)
        else:
            self._append(ev)

    def __call__(self, event: Event) -> None:
        self.emit(event)

    def _append(self, ev: Event) -> None:
        seq = self.ring.append(ev)
        level = logging.DEBUG if is_routine(ev.kind, ev.extra.get("trigger")) else logging.INFO
        if not log.isEnabledFor(level):
            return
        d = ev.to_dict()
        d["seq"] = seq
        d["node_id"] = self.node_id
        log.log(level, "%s", json.dumps(d, sort_keys=True, default=str))

    async def poll(self, from_seq: int, max_wait_ms: int, max_events: int) -> dict[str, Any]:
        """The Events API: events with seq >= from_seq (from the oldest retained
        if older), parking up to max_wait_ms when there is none yet."""
        nxt, events = await self.ring.read(from_seq, max_wait_ms, max_events)
        return {"node_id": self.node_id, "next_seq": nxt,
                "events": [dict(e, node_id=self.node_id) for e in events]}
