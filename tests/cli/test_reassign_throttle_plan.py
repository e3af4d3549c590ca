"""`throttle_plan`: Kafka's calculateProposedMoveMap and the throttled replicas and brokers it gives
(ReassignPartitionsCommand: calculateLeaderThrottles, calculateFollowerThrottles, calculateReassigningBrokers)."""
from __future__ import annotations

import pytest

from minibroker.cli.reassign import throttle_plan
from minibroker.client.types import TopicPartition as TP


def test_sources_lead_and_new_replicas_follow():
    leader, follower, brokers = throttle_plan({TP("t", 0): [1, 2]}, {}, {TP("t", 0): [3, 2]})
    assert (leader, follower, brokers) == ({"t": "0:1,0:2"}, {"t": "0:3"}, [1, 2, 3])


def test_lists_are_sorted_as_strings_as_a_treeset_and_brokers_as_numbers():
    current = {TP("t", 0): [10, 2], TP("t", 2): [1], TP("t", 10): [3], TP("v", 0): [1]}
    plan = {TP("t", 0): [10, 11], TP("t", 2): [1, 2], TP("t", 10): [3], TP("v", 0): [1]}
    leader, follower, brokers = throttle_plan(current, {}, plan)
    # "0:10" < "0:2" and "10:3" < "2:1" as strings; a partition that does not move still has its sources listed.
    assert leader == {"t": "0:10,0:2,10:3,2:1", "v": "0:1"}
    assert follower == {"t": "0:11,2:2", "v": ""}
    assert brokers == [1, 2, 3, 10, 11]


def test_a_partition_already_being_reassigned_moves_from_its_original_replicas():
    # t-0 is going from [1,2] to [1,3] (replicas 1,3,2; adding 3; removing 2) and is resubmitted to [1,4]:
    # its sources are 1,2 (not the metadata's 1,3,2), and 3 is no destination any more.
    # u-1 is being reassigned and is not in the plan: Kafka's move map starts from every reassignment.
    current = {TP("t", 0): [1, 3, 2]}
    ongoing = {TP("t", 0): ([1, 3, 2], [3], [2]), TP("u", 1): ([5, 6], [6], [])}
    leader, follower, brokers = throttle_plan(current, ongoing, {TP("t", 0): [1, 4]})
    assert leader == {"t": "0:1,0:2", "u": "1:5"}
    assert follower == {"t": "0:4", "u": "1:6"}
    assert brokers == [1, 2, 4, 5, 6]


def test_resubmitting_the_same_target_keeps_the_throttles():
    current = {TP("t", 0): [1, 3, 2]}
    ongoing = {TP("t", 0): ([1, 3, 2], [3], [2])}
    assert throttle_plan(current, ongoing, {TP("t", 0): [1, 3]}) == ({"t": "0:1,0:2"}, {"t": "0:3"}, [1, 2, 3])


def test_a_partition_with_no_replicas_cannot_be_planned():
    with pytest.raises(ValueError, match="Trying to reassign a topic partition t-0 with 0 replicas"):
        throttle_plan({}, {}, {TP("t", 0): [1]})
