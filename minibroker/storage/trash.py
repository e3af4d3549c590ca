"""Segment files that left their log and wait for their unlink (rule D10).

Owns the list of `*.deleted` paths and when each may go: Kafka's
`file.delete.delay.ms`. Retention and truncation rename a segment's files on
the event loop (a rename costs microseconds) and hand the new paths here; the
unlink, which frees the file's page cache (milliseconds for a 32 MB segment),
happens in `drain`, from a worker thread. Must not know about the event loop,
partitions or configs: its owner reads `ms_until_due()`, arms a timer and
calls `drain()` off the loop. Due times are on the clock the logs use. Paths
left here by a crash are `*.deleted` files that the loader removes at the next
start.
"""
from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable


class SegmentTrash:
    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # Invariant: a heap of (due_ms, seq, path); seq keeps equal due times in the order added.
        self._heap: list[tuple[int, int, str]] = []
        self._seq = 0
        # Called (from the thread that added) after every `add` of at least one path.
        self.on_add: Callable[[], None] | None = None

    def add(self, paths: list[str], due_ms: int) -> None:
        """Triggered when a log retires segments: `paths` may be unlinked from `due_ms` on."""
        if not paths:
            return
        with self._lock:
            for p in paths:
                heapq.heappush(self._heap, (due_ms, self._seq, p))
                self._seq += 1
        if self.on_add is not None:
            self.on_add()

    def next_due_ms(self) -> int | None:
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def ms_until_due(self) -> int | None:
        """How long until the earliest path is due (0 or less: now); None when empty."""
        due = self.next_due_ms()
        return None if due is None else due - self._clock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap)

    def drain(self, now_ms: int | None = None) -> int:
        """Blocking (a worker thread): unlink every path due by `now_ms` (default: now). A path
        already gone (its directory deleted with its topic) is skipped; one that cannot be unlinked stays
        on disk as `*.deleted` for the loader to remove at the next start. Returns how many
        were unlinked."""
        now = self._clock() if now_ms is None else now_ms
        due: list[str] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                due.append(heapq.heappop(self._heap)[2])
        n = 0
        for path in due:
            try:
                os.unlink(path)
                n += 1
            except OSError:
                pass
        return n
