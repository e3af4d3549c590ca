"""Delayed operations ("purgatory"): parked acks=all produces and long-poll fetches.

Owns: the bookkeeping of requests that wait for something to happen on a
partition, and telling them. A `DelayedProduce` waits for the leader core to
resolve each of its partitions (the core decides when: `Decision.completed`);
a `DelayedFetch` waits until enough bytes are readable on its partitions, or
until a partition's state changes (leadership, epoch, truncation, removal).
Every such notification is also counted (`changes`) and its partition kept in
a bounded log (`changed_since`), so a replica fetch session can tell which of
its quiet partitions moved since its last Fetch without looking at each.

Must not know: replication rules, the log, the wire format, the event loop.
An operation is completed by calling its `on_complete` once (Kafka's
DelayedOperation.onComplete); the driver decides what that does and when it
runs (the replica manager queues it until the request that caused it has been
handled, as Kafka's ActionQueue), times operations out, and unregisters them
(`close`) when they complete or their connection dies. Wakeups are
O(parked operations on that partition), never a scan.
"""
from __future__ import annotations

import itertools
from collections import deque
from typing import Any
from collections.abc import Callable, Hashable, Iterable

from minibroker.errors import ErrorCode

PartitionKey = tuple[str, int]
CHANGE_LOG_MAX = 4096       # the changes `changed_since` can answer for


class ProduceWaiter:
    """The token registered with a `PartitionLeader` for one partition of one
    acks=all produce. `entry` is that partition's response dict; it is
    provisionally REQUEST_TIMED_OUT (Kafka P5) until the core resolves it."""

    __slots__ = ("op", "entry", "key", "done")

    def __init__(self, op: DelayedProduce, entry: dict[str, Any], key: PartitionKey) -> None:
        self.op = op
        self.entry = entry
        self.key = key
        self.done = False

    def complete(self, code: ErrorCode) -> None:
        """The core resolved this partition (HW reached, or leadership lost)."""
        if self.done:
            return
        self.done = True
        self.entry["error"] = int(code)
        if code != ErrorCode.NONE:
            self.entry["message"] = code.name
        op = self.op
        op.remaining -= 1
        if op.remaining <= 0 and op.armed:
            op.complete()


class DelayedProduce:
    """One acks=all produce request waiting for its partitions' HWs.

    Invariant: `remaining` counts waiters not yet completed; `on_complete` runs
    exactly once, when it is 0 after `arm` (every waiter added), or at the
    driver's `complete` (the deadline); entries not resolved then stay
    REQUEST_TIMED_OUT.
    """

    __slots__ = ("remaining", "waiters", "armed", "done", "on_complete")

    def __init__(self, on_complete: Callable[[], None]) -> None:
        self.remaining = 0
        self.waiters: list[ProduceWaiter] = []
        self.armed = False
        self.done = False
        self.on_complete = on_complete

    def add(self, entry: dict[str, Any], key: PartitionKey) -> ProduceWaiter:
        entry["error"] = int(ErrorCode.REQUEST_TIMED_OUT)
        w = ProduceWaiter(self, entry, key)
        self.waiters.append(w)
        self.remaining += 1
        return w

    def arm(self) -> None:
        """Every partition's waiter is added: complete once they are all resolved (now, if they are)."""
        self.armed = True
        if self.remaining <= 0:
            self.complete()

    def complete(self) -> None:
        """Every partition resolved, or the deadline passed."""
        if not self.done:
            self.done = True
            self.on_complete()

    def pending(self) -> list[ProduceWaiter]:
        return [w for w in self.waiters if not w.done]


class DelayedFetch:
    """One parked Fetch (F9). `follower` fetches read to the LEO and are woken
    by appends only (F10); consumer fetches read to the HW and are woken by
    HW moves. Any state change on a watched partition completes it.

    Invariant: `accumulated` is the bytes known readable beyond what the
    initial read returned; `on_complete` runs exactly once: when it reaches
    `needed`, on a state change, or at the driver's `complete` (deadline,
    shutdown).
    """

    __slots__ = ("needed", "accumulated", "follower", "keys", "changed", "done", "on_complete", "throttled")

    def __init__(self, keys: list[PartitionKey], needed: int, follower: bool,
                 on_complete: Callable[[], None]) -> None:
        self.keys = keys
        self.needed = needed
        self.accumulated = 0
        self.follower = follower
        self.done = False
        self.on_complete = on_complete
        # Invariant: the watched keys notified (append, HW move, state change) since `watch`;
        # None once unknown (shutdown).
        self.changed: set[PartitionKey] | None = set()
        # Invariant: the watched keys whose appends add no bytes (RQ4: read throttled), or None.
        self.throttled: frozenset[PartitionKey] | None = None

    @property
    def active(self) -> bool:
        """Parked, not completed yet (a completed one may wait for `close` a little)."""
        return not self.done

    def add_appended(self, key: PartitionKey, n: int | None) -> None:
        """Triggered by an append to watched `key` (a follower's fetch): its bytes count unless throttled."""
        throttled = self.throttled
        if throttled is None or key not in throttled:
            self.add_bytes(n)

    def add_bytes(self, n: int | None) -> None:
        """`n` more bytes became readable (None: unknown, assume enough)."""
        if n is None:
            self.complete()
            return
        self.accumulated += n
        if self.accumulated >= self.needed:
            self.complete()

    def complete(self) -> None:
        if not self.done:
            self.done = True
            self.on_complete()


