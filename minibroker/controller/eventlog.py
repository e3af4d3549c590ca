"""A bounded ring buffer of structured events with long-poll reads (the Events API).

Owns: the last `capacity` events of this process, each with a sequence
number, and the readers parked waiting for a newer one. Must not know what
an event means. Used by the controller driver; reusable by the broker.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any
from collections.abc import Callable

from minibroker.events import Event


class EventLog:
    """Invariant: `_buf` holds events with consecutive seqs ending at
    `next_seq - 1`; at most `capacity` of them."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._buf: deque[dict[str, Any]] = deque(maxlen=capacity)
        self.next_seq = 0
        # An insertion-ordered set: a cancelled reader leaves in O(1), so closing a
        # connection with thousands of parked polls is linear, not quadratic.
        self._waiters: dict[asyncio.Future, None] = {}
        self._subscribers: list[Callable[[Event], None]] = []

    def subscribe(self, fn: Callable[[Event], None]) -> None:
        """`fn` sees every later event as it is appended (metrics count events this way)."""
        self._subscribers.append(fn)

    def append(self, event: Event) -> int:
        """Triggered by every event the process emits; wakes parked readers."""
        seq = self.next_seq
        d = event.to_dict()
        d["seq"] = seq
        self._buf.append(d)
        self.next_seq = seq + 1
        for fn in self._subscribers:
            fn(event)
        if self._waiters:
            waiters, self._waiters = self._waiters, {}
            for w in waiters:
                if not w.done():
                    w.set_result(None)
        return seq

    def read_now(self, from_seq: int, max_events: int = 1000) -> tuple[int, list[dict[str, Any]]]:
        """Events with seq >= from_seq (from the oldest retained if older), at most max_events."""
        if not self._buf or from_seq >= self.next_seq:
            return self.next_seq, []
        first = self._buf[0]["seq"]
        start = max(from_seq, first) - first
        out = [self._buf[i] for i in range(start, min(len(self._buf), start + max(1, max_events)))]
        return out[-1]["seq"] + 1, out

    async def read(self, from_seq: int, max_wait_ms: int = 0,
                   max_events: int = 1000) -> tuple[int, list[dict[str, Any]]]:
        """As read_now, but parks up to max_wait_ms when nothing newer than from_seq exists."""
        nxt, events = self.read_now(from_seq, max_events)
        if events or max_wait_ms <= 0:
            return nxt, events
        fut = asyncio.get_running_loop().create_future()
        self._waiters[fut] = None
        timer = asyncio.get_running_loop().call_later(max_wait_ms / 1000, _expire, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waiters.pop(fut, None)
        return self.read_now(from_seq, max_events)


def _expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
