import random

import pytest

from minibroker.controller.placement import PlacementError, assign_replicas, rack_alternated_brokers

RACKS = {0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"}


def test_rack_unaware_vectors_with_fixed_start_index_match_kafka():
    got = assign_replicas({b: None for b in range(5)}, 10, 3, fixed_start_index=0)
    assert got == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
                   [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_rack_aware_vectors_with_fixed_start_index_match_kafka_including_follower_shift():
    got = assign_replicas(RACKS, 7, 3, fixed_start_index=0)
    assert got == [[0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3], [0, 4, 2]]


def test_rack_alternated_list_takes_one_broker_per_sorted_rack_in_turn():
    assert rack_alternated_brokers(RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({0: "a", 1: "a", 2: "a", 3: "b"}) == [0, 3, 1, 2]


def test_replication_factor_above_broker_count_is_invalid_replication_factor():
    with pytest.raises(PlacementError) as e:
        assign_replicas({1: None, 2: None}, 1, 3)
    assert e.value.code_name == "INVALID_REPLICATION_FACTOR"


@pytest.mark.parametrize("n,rf,code", [(0, 1, "INVALID_PARTITIONS"), (1, 0, "INVALID_REPLICATION_FACTOR")])
def test_non_positive_counts_are_refused(n, rf, code):
    with pytest.raises(PlacementError) as e:
        assign_replicas({1: None}, n, rf)
    assert e.value.code_name == code


def test_mixed_racks_fall_back_to_rack_unaware_order():
    got = assign_replicas({0: "a", 1: None, 2: "b"}, 3, 2, fixed_start_index=0)
    assert got == assign_replicas({0: None, 1: None, 2: None}, 3, 2, fixed_start_index=0)


def test_random_start_gives_distinct_replicas_spread_over_racks():
    rng = random.Random(7)
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    for _ in range(20):
        for replicas in assign_replicas(racks, 12, 3, rng=rng):
            assert len(set(replicas)) == 3
            assert {racks[b] for b in replicas} == {"a", "b", "c"}


def test_leaders_are_spread_evenly_round_robin():
    got = assign_replicas({b: None for b in range(4)}, 8, 2, rng=random.Random(1))
    leaders = [r[0] for r in got]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2, 3, 3]
