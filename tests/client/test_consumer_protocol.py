"""Kafka's consumer embedded protocol and RangeAssignor, client side."""
from __future__ import annotations

from minibroker.client.consumer_protocol import (decode_assignment, decode_subscription, encode_assignment,
                                                 encode_subscription, range_assign)
from minibroker.client.types import TopicPartition as TP


def test_range_assignor_gives_contiguous_ranges_and_the_first_members_one_more() -> None:
    plan = range_assign({"c": ["t"], "a": ["t"], "b": ["t", "u"]}, {"t": 7, "u": 2})
    assert plan["a"] == [TP("t", 0), TP("t", 1), TP("t", 2)]
    assert plan["b"] == [TP("t", 3), TP("t", 4), TP("u", 0), TP("u", 1)]
    assert plan["c"] == [TP("t", 5), TP("t", 6)]


def test_six_partitions_over_three_then_two_members() -> None:
    three = range_assign({m: ["t"] for m in "abc"}, {"t": 6})
    assert [len(v) for v in three.values()] == [2, 2, 2]
    two = range_assign({m: ["t"] for m in "bc"}, {"t": 6})
    assert two == {"b": [TP("t", p) for p in range(3)], "c": [TP("t", p) for p in range(3, 6)]}


def test_static_members_come_first_in_instance_id_order_so_a_restarted_one_keeps_its_range() -> None:
    """Kafka's MemberInfo order: static members by group instance id, then dynamic ones by member id."""
    subs = {m: ["t"] for m in ("z-new-id", "a-dyn", "m-other")}
    plan = range_assign(subs, {"t": 3}, {"z-new-id": "i1", "m-other": "i2"})
    assert plan == {"z-new-id": [TP("t", 0)], "m-other": [TP("t", 1)], "a-dyn": [TP("t", 2)]}
    restarted = range_assign({"b-newer": ["t"], "m-other": ["t"], "a-dyn": ["t"]}, {"t": 3},
                             {"b-newer": "i1", "m-other": "i2"})
    assert restarted["b-newer"] == plan["z-new-id"] and restarted["m-other"] == plan["m-other"]


def test_subscription_and_assignment_bytes_round_trip_in_kafkas_v0_layout() -> None:
    sub = encode_subscription(["orders", "t"])
    assert sub == b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x06orders" + b"\x00\x01t" + b"\x00\x00\x00\x00"
    assert decode_subscription(sub) == ["orders", "t"]
    tps = [TP("t", 2), TP("orders", 0), TP("t", 1)]
    assert decode_assignment(encode_assignment(tps)) == sorted(tps)
    assert decode_assignment(b"") == []
