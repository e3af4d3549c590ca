"""Kafka's consumer embedded protocol and the range assignor (client side, pure).

Owns: ConsumerProtocolSubscription v0 and ConsumerProtocolAssignment v0
(the bytes a "consumer" group's JoinGroup metadata and SyncGroup assignments
carry, so minibroker's members, Kafka's clients and `consumer-groups
--describe` read each other's), and Kafka's RangeAssignor.

Must not know: the network, the group protocol's rules (the coordinator).
"""
from __future__ import annotations

import struct

from minibroker.client.types import TopicPartition

PROTOCOL_TYPE = "consumer"
RANGE = "range"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def encode_subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    return _I16.pack(0) + _I32.pack(len(topics)) + b"".join(_string(t) for t in topics) + \
        _I32.pack(len(user_data)) + user_data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated consumer protocol bytes")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def string(self) -> str:
        return self.take(self.i16()).decode()


def decode_subscription(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (any version: later fields are ignored)."""
    r = _Reader(data)
    r.i16()
    return [r.string() for _ in range(r.i32())]


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [_I16.pack(0), _I32.pack(len(by_topic))]
    for t, ps in by_topic.items():
        out.append(_string(t) + _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps))
    out.append(_I32.pack(-1))            # null user data
    return b"".join(out)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    r = _Reader(data)
    r.i16()
    out = []
    for _ in range(r.i32()):
        t = r.string()
        out += [TopicPartition(t, r.i32()) for _ in range(r.i32())]
    return out


def range_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int],
                 instances: dict[str, str] | None = None) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, the members subscribed to it each get a contiguous range, the
    first (n % members) one partition more; in Kafka's MemberInfo order: static members (`instances`:
    member id -> group instance id) first by instance id, so a restarted one keeps its range, then the
    others by member id."""
    inst = instances or {}
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for t in topics:
        n = partitions.get(t, 0)
        members = sorted((m for m, ts in subscriptions.items() if t in ts),
                         key=lambda m: (0, inst[m], "") if m in inst else (1, "", m))
        if not members or n <= 0:
            continue
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[m] += [TopicPartition(t, p) for p in range(start, start + count)]
            start += count
    return out
