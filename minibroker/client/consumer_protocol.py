"""Kafka's consumer embedded protocol and the range assignor (client side, pure).

Owns: ConsumerProtocolSubscription v0 and ConsumerProtocolAssignment v0
(the bytes a "consumer" group's JoinGroup metadata and SyncGroup assignments
carry, so minibroker's members, Kafka's clients and `consumer-groups
--describe` read each other's), and Kafka's RangeAssignor.

Must not know: the network, the group protocol's rules (the coordinator).
"""
from __future__ import annotations

from minibroker.client.types import TopicPartition
from minibroker.protocol.consumer_subscription import (INT16, INT32, PROTOCOL_TYPE, Reader, decode_subscription,
                                                       encode_string, encode_subscription)

__all__ = ["PROTOCOL_TYPE", "RANGE", "decode_assignment", "decode_subscription", "encode_assignment",
           "encode_subscription", "range_assign"]

RANGE = "range"


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out = [INT16.pack(0), INT32.pack(len(by_topic))]
    for t, ps in by_topic.items():
        out.append(encode_string(t) + INT32.pack(len(ps)) + b"".join(INT32.pack(p) for p in ps))
    out.append(INT32.pack(-1))            # null user data
    return b"".join(out)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    r = Reader(data)
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
