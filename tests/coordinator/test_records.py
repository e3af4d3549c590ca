"""The offsets topic's records: Kafka's schemas byte for byte, Kafka's group hash."""
from __future__ import annotations

import pytest

from minibroker.coordinator.group import CommittedOffset, Group, GroupSettings, GroupState, Member
from minibroker.coordinator import records as r
from minibroker.errors import ErrorCode
from minibroker.protocol.consumer_subscription import encode_subscription


def test_group_hash_is_javas_string_hash_code() -> None:
    assert r.java_string_hash("") == 0
    assert r.java_string_hash("ab") == 97 * 31 + 98
    assert r.java_string_hash("hello world") == 1794106052
    assert r.java_string_hash("polygenelubricants") == -(1 << 31)


def test_a_group_whose_hash_is_int_min_goes_to_partition_zero_as_kafkas_utils_abs() -> None:
    assert r.partition_for("polygenelubricants", 50) == 0
    assert r.partition_for("hello world", 50) == 1794106052 % 50


def test_offset_commit_key_and_value_are_kafkas_v1_and_v3_layouts() -> None:
    key = r.offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = r.offset_value(CommittedOffset(42, 7, "meta", 1000))
    assert value[:2] == b"\x00\x03" and len(value) == 2 + 8 + 4 + 2 + 4 + 8
    assert r.decode_key(key) == r.OffsetKey("g", "t", 3)
    assert r.decode_offset_value(value) == CommittedOffset(42, 7, "meta", 1000)


def test_replaying_a_partition_restores_offsets_groups_and_tombstones() -> None:
    g = Group("g", GroupSettings())
    g.generation_id, g.protocol_type, g.protocol_name, g.leader = 5, "consumer", "range", "m1"
    g.members["m1"] = Member("m1", None, "c", "/h", 10_000, 30_000, "consumer", [("range", b"sub")], b"asg")
    groups: dict[str, Group] = {}
    s = GroupSettings()
    r.replay(groups, r.offset_key("g", "t", 0), r.offset_value(CommittedOffset(10, -1, "", 1)), s, 0)
    r.replay(groups, r.offset_key("g", "t", 0), r.offset_value(CommittedOffset(11, -1, "", 2)), s, 0)
    r.replay(groups, r.offset_key("g", "t", 1), r.offset_value(CommittedOffset(3, -1, "", 2)), s, 0)
    r.replay(groups, r.group_key("g"), r.group_value(g), s, 500)
    loaded = groups["g"]
    assert loaded.offsets[("t", 0)].offset == 11 and loaded.generation_id == 5
    assert loaded.state is GroupState.STABLE and loaded.members["m1"].assignment == b"asg"
    assert loaded.members["m1"].last_heartbeat_ms == 500
    r.replay(groups, r.offset_key("g", "t", 0), None, s, 0)
    r.replay(groups, r.offset_key("g", "t", 1), None, s, 0)
    r.replay(groups, r.group_key("g"), None, s, 0)
    assert "g" not in groups


def test_a_restored_group_knows_what_its_members_subscribe_to() -> None:
    """As Kafka's loaded ClassicGroup (computeSubscribedTopics on load): OffsetDelete refuses the
    topics a restored Stable group's members use, before any of them rejoins."""
    g = Group("g", GroupSettings())
    g.generation_id, g.protocol_type, g.protocol_name, g.leader = 5, "consumer", "range", "m1"
    g.members["m1"] = Member("m1", None, "c", "/h", 10_000, 30_000, "consumer",
                             [("range", encode_subscription(["orders", "audit"]))], b"")
    groups: dict[str, Group] = {}
    r.replay(groups, r.group_key("g"), r.group_value(g), GroupSettings(), 500)
    assert groups["g"].subscribed_topics == frozenset({"orders", "audit"})
    decided = groups["g"].maybe_delete_offsets([("orders", [0]), ("other", [0])])
    assert decided.results == (("orders", ((0, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC),)),
                               ("other", ((0, ErrorCode.NONE),)))


def test_a_truncated_or_unknown_record_is_a_format_error() -> None:
    with pytest.raises(r.RecordFormatError):
        r.decode_key(b"\x00\x01\x00\x05ab")
    with pytest.raises(r.RecordFormatError):
        r.decode_key(b"\x00\x09")
