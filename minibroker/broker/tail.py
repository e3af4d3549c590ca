"""TailCache: the most recently appended bytes of one replica's log, as stored.

Owns a bounded list of appended chunks (one per append: whole batches,
stamped, byte-identical to the log file) so that the reads that dominate a
live partition (followers and consumers fetching what was just appended) are
answered without a file read or an index walk. Must not know the log file,
replication rules or requests: `Partition` feeds it every append and every
truncation, and falls back to the log whenever the cache cannot answer.

Invariant: chunks are contiguous and ascending (each starts at the previous
one's next offset); their total size is at most `max_bytes`, and all caches
sharing a `TailBudget` hold at most its `max_bytes` together (a chunk that
does not fit is not kept: the log answers for it); every chunk equals the
log's bytes for its offsets (truncation drops chunks at or above the new end).
"""
from __future__ import annotations

import bisect
from collections import deque


class TailBudget:
    """Bytes held by every TailCache of a process. Invariant: `used` is the sum
    of the sizes of the caches sharing this budget, and at most `max_bytes`."""
    __slots__ = ("max_bytes", "used")

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self.used = 0


# The broker process's budget (minibroker.tail.cache.max.bytes sets its size).
PROCESS_BUDGET = TailBudget()


class TailCache:
    __slots__ = ("_firsts", "_chunks", "_size", "max_bytes", "budget")

    def __init__(self, max_bytes: int = 1 << 20, budget: TailBudget | None = None) -> None:
        self._firsts: deque[int] = deque()
        self._chunks: deque[tuple[int, int, bytes]] = deque()   # (first offset, next offset, bytes)
        self._size = 0
        self.max_bytes = max_bytes
        self.budget = PROCESS_BUDGET if budget is None else budget

    def __del__(self) -> None:
        self.budget.used -= self._size

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def size(self) -> int:
        return self._size

    def on_append(self, first: int, next_offset: int, data: bytes) -> None:
        """Triggered by every append, with the bytes exactly as stored."""
        chunks, budget = self._chunks, self.budget
        if chunks and chunks[-1][1] != first:
            self.clear()
        n = len(data)
        size, used = self._size + n, budget.used + n         # with this chunk
        if size > self.max_bytes or used > budget.max_bytes:
            firsts, limit = self._firsts, budget.max_bytes
            while chunks and (size > self.max_bytes or used > limit):     # the oldest make room
                firsts.popleft()
                m = len(chunks.popleft()[2])
                size -= m
                used -= m
            if n > self.max_bytes or used > limit:
                self._size, budget.used = size - n, used - n
                return        # too big to keep: reads of it go to the log
        self._firsts.append(first)
        chunks.append((first, next_offset, data))
        self._size = size
        budget.used = used

    def truncate(self, end_offset: int) -> None:
        """Triggered by a log truncation: forget chunks holding offsets >= end_offset."""
        while self._chunks and self._chunks[-1][1] > end_offset:
            self._firsts.pop()
            n = len(self._chunks.pop()[2])
            self._size -= n
            self.budget.used -= n

    def clear(self) -> None:
        self._firsts.clear()
        self._chunks.clear()
        self.budget.used -= self._size
        self._size = 0

    def read(self, offset: int, max_bytes: int, limit: int) -> bytes | None:
        """Whole chunks from the one starting at `offset`, each ending at or
        below `limit`, at most `max_bytes` in total (the first chunk only if it
        fits). None when the cache cannot answer (no chunk starts at `offset`,
        or the first chunk does not fit or crosses `limit`): read the log."""
        firsts = self._firsts
        if not firsts:
            return None
        last = firsts[-1]
        if offset >= last:
            if offset != last:
                return None
            first = self._chunks[-1]                # the newest chunk alone: a caught-up reader's read
            if first[1] > limit or len(first[2]) > max_bytes:
                return None
            return first[2]
        if offset < firsts[0]:
            return None
        i = bisect.bisect_left(firsts, offset)
        if i == len(firsts) or firsts[i] != offset:
            return None
        chunks = self._chunks
        first = chunks[i]
        if first[1] > limit or len(first[2]) > max_bytes:
            return None
        out = [first[2]]
        total = len(first[2])
        for j in range(i + 1, len(chunks)):
            c = chunks[j]
            if c[1] > limit or total + len(c[2]) > max_bytes:
                break
            out.append(c[2])
            total += len(c[2])
        return out[0] if len(out) == 1 else b"".join(out)
