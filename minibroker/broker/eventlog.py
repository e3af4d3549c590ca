"""This process's structured events: a bounded ring buffer with long-poll.

Owns: sequence numbers for every `Event` emitted in the process, the last
`capacity` of them, the one-line JSON log of each, and waking `Events`
long-polls. Must not know who emits events or why.
"""
from __future__ import annotations

import asyncio
import enum
import json
import logging
import threading
from collections import deque
from typing import Any

from minibroker.events import Event

log = logging.getLogger("minibroker.events")


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


class EventLog:
    """Invariant: `_buf` holds events with consecutive seqs ending at `next_seq - 1`,
    at most `capacity` of them."""

    def __init__(self, node_id: int, capacity: int = 10_000) -> None:
        self.node_id = node_id
        self._buf: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.next_seq = 0
        self._waiters: set[asyncio.Future] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def emit(self, event: Event) -> None:
        """An EventSink: safe to call from the event loop or from a worker thread."""
        d = _plain(event.to_dict())
        with self._lock:
            d["seq"] = self.next_seq
            self.next_seq += 1
            self._buf.append(d)
        d["node_id"] = self.node_id
        log.info("%s", json.dumps(d, sort_keys=True, default=str))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            self._wake()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake)

    def __call__(self, event: Event) -> None:
        self.emit(event)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for f in waiters:
            if not f.done():
                f.set_result(None)

    def since(self, from_seq: int, max_events: int) -> list[dict[str, Any]]:
        with self._lock:
            if not self._buf or from_seq >= self.next_seq:
                return []
            first = self._buf[0]["seq"]
            start = max(from_seq, first) - first
            return [self._buf[i] for i in range(start, min(len(self._buf), start + max(0, max_events)))]

    async def poll(self, from_seq: int, max_wait_ms: int, max_events: int) -> dict[str, Any]:
        """The Events API: events with seq >= from_seq (the oldest retained if
        from_seq fell out of the buffer); waits up to max_wait_ms for one."""
        events = self.since(from_seq, max_events)
        if not events and max_wait_ms > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max_wait_ms / 1000
            while not events:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                fut = loop.create_future()
                self._waiters.add(fut)
                try:
                    await asyncio.wait_for(fut, remaining)
                except asyncio.TimeoutError:
                    pass
                finally:
                    self._waiters.discard(fut)
                events = self.since(from_seq, max_events)
        next_seq = events[-1]["seq"] + 1 if events else min(max(from_seq, 0), self.next_seq)
        return {"node_id": self.node_id, "next_seq": next_seq, "events": [dict(e, node_id=self.node_id) for e in events]}
