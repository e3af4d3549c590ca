"""Choosing a partition for a record, as Kafka's BuiltInPartitioner does.

A key picks `murmur2(key) & 0x7fffffff % partitions` (Kafka's exact hash, so
keys land where Kafka would put them). Records without a key stick to one
partition until its batch is full, then move on (KIP-480's sticky
partitioner; Kafka 3.3's KIP-794 refines the switch by bytes produced),
preferring partitions with a known leader.
Pure: the caller passes the partition counts and the random source.
`murmur2` is minibroker._speedups' C version where it was built, else
`murmur2_py` (the same values: tests/client/test_partitioner.py).
"""
from __future__ import annotations

import random
from collections.abc import Callable


def murmur2_py(data: bytes) -> int:
    """Kafka's Utils.murmur2 (signed 32-bit result)."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        i4 = i * 4
        k = (data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24))
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


try:
    from minibroker._speedups import murmur2
except ImportError:  # pragma: no cover - the C extension was not built
    murmur2 = murmur2_py


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Unkeyed records stick to one partition until its open batch cannot take
    the next record, then move to another one (Kafka's sticky partitioner,
    KIP-480; switching before the append, as Kafka's abortOnNewBatch does, so no
    one-record batch is left behind). Partitions with a known leader are preferred.

    Invariant: `current[topic]` is where the topic's unkeyed records go now (the
    producer reads it to take a record without a call while that batch has room)."""

    def __init__(self, rand: Callable[[int], int] | None = None) -> None:
        self._rand = rand or (lambda n: random.randrange(n))
        self.current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, has_room: Callable[[int], bool],
                  available: Callable[[str], list[int]]) -> int:
        """`has_room(p)`: p's open batch takes the record; `available(topic)`: partitions with a leader."""
        cur = self.current.get(topic)
        if cur is None or cur >= num_partitions:
            return self._next(topic, num_partitions, available, None)
        if not has_room(cur):
            return self._next(topic, num_partitions, available, cur)
        return cur

    def _next(self, topic: str, num_partitions: int, available: Callable[[str], list[int]],
              avoid: int | None) -> int:
        choices = [p for p in available(topic) if p < num_partitions] or list(range(num_partitions))
        if len(choices) > 1 and avoid in choices:
            choices.remove(avoid)
        cur = choices[self._rand(len(choices))]
        self.current[topic] = cur
        return cur
