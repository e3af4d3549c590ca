"""The leader's rules about readers and ISR eligibility, as pure functions (FF1-FF2, H1/I3)."""
from __future__ import annotations

from minibroker.replication.leader import FollowerState
from minibroker.replication.read_replica import BrokerView, isr_eligibility, select_read_replica


def f(leo: int, caught_up: int | None = 0, log_start: int = 0) -> FollowerState:
    return FollowerState(leo, caught_up, caught_up, leo, 1, log_start)


BROKERS = {2: BrokerView("b", False), 3: BrokerView("b", False), 4: BrokerView("c", False)}


def test_a_consumer_in_the_leaders_rack_reads_from_the_leader():
    assert select_read_replica(1, "b", "b", 5, [1, 2, 3], {2: f(10), 3: f(10)}, BROKERS) == 1


def test_the_same_rack_isr_follower_with_the_highest_leo_then_latest_catch_up_then_id_is_chosen():
    assert select_read_replica(1, "a", "b", 5, [1, 2, 3], {2: f(10), 3: f(9)}, BROKERS) == 2
    assert select_read_replica(1, "a", "b", 5, [1, 2, 3], {2: f(10, 5), 3: f(10, 7)}, BROKERS) == 3
    assert select_read_replica(1, "a", "b", 5, [1, 2, 3], {2: f(10, 5), 3: f(10, 5)}, BROKERS) == 3


def test_a_follower_not_holding_the_offset_fenced_or_outside_the_isr_is_never_chosen():
    assert select_read_replica(1, "a", "b", 11, [1, 2], {2: f(10)}, BROKERS) == 1
    assert select_read_replica(1, "a", "b", 5, [1, 2], {2: f(10, log_start=6)}, BROKERS) == 1
    assert select_read_replica(1, "a", "b", 5, [1], {2: f(10)}, BROKERS) == 1
    assert select_read_replica(1, "a", "b", 5, [1, 2], {2: f(10)}, {2: BrokerView("b", True)}) == 1


def test_only_a_registered_unfenced_broker_not_shutting_down_is_isr_eligible():
    assert isr_eligibility(None) == (False, -1)
    assert isr_eligibility(BrokerView("a", False, False, 7)) == (True, 7)
    assert isr_eligibility(BrokerView("a", True, False, 7)) == (False, 7)
    assert isr_eligibility(BrokerView("a", False, True, 7)) == (False, 7)
