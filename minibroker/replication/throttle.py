"""Replication throttles (KIP-73): which replicas are throttled here, and the byte rate they used.

Owns: one side's (leader or follower) replication quota on one broker: the bound
(`leader.replication.throttled.rate` / `follower.replication.throttled.rate`), the
partitions the topic configs `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas` name for this broker, and the windowed rate
of the throttled partitions' bytes, measured as Kafka's `Rate` over `SampledStat`
windows (`replication.quota.window.num` windows of `replication.quota.window.size.seconds`).
Rules RQ1-RQ5 in docs/rules.md.

Must not know: sockets, fetch sessions, the log, the clock (every call takes `now_ms`),
or which replicas are in sync (the caller says; the leader asks its ISR, the follower
its lag behind the leader's HW).
"""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Final

UNLIMITED: Final = (1 << 63) - 1                 # Long.MAX_VALUE: Kafka's "no throttle"
LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"
WILDCARD: Final = "*"

_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def throttled_replicas_error(name: str, value: str) -> str | None:
    """RQ1: why `value` cannot be a throttled-replicas list, in Kafka's words, or None. Valid: empty,
    the wildcard `*`, or `partition:broker` pairs separated by commas."""
    items = [s.strip() for s in value.split(",")]
    if items == [WILDCARD] or all(not s or _REPLICA.fullmatch(s) for s in items):
        return None
    return (f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be the literal '*' "
            "or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """RQ1: the partitions a throttled-replicas list names for `broker_id`; None for the wildcard
    (every partition of the topic). A malformed list names none."""
    if throttled_replicas_error("", value) is not None:
        return frozenset()
    items = [s.strip() for s in value.split(",")]
    if items == [WILDCARD]:
        return None
    out = set()
    for s in items:
        if s:
            p, _, b = s.partition(":")
            if int(b) == broker_id:
                out.add(int(p))
    return frozenset(out)


def parse_rate(value: str | None) -> int:
    """A throttled rate property: bytes/s, at least 0; anything else is no throttle."""
    try:
        n = int(str(value).strip())
    except ValueError:
        return UNLIMITED
    return n if n >= 0 else UNLIMITED


class ReplicationQuota:
    """Invariant: `_samples` holds at most `windows` [start_ms, bytes] pairs, oldest first, each
    started at most `window_ms` after the one before it was; `throttled` maps a topic to the
    partitions throttled here (None: all of them), and holds no topic whose list names none;
    `active` is True exactly when some topic is throttled (a caller's fast test)."""

    __slots__ = ("bound", "windows", "window_ms", "throttled", "active", "withheld", "_samples")

    def __init__(self, bound: int = UNLIMITED, windows: int = 11, window_ms: int = 1000) -> None:
        self.bound = bound
        self.windows = max(1, windows)
        self.window_ms = max(1, window_ms)
        self.throttled: dict[str, frozenset[int] | None] = {}
        self.active = False
        self.withheld = 0               # Invariant: how many times `maybe_throttle` said wait
        self._samples: deque[list[int]] = deque()

    def set_throttled(self, lists: Mapping[str, str], broker_id: int) -> None:
        """RQ1: triggered when topic configs change: `lists` maps each topic to its throttled-replicas
        config for this side (topics without one left out)."""
        throttled: dict[str, frozenset[int] | None] = {}
        for topic in sorted(lists):
            parts = throttled_partitions(lists[topic], broker_id)
            if parts is None or parts:
                throttled[topic] = parts
        self.throttled = throttled
        self.active = bool(throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        """RQ1: whether this partition's replication is throttled on this side (before the rate is asked)."""
        if topic not in self.throttled:
            return False
        parts = self.throttled[topic]
        return parts is None or partition in parts

    def record(self, nbytes: int, now_ms: int) -> None:
        """RQ3: triggered by throttled bytes sent (leader) or fetched (follower)."""
        self._purge(now_ms)
        samples = self._samples
        if not samples or now_ms - samples[-1][0] >= self.window_ms:
            samples.append([now_ms, 0])
            if len(samples) > self.windows:
                samples.popleft()
        samples[-1][1] += nbytes

    def rate(self, now_ms: int) -> float:
        """RQ2: bytes per second over the kept windows, as Kafka's `Rate`: the elapsed time counts at
        least `windows - 1` whole windows, so a burst right after a quiet spell is not a huge rate."""
        self._purge(now_ms)
        samples = self._samples
        if not samples:
            return 0.0
        total = sum(s[1] for s in samples)
        elapsed = now_ms - samples[0][0]
        full = elapsed // self.window_ms
        if full < self.windows - 1:
            elapsed += (self.windows - 1 - full) * self.window_ms
        return total * 1000.0 / max(elapsed, 1)

    def is_exceeded(self, now_ms: int) -> bool:
        """RQ2: the rate is above the bound (never with no bound)."""
        return self.bound < UNLIMITED and self.rate(now_ms) > self.bound

    def maybe_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: int) -> bool:
        """RQ4/RQ5: whether this partition's replication waits now: throttled here, its replica not in
        sync, and the quota used up."""
        if (not in_sync and self.active and self.bound < UNLIMITED and self.is_throttled(topic, partition)
                and self.is_exceeded(now_ms)):
            self.withheld += 1
            return True
        return False

    def status(self, now_ms: int) -> dict[str, object]:
        """For ReplicaStatus and the metrics: the bound (None: none), the rate, the throttled partitions."""
        return {"bound": None if self.bound >= UNLIMITED else self.bound, "byte_rate": round(self.rate(now_ms), 1),
                "throttled": {t: None if ps is None else sorted(ps) for t, ps in self.throttled.items()},
                "withheld": self.withheld}

    def _purge(self, now_ms: int) -> None:
        samples = self._samples
        horizon = self.windows * self.window_ms
        while samples and now_ms - samples[0][0] >= horizon:
            samples.popleft()


def throttled_lists(topic_configs: Iterable[tuple[str, Mapping[str, str]]], key: str) -> dict[str, str]:
    """Each topic's `key` config (leader or follower throttled replicas), for `set_throttled`."""
    return {topic: configs[key] for topic, configs in topic_configs if configs.get(key, "").strip()}