class StandingWatch:
    """A replica fetch session's watch on every partition of the session, registered once and
    kept between its Fetches, so parking one costs nothing per partition: each notification goes
    to the Fetch parked on it now (`op`), and is dropped while none is.

    Invariant: registered in the purgatory on exactly `keys`; `op`, when set, has no keys of its own."""

    __slots__ = ("keys", "op")
    follower = True

    def __init__(self) -> None:
        self.keys: frozenset[Hashable] = frozenset()
        self.op: DelayedFetch | None = None

    @property
    def active(self) -> bool:
        return self.op is not None and not self.op.done

    @property
    def changed(self) -> set[PartitionKey] | None:
        return self.op.changed if self.op is not None else None

    @changed.setter
    def changed(self, value: set[PartitionKey] | None) -> None:
        if self.op is not None:
            self.op.changed = value

    def add_bytes(self, n: int | None) -> None:
        if self.op is not None:
            self.op.add_bytes(n)

    def add_appended(self, key: PartitionKey, n: int | None) -> None:
        if self.op is not None:
            self.op.add_appended(key, n)

    def complete(self) -> None:
        if self.op is not None:
            self.op.complete()


class FetchPurgatory:
    """Parked fetches by partition.

    Invariant: an op appears in `_by_key[k]` exactly for each k in op.keys
    while it is watched; `close` removes it from all of them.
    """

    def __init__(self) -> None:
        # Ordered: ops wake in park order (a standing watch where it was registered).
        self._by_key: dict[Hashable, dict[DelayedFetch | StandingWatch, None]] = {}
        # Invariant: counts every notification and `touched()`, for watched keys or not: a reader that
        # sees it unchanged across a stretch knows no partition's readable state moved in it.
        self.changes = 0
        # Invariant: `_log[i]` is the key of change number `_log_base + i + 1`; the last CHANGE_LOG_MAX
        # changes are kept (`changed_since`).
        self._log: deque[Hashable] = deque()
        self._log_base = 0

    def _changed(self, key: Hashable) -> None:
        self.changes += 1
        log = self._log
        log.append(key)
        if len(log) > CHANGE_LOG_MAX:
            log.popleft()
            self._log_base += 1

    def changed_since(self, count: int) -> set[Hashable] | None:
        """The keys changed after the change count read `count` (empty: none), or None when
        that is older than the changes kept."""
        if count < self._log_base or count > self.changes:
            return None
        return set(itertools.islice(reversed(self._log), self.changes - count))     # O(changes since), from the end

    def touched(self, key: Hashable) -> None:
        """Triggered by an append or HW move on a partition nobody watches."""
        self._changed(key)

    def __len__(self) -> int:
        """The parked fetches."""
        return len({id(op) for ops in self._by_key.values() for op in ops if op.active})

    def watch(self, op: DelayedFetch, standing: StandingWatch | None = None) -> None:
        """Park `op` on its keys, or on `standing`'s when given and free (then `op` has no keys)."""
        if standing is not None and standing.op is None and not op.keys:
            standing.op = op
            return
        for k in op.keys:
            self._by_key.setdefault(k, {})[op] = None

    def close(self, op: DelayedFetch, standing: StandingWatch | None = None) -> None:
        if standing is not None and standing.op is op:
            standing.op = None
        self._unregister(op, op.keys)

    def stand(self, watch: StandingWatch, keys: Iterable[Hashable]) -> None:
        """Register `watch` on exactly `keys` (a session's partitions changed), or on none."""
        new = frozenset(keys)
        old = watch.keys
        self._unregister(watch, old - new)
        for k in new - old:
            self._by_key.setdefault(k, {})[watch] = None
        watch.keys = new

    def _unregister(self, op: DelayedFetch | StandingWatch, keys: Iterable[Hashable]) -> None:
        for k in keys:
            ops = self._by_key.get(k)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del self._by_key[k]

    def watching(self, key: PartitionKey) -> bool:
        """Whether a parked fetch watches `key` (a notification then has somebody to tell)."""
        ops = self._by_key.get(key)
        if ops is not None:
            for op in ops:
                if op.active:
                    return True
        return False

    def on_append(self, key: PartitionKey, nbytes: int | None) -> None:
        """New data at the log end of `key`: wakes follower fetches (and, on a
        follower replica, nothing else: consumers wait for its HW)."""
        self._changed(key)
        ops = self._by_key.get(key)
        if ops:
            for op in list(ops):
                changed = op.changed
                if changed is not None:
                    changed.add(key)
                if op.follower:
                    op.add_appended(key, nbytes)

    def on_hw_move(self, key: PartitionKey, nbytes: int | None) -> None:
        """The HW of `key` rose, making `nbytes` more readable for consumers."""
        self._changed(key)
        ops = self._by_key.get(key)
        if ops:
            for op in list(ops):
                changed = op.changed
                if changed is not None:
                    changed.add(key)
                if not op.follower:
                    op.add_bytes(nbytes)

    def on_state_change(self, key: PartitionKey) -> None:
        """Leadership, epoch, truncation or removal: every parked fetch on
        `key` completes and re-reads (it will see the error or new bounds)."""
        self._changed(key)
        ops = self._by_key.get(key)
        if ops:
            for op in list(ops):
                changed = op.changed
                if changed is not None:
                    changed.add(key)
                op.complete()

    def complete_all(self) -> None:
        """Shutdown: every parked fetch answers now (and no earlier change count is answered for)."""
        self.changes += 1
        self._log.clear()
        self._log_base = self.changes
        for ops in list(self._by_key.values()):
            for op in list(ops):
                op.changed = None
                op.complete()
