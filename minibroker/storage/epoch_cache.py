"""The leader-epoch cache of one replica: epoch -> first offset of that epoch.

Owns the in-memory map and Kafka's rules for changing it (semantics doc E2-E4,
`LeaderEpochFileCache`). Pure: no files, no clock. `PartitionLog` persists it
to `leader-epoch-checkpoint` (off the event loop) whenever `version` moved.

Entries are added
  * by the leader at election, as (new epoch, LEO), before any data;
  * from every appended batch's epoch (leader and follower appends);
  * during recovery, from the batches of the recovered range.

Invariant: epochs strictly increase and start offsets strictly increase
along `entries` (assign() removes whatever would break that).
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        # Invariant: parallel lists sorted by epoch; starts strictly increase too.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        # Invariant: bumped by every change; the persister compares it.
        self.version = 0
        # Invariant: the last entry and its epoch (None when empty), set by `_changed` with every version
        # bump. Plain attributes (read on every append and fetch): read-only outside this class.
        self.latest_epoch: int | None = None
        self.latest_entry: tuple[int, int] | None = None
        for epoch, start in entries:
            self.assign(epoch, start)

    # ------------------------------------------------------------- queries

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.entries})"

    def start_offset_of(self, epoch: int) -> int | None:
        i = bisect.bisect_left(self._epochs, epoch)
        if i < len(self._epochs) and self._epochs[i] == epoch:
            return self._starts[i]
        return None

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest known epoch strictly below `epoch` (a follower walks
        back with this when the leader does not know its epoch)."""
        i = bisect.bisect_left(self._epochs, epoch)
        return self._epochs[i - 1] if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        i = bisect.bisect_right(self._epochs, epoch)
        return self._epochs[i] if i < len(self._epochs) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset` (None below the first entry)."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's endOffsetFor (E3): `(largest epoch <= requested, its end)`.

        * requested == -1, or above every known epoch: (-1, -1);
        * requested == latest epoch: (requested, log_end_offset);
        * requested below the first epoch: (requested, first start offset);
        * otherwise: (floor epoch, start offset of the next higher epoch).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        hi = bisect.bisect_right(self._epochs, requested_epoch)
        if hi == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[hi - 1], self._starts[hi]

    # ------------------------------------------------------------- changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (E2). Triggered by an
        election (leader: LEO at election) and by appended batches.

        A no-op when `epoch` is already the latest entry and the start offset
        is not lower. Otherwise first removes, from the end, every entry whose
        epoch >= `epoch` or start >= `start_offset`, then adds the entry.
        Returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._changed()
        return True

    def truncate_from_end(self, end_offset: int) -> list[tuple[int, int]]:
        """Drop every entry whose start >= `end_offset` (E4). Triggered by log
        truncation and by recovery. Returns the removed entries."""
        removed: list[tuple[int, int]] = []
        if end_offset < 0:
            return removed
        while self._starts and self._starts[-1] >= end_offset:
            removed.append((self._epochs.pop(), self._starts.pop()))
        if removed:
            self._changed()
        removed.reverse()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[tuple[int, int]]:
        """Drop entries with start <= `start_offset` but keep the last of them
        with its start moved up to `start_offset` (E4). Triggered by the log
        start offset moving forward. Returns the removed entries."""
        if start_offset < 0 or not self._starts or self._starts[0] >= start_offset:
            return []
        n = bisect.bisect_right(self._starts, start_offset)
        removed = list(zip(self._epochs[:n], self._starts[:n], strict=True))
        kept_epoch = self._epochs[n - 1]
        del self._epochs[:n]
        del self._starts[:n]
        self._epochs.insert(0, kept_epoch)
        self._starts.insert(0, start_offset)
        self._changed()
        return removed

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self._changed()

    def _changed(self) -> None:
        self.version += 1
        if self._epochs:
            self.latest_epoch = self._epochs[-1]
            self.latest_entry = (self._epochs[-1], self._starts[-1])
        else:
            self.latest_epoch = self.latest_entry = None
