"""The records of `__consumer_offsets`, in Kafka's own key and value schemas.

Owns: encoding and decoding Kafka's OffsetCommitKey (v1), OffsetCommitValue
(v3), GroupMetadataKey (v2) and GroupMetadataValue (v3) - the non-flexible
versions Kafka's classic group coordinator writes, so a Kafka tool reading
the topic sees what Kafka writes - tombstones (a null value), the group ->
partition hash (Kafka's `Utils.abs(groupId.hashCode()) % partitions`, with
Java's String.hashCode over UTF-16 code units), and replaying a partition's
records into groups.

Must not know: the log, batches or the network (the driver reads and writes
the records); any group rule (minibroker.coordinator.group).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from minibroker.coordinator.group import CommittedOffset, Group, GroupSettings, GroupState, Member

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that is not one of the schemas above."""


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (a signed 32-bit int over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's partitionFor: Utils.abs(hashCode) % n, where Utils.abs(MIN_VALUE) is 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, v: int) -> _Writer:
        self.parts.append(_I16.pack(v))
        return self

    def i32(self, v: int) -> _Writer:
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v: int) -> _Writer:
        self.parts.append(_I64.pack(v))
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.i16(-1)
        b = v.encode()
        self.parts.append(_I16.pack(len(b)) + b)
        return self

    def bytes_(self, v: bytes) -> _Writer:
        self.parts.append(_I32.pack(len(v)) + v)
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError(f"record ends after {len(self.data)} bytes, needs {self.pos + n}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def str_(self) -> str:
        v = self.string()
        if v is None:
            raise RecordFormatError("null where a string is required")
        return v

    def bytes_(self) -> bytes:
        return self._take(self.i32())


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).done()


def group_key(group: str) -> bytes:
    return _Writer().i16(GROUP_KEY_VERSION).string(group).done()


def offset_value(o: CommittedOffset) -> bytes:
    return (_Writer().i16(OFFSET_VALUE_VERSION).i64(o.offset).i32(o.leader_epoch).string(o.metadata)
            .i64(o.commit_timestamp_ms).done())


def group_value(g: Group) -> bytes:
    w = (_Writer().i16(GROUP_VALUE_VERSION).string(g.protocol_type or "").i32(g.generation_id)
         .string(g.protocol_name).string(g.leader or None).i64(g.state_timestamp_ms).i32(len(g.members)))
    for m in g.members.values():
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
         .i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms).bytes_(m.metadata(g.protocol_name or ""))
         .bytes_(m.assignment))
    return w.done()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.str_(), r.str_(), r.i32())
    if version == 2:
        return GroupKey(r.str_())
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> CommittedOffset:
    r = _Reader(data)
    version = r.i16()
    if version not in (1, 2, 3):
        raise RecordFormatError(f"OffsetCommitValue version {version} is not read")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    ts = r.i64()
    if version == 1:
        r.i64()   # expire timestamp
    return CommittedOffset(offset, epoch, metadata, ts)


def replay_group_value(g: Group, data: bytes, now_ms: int) -> None:
    """Restore a group's stored generation: members come back as they were and must heartbeat within
    their session timeout (from `now_ms`, the load) to stay, as Kafka's loaded groups."""
    r = _Reader(data)
    version = r.i16()
    if version not in (2, 3):
        raise RecordFormatError(f"GroupMetadataValue version {version} is not read")
    protocol_type = r.str_()
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    ts = r.i64()
    members: dict[str, Member] = {}
    for _ in range(r.i32()):
        mid = r.str_()
        instance = r.string()
        client_id, host = r.str_(), r.str_()
        rebalance, session = r.i32(), r.i32()
        subscription, assignment = r.bytes_(), r.bytes_()
        members[mid] = Member(mid, instance, client_id, host, session, rebalance, protocol_type,
                              [(protocol or "", subscription)], assignment, last_heartbeat_ms=now_ms)
    g.protocol_type = protocol_type or None
    g.generation_id = generation
    g.protocol_name = protocol
    g.leader = leader or ""
    g.state_timestamp_ms = ts
    g.members = members
    g.static_members = {m.group_instance_id: mid for mid, m in members.items() if m.group_instance_id is not None}
    g.state = GroupState.STABLE if members else GroupState.EMPTY
    g.subscribed_topics = g.compute_subscribed_topics()


def replay(groups: dict[str, Group], key: bytes, value: bytes | None, settings: GroupSettings,
           now_ms: int, written_ms: int = 0) -> None:
    """Apply one record of the offsets topic (in log order, written at `written_ms`) to `groups`."""
    k = decode_key(key)
    g = groups.get(k.group)
    if isinstance(k, OffsetKey):
        if value is None:
            if g is not None:
                g.expire([(k.topic, k.partition)])
            return
        if g is None:
            g = groups[k.group] = Group(k.group, settings)
        g.commit({(k.topic, k.partition): decode_offset_value(value)}, written_ms)
        return
    if value is None:
        # A group tombstone (DeleteGroups, or an expired Empty group): offsets were tombstoned before it.
        if g is not None and not g.offsets:
            del groups[k.group]
        return
    if g is None:
        g = groups[k.group] = Group(k.group, settings)
    replay_group_value(g, value, now_ms)
    g.metadata_written_ms = written_ms
