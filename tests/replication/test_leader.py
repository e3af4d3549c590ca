"""Rules of the partition leader core, one test per rule, with a manual clock.

Tests parametrised over `profile` hold in both the lesson and the kafka
profile; the others name the profile whose rule they pin.
"""
from __future__ import annotations

from typing import Any

import pytest

from minibroker.errors import ErrorCode
from minibroker.events import Event
from minibroker.replication.leader import Decision, FollowerState, PartitionLeader
from minibroker.replication.profile import KAFKA, LESSON, Profile

BOTH = pytest.mark.parametrize("profile", [LESSON, KAFKA], ids=["lesson", "kafka"])


def make(profile: Profile, replicas: list[int] | None = None, *, isr: list[int] | None = None,
         leo: int = 0, hw: int = 0, lag: int = 100, min_isr: int = 1, now: int = 0,
         leader_epoch: int = 0, partition_epoch: int = 0, events: list[Event] | None = None,
         prime: bool = True) -> PartitionLeader:
    """A leader for `replicas` (first = leader). With `prime`, every ISR
    follower fetches at the HW at `now`, so the kafka profile starts with known
    follower LEOs as the lesson profile does."""
    replicas = replicas or [1, 2, 3]
    sink = events.append if events is not None else (lambda e: None)
    lead = PartitionLeader(
        "t-0", replicas, replicas[0], leader_epoch=leader_epoch,
        partition_epoch=partition_epoch, isr=isr or list(replicas), leo=leo, hw=hw,
        lag_max_ms=lag, min_isr=min_isr, profile=profile, now_ms=now, sink=sink)
    if prime:
        for r in lead.isr[1:]:
            fetch(lead, r, hw, now)
    return lead


def fetch(lead: PartitionLeader, replica: int, offset: int, now: int, **kw: Any) -> Decision:
    d = lead.on_follower_fetch(replica, offset, now, **kw)
    commit(lead, d, now)
    return d


def shrink(lead: PartitionLeader, now: int) -> Decision:
    d = lead.maybe_shrink_isr(now)
    commit(lead, d, now)
    return d


def commit(lead: PartitionLeader, d: Decision, now: int) -> Decision | None:
    """Act as a controller that accepts every proposal at once."""
    if d.isr_proposal is None:
        return None
    c = lead.apply_committed_isr(d.isr_proposal, lead.partition_epoch + 1, now,
                                 lead.leader_epoch)
    d.completed.extend(c.completed)
    d.events.extend(c.events)
    d.new_hw = c.new_hw
    d.hw_moved = d.new_hw != d.old_hw
    d.isr_changed = d.isr_changed or c.isr_changed
    return c


def append(lead: PartitionLeader, n: int, now: int) -> Decision:
    return lead.on_append(lead.leo + n, now)


# ------------------------------------------------------------ caught-up rule (L2)


@BOTH
def test_fetch_at_leader_leo_makes_follower_caught_up_now(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 4, 10)
    fetch(lead, 2, 4, 50)
    f = lead.followers[2]
    assert (f.leo, f.last_caught_up_ms, f.last_fetch_ms, f.last_fetch_leader_leo) == (4, 50, 50, 4)


@BOTH
def test_fetch_reaching_previous_fetch_leader_leo_is_caught_up_as_of_previous_fetch(
        profile: Profile) -> None:
    lead = make(profile)
    append(lead, 10, 0)
    fetch(lead, 2, 0, 100)          # leader LEO 10 at this fetch; not caught up
    append(lead, 10, 150)
    d = fetch(lead, 2, 10, 200)     # 10 >= 10: caught up as of 100
    assert lead.followers[2].last_caught_up_ms == 100
    assert d.events[0].kind == "follower_fetch" and d.events[0].extra["branch"] == 2


@BOTH
def test_fetch_behind_previous_fetch_leader_leo_leaves_caught_up_time_alone(
        profile: Profile) -> None:
    lead = make(profile, now=0)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 20)          # caught up at 20, leader LEO 10
    append(lead, 10, 30)
    fetch(lead, 2, 12, 40)          # 12 >= 10: caught up as of 20
    append(lead, 10, 50)
    d = fetch(lead, 2, 15, 60)      # 15 < 20 (LEO at previous fetch): no change
    f = lead.followers[2]
    assert f.last_caught_up_ms == 20
    assert (f.leo, f.last_fetch_ms, f.last_fetch_leader_leo) == (15, 60, 30)
    assert d.events[0].extra["branch"] == 0


@BOTH
def test_follower_trailing_by_one_fetch_under_constant_load_stays_in_sync(
        profile: Profile) -> None:
    lead = make(profile, lag=250)
    for t in range(0, 5000, 100):
        sent = lead.leo
        append(lead, 10, t)
        fetch(lead, 2, sent, t)     # always exactly what the previous fetch returned
        fetch(lead, 3, lead.leo, t)
        shrink(lead, t + 50)
    assert lead.isr == (1, 2, 3)
    assert lead.followers[2].leo < lead.leo


@BOTH
def test_follower_that_fetches_often_but_never_reaches_previous_leo_is_removed(
        profile: Profile) -> None:
    # X5, second part: fetching often is not enough.
    lead = make(profile, lag=1000)
    t = 0
    while 3 in lead.isr:
        append(lead, 10, t)
        fetch(lead, 2, lead.leo, t)
        fetch(lead, 3, lead.followers[3].leo + 1, t)
        shrink(lead, t)
        t += 100
    assert t - 100 == 1100          # last caught up at 0; 1100 - 0 > 1000
    assert lead.isr == (1, 2)


@BOTH
def test_fetch_records_broker_epoch_and_log_start_offset(profile: Profile) -> None:
    lead = make(profile)
    fetch(lead, 2, 0, 5, broker_epoch=7, log_start_offset=0)
    f = lead.followers[2]
    assert (f.broker_epoch, f.log_start_offset) == (7, 0)


# ------------------------------------------------------------------ shrink (I2)


@BOTH
def test_follower_exactly_lag_behind_stays_in_sync(profile: Profile) -> None:
    lead = make(profile, lag=500)
    append(lead, 3, 0)
    fetch(lead, 2, 3, 100)
    fetch(lead, 3, 3, 100)
    append(lead, 2, 200)
    d = shrink(lead, 600)
    assert lead.isr == (1, 2, 3) and d.events == []


@BOTH
def test_follower_one_ms_past_lag_leaves(profile: Profile) -> None:
    lead = make(profile, lag=500)
    append(lead, 3, 0)
    fetch(lead, 2, 3, 100)
    fetch(lead, 3, 3, 100)
    append(lead, 2, 200)
    fetch(lead, 2, 5, 601)
    shrink(lead, 601)
    assert lead.isr == (1, 2)


@BOTH
def test_leader_never_leaves_the_isr(profile: Profile) -> None:
    lead = make(profile, lag=10)
    append(lead, 5, 0)
    shrink(lead, 1_000_000)
    assert lead.isr == (1,)
    shrink(lead, 2_000_000)
    assert lead.isr == (1,)


@BOTH
def test_isr_may_shrink_below_min_isr(profile: Profile) -> None:
    lead = make(profile, lag=10, min_isr=3)
    append(lead, 1, 0)
    shrink(lead, 100)
    assert lead.isr == (1,) and lead.under_min_isr


def test_lesson_shrink_is_time_only_even_for_a_follower_at_the_leader_leo() -> None:
    lead = make(LESSON, lag=100)
    append(lead, 5, 0)
    fetch(lead, 2, 5, 10)
    fetch(lead, 3, 5, 10)
    shrink(lead, 111)               # idle partition, followers fully caught up
    assert lead.isr == (1,)


def test_kafka_follower_at_the_leader_leo_is_caught_up_however_long_ago() -> None:
    # L3 / X20: a dead follower in an idle partition is never removed by the leader.
    lead = make(KAFKA, lag=100)
    append(lead, 5, 0)
    fetch(lead, 2, 5, 10)
    fetch(lead, 3, 5, 10)
    shrink(lead, 1_000_000)
    assert lead.isr == (1, 2, 3)
    append(lead, 1, 1_000_001)      # the first new write exposes it
    shrink(lead, 1_000_002)
    assert lead.isr == (1,)


def test_kafka_follower_with_unknown_leo_after_election_gets_a_full_lag_window() -> None:
    lead = make(KAFKA, lag=100, now=1000, prime=False)
    assert lead.followers[2].leo == -1
    shrink(lead, 1100)
    assert lead.isr == (1, 2, 3)
    shrink(lead, 1101)
    assert lead.isr == (1,)


# ------------------------------------------------------------------ expand (I3)


@BOTH
def test_follower_below_hw_does_not_join(profile: Profile) -> None:
    lead = make(profile, lag=100)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 10)
    fetch(lead, 2, 10, 150)
    shrink(lead, 200)               # 3 leaves; HW = 10
    assert lead.isr == (1, 2) and lead.hw == 10
    fetch(lead, 3, 9, 210)
    assert lead.isr == (1, 2) and lead.pending is None
    assert lead.isr_join_blocker(3) == "LEO 9 < HW 10"


@BOTH
def test_follower_at_hw_joins_without_reaching_the_leader_leo(profile: Profile) -> None:
    lead = make(profile, lag=100)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 10)
    fetch(lead, 2, 10, 150)
    shrink(lead, 200)
    append(lead, 5, 205)
    fetch(lead, 3, 10, 210)
    assert lead.isr == (1, 2, 3) and lead.leo == 15


def test_kafka_expansion_needs_the_leader_epoch_start_offset() -> None:
    # X6: epoch started at 100, HW 90; 95 >= HW is not enough.
    lead = make(KAFKA, isr=[1, 2], leo=100, hw=90, prime=False)
    fetch(lead, 2, 100, 0)
    assert lead.hw == 100 and lead.epoch_start_offset == 100
    lead2 = make(KAFKA, isr=[1, 2], leo=100, hw=90, prime=False)
    fetch(lead2, 2, 95, 0)
    assert lead2.hw == 95
    d = lead2.on_follower_fetch(3, 95, 1)
    assert d.isr_proposal is None and lead2.maximal_isr == (1, 2)
    assert "epoch start offset 100" in (lead2.isr_join_blocker(3) or "")
    d = lead2.on_follower_fetch(3, 100, 2)
    assert d.isr_proposal == [1, 2, 3]


def test_lesson_expansion_needs_only_the_hw() -> None:
    lead = make(LESSON, isr=[1, 2], leo=100, hw=90)
    fetch(lead, 3, 95, 1)
    assert lead.isr == (1, 2, 3)


@BOTH
def test_ineligible_replica_does_not_join(profile: Profile) -> None:
    lead = make(profile, isr=[1, 2])
    lead.set_replica_eligibility(3, False, 4)
    fetch(lead, 3, 0, 1)
    assert lead.isr == (1, 2)
    lead.set_replica_eligibility(3, True, 4)
    fetch(lead, 3, 0, 2)
    assert lead.isr == (1, 2, 3)


@BOTH
def test_stale_incarnation_does_not_join(profile: Profile) -> None:
    # KIP-903: broker 3 fetched as incarnation 5, then restarted as 9.
    lead = make(profile, isr=[1, 2], leo=10, hw=10)
    lead.set_replica_eligibility(3, True, 5)
    fetch(lead, 3, 0, 1, broker_epoch=5)
    assert lead.is_isr_eligible(3)
    lead.set_replica_eligibility(3, True, 9)
    assert not lead.is_isr_eligible(3)
    assert "not ISR-eligible" in (lead.isr_join_blocker(3) or "")
    d = lead.on_follower_fetch(3, 10, 2, broker_epoch=5)
    assert d.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and lead.maximal_isr == (1, 2)
    fetch(lead, 3, 10, 3, broker_epoch=9)
    assert lead.isr == (1, 2, 3)


@BOTH
def test_fetch_with_a_broker_epoch_older_than_metadata_is_fenced(profile: Profile) -> None:
    # L5 / KIP-903: rejected with no state change.
    lead = make(profile, isr=[1, 2])
    lead.set_replica_eligibility(3, True, 9)
    before = lead.followers[3]
    d = lead.on_follower_fetch(3, 0, 5, broker_epoch=8)
    assert d.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert lead.followers[3] == before and lead.isr == (1, 2)
    assert d.events[0].kind == "fetch_rejected"


# ---------------------------------------------------------------------- HW (H1-H3)


@BOTH
def test_hw_is_the_minimum_leo_over_the_isr_including_the_leader(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 10, 0)
    fetch(lead, 2, 7, 1)
    assert lead.hw == 0
    fetch(lead, 3, 4, 2)
    assert lead.hw == 4
    fetch(lead, 3, 10, 3)
    assert lead.hw == 7


@BOTH
def test_hw_never_decreases(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 1)
    fetch(lead, 3, 10, 2)
    assert lead.hw == 10
    d = fetch(lead, 2, 6, 3)        # 2 truncated and fetches from lower down
    assert lead.hw == 10 and not d.hw_moved


@BOTH
def test_hw_moves_on_append_when_the_leader_is_alone(profile: Profile) -> None:
    lead = make(profile, replicas=[1])
    d = append(lead, 3, 0)
    assert d.hw_moved and (d.old_hw, d.new_hw) == (0, 3)


@BOTH
def test_hw_jumps_when_a_slow_follower_leaves(profile: Profile) -> None:
    lead = make(profile, lag=100)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 50)
    fetch(lead, 3, 2, 50)
    assert lead.hw == 2
    d = shrink(lead, 101)
    assert lead.isr == (1, 2) and d.hw_moved and (d.old_hw, d.new_hw) == (2, 10)


@BOTH
def test_replica_outside_the_isr_that_is_not_caught_up_does_not_hold_the_hw(
        profile: Profile) -> None:
    lead = make(profile, isr=[1, 2])
    append(lead, 10, 0)
    fetch(lead, 2, 10, 1)
    fetch(lead, 3, 0, 5000)          # far behind, never caught up
    append(lead, 5, 5001)
    fetch(lead, 2, 15, 5002)
    assert lead.isr == (1, 2) and lead.hw == 15


def test_kafka_unknown_follower_leo_freezes_the_hw_after_becoming_leader() -> None:
    # H3 / X9: B leads with LEO 10, follower HW 8; C has not fetched yet.
    lead = make(KAFKA, isr=[2, 3], replicas=[2, 3, 1], leo=10, hw=8, prime=False)
    assert lead.hw == 8
    append(lead, 2, 1)
    assert lead.hw == 8
    fetch(lead, 3, 10, 2)
    assert lead.hw == 10


def test_lesson_followers_start_at_the_hw_after_becoming_leader() -> None:
    lead = make(LESSON, leo=10, hw=8, prime=False)
    assert {r: f.leo for r, f in lead.followers.items()} == {2: 8, 3: 8}
    assert lead.hw == 8


def test_kafka_strict_min_isr_freezes_the_hw() -> None:
    # X2: ISR {1}, minISR 2, LEO = HW = 10; an acks=1 write stays invisible.
    lead = make(KAFKA, isr=[1], leo=10, hw=10, min_isr=2)
    d = append(lead, 1, 0)
    assert lead.leo == 11 and lead.hw == 10 and not d.hw_moved


def test_lesson_hw_moves_under_min_isr() -> None:
    lead = make(LESSON, isr=[1], leo=10, hw=10, min_isr=2)
    append(lead, 1, 0)
    assert lead.hw == 11


def test_kafka_hw_unfreezes_only_when_the_expansion_is_committed() -> None:
    # H2 edge: a pending expansion does not count for the min-ISR check.
    lead = make(KAFKA, isr=[1], leo=10, hw=10, min_isr=2, prime=False)
    fetch(lead, 2, 10, 0)
    append(lead, 2, 1)
    d = lead.on_follower_fetch(2, 12, 2)
    assert d.isr_proposal is None and lead.isr == (1, 2)  # joined at fetch 10
    lead = make(KAFKA, isr=[1], leo=10, hw=10, min_isr=2, prime=False)
    append(lead, 2, 1)
    d = lead.on_follower_fetch(2, 12, 2)
    assert d.isr_proposal == [1, 2] and lead.hw == 10
    c = commit(lead, d, 3)
    assert c is not None and c.hw_moved and lead.hw == 12


def test_kafka_caught_up_eligible_replica_outside_the_isr_holds_the_hw() -> None:
    # X19: F2 restarting, outside the ISR, trails by one fetch.
    lead = make(KAFKA, replicas=[1, 2], isr=[1], leo=100, hw=100, lag=30_000, now=0)
    fetch(lead, 2, 60, 1000)         # not caught up
    append(lead, 10, 1500)
    assert lead.hw == 110
    fetch(lead, 2, 100, 2000)        # 100 >= LEO at previous fetch: caught up as of 1000
    append(lead, 10, 2500)
    assert lead.isr == (1,) and lead.hw == 110    # held by 2, not running to 120
    d = fetch(lead, 2, 110, 3000)
    assert lead.isr == (1, 2) and d.isr_proposal == [1, 2]


def test_kafka_ineligible_caught_up_replica_does_not_hold_the_hw() -> None:
    lead = make(KAFKA, replicas=[1, 2], isr=[1], leo=100, hw=100, lag=30_000)
    fetch(lead, 2, 60, 1000)
    append(lead, 10, 1500)
    fetch(lead, 2, 100, 2000)        # caught up as of 1000, outside the ISR
    lead.set_replica_eligibility(2, False, 3)
    append(lead, 10, 2500)
    assert lead.isr == (1,) and lead.hw == 120


def test_lesson_caught_up_replica_outside_the_isr_does_not_hold_the_hw() -> None:
    lead = make(LESSON, replicas=[1, 2], isr=[1], leo=100, hw=100, lag=30_000)
    fetch(lead, 2, 60, 1000)
    append(lead, 10, 1500)
    fetch(lead, 2, 100, 2000)
    assert lead.isr == (1,)          # 100 < HW 110
    append(lead, 10, 2500)
    assert lead.hw == 120


# ------------------------------------------------------------ produce admission


@BOTH
def test_acks_all_is_refused_below_min_isr_and_nothing_changes(profile: Profile) -> None:
    lead = make(profile, isr=[1], leo=10, hw=10, min_isr=2)
    before = (lead.leo, lead.hw, lead.isr)
    assert lead.check_produce(-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (lead.leo, lead.hw, lead.isr) == before


@BOTH
def test_acks_0_and_1_are_never_refused_for_isr_size(profile: Profile) -> None:
    lead = make(profile, isr=[1], min_isr=3)
    assert lead.check_produce(0) == ErrorCode.NONE
    assert lead.check_produce(1) == ErrorCode.NONE


@BOTH
@pytest.mark.parametrize("acks", [2, -2, 3])
def test_invalid_acks_are_refused(profile: Profile, acks: int) -> None:
    assert make(profile).check_produce(acks) == ErrorCode.INVALID_REQUIRED_ACKS


def test_kafka_min_isr_is_capped_at_the_replication_factor() -> None:
    lead = make(KAFKA, replicas=[1, 2], min_isr=3)
    assert lead.effective_min_isr == 2 and lead.check_produce(-1) == ErrorCode.NONE


def test_lesson_min_isr_is_not_capped() -> None:
    lead = make(LESSON, replicas=[1, 2], min_isr=3)
    assert lead.effective_min_isr == 3
    assert lead.check_produce(-1) == ErrorCode.NOT_ENOUGH_REPLICAS


def test_kafka_admission_uses_the_committed_isr_not_the_maximal_isr() -> None:
    lead = make(KAFKA, isr=[1], min_isr=2)
    d = lead.on_follower_fetch(2, 0, 1)
    assert d.isr_proposal == [1, 2] and lead.maximal_isr == (1, 2)
    assert lead.check_produce(-1) == ErrorCode.NOT_ENOUGH_REPLICAS


# ---------------------------------------------------------------- acks=all waiters


@BOTH
def test_waiter_completes_when_the_hw_reaches_its_offset(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 3, 0)
    assert lead.add_waiter(3, "p").completed == []
    assert fetch(lead, 2, 3, 1).completed == []
    d = fetch(lead, 3, 3, 2)
    assert d.completed == [("p", ErrorCode.NONE)] and lead.waiting == 0


@BOTH
def test_waiter_completes_at_once_if_the_hw_is_already_there(profile: Profile) -> None:
    lead = make(profile, replicas=[1])
    append(lead, 3, 0)
    assert lead.add_waiter(3, "p").completed == [("p", ErrorCode.NONE)]


@BOTH
def test_waiters_complete_in_offset_order(profile: Profile) -> None:
    lead = make(profile, replicas=[1, 2])
    append(lead, 9, 0)
    for off, tok in [(9, "c"), (3, "a"), (6, "b"), (3, "a2")]:
        lead.add_waiter(off, tok)
    d = fetch(lead, 2, 6, 1)
    assert d.completed == [("a", ErrorCode.NONE), ("a2", ErrorCode.NONE), ("b", ErrorCode.NONE)]
    assert fetch(lead, 2, 9, 2).completed == [("c", ErrorCode.NONE)]


@BOTH
def test_removed_waiter_never_completes(profile: Profile) -> None:
    lead = make(profile, replicas=[1, 2])
    append(lead, 1, 0)
    lead.add_waiter(1, "gone")
    assert lead.remove_waiter("gone") is True
    assert lead.remove_waiter("gone") is False
    assert fetch(lead, 2, 1, 1).completed == []


@BOTH
def test_a_token_is_registered_once(profile: Profile) -> None:
    lead = make(profile)
    tok = object()
    lead.add_waiter(5, tok)
    with pytest.raises(ValueError):
        lead.add_waiter(6, tok)


@BOTH
def test_waiter_never_completes_ok_while_the_hw_is_below_its_offset(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 5, 0)
    lead.add_waiter(5, "p")
    fetch(lead, 2, 5, 1)
    d = fetch(lead, 3, 4, 2)
    assert lead.hw == 4 and d.completed == []


def test_lesson_waiter_fails_after_append_when_the_isr_shrank_below_min() -> None:
    lead = make(LESSON, replicas=[1, 2], min_isr=2, lag=100)
    append(lead, 1, 0)
    lead.add_waiter(1, "p")
    d = shrink(lead, 200)
    assert d.completed == [("p", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]
    assert lead.leo == 1 and lead.hw == 1   # the records stay


def test_kafka_waiter_stays_pending_when_the_isr_shrinks_below_min() -> None:
    # X3 (3.7+): the HW freezes; the driver times the produce out.
    lead = make(KAFKA, replicas=[1, 2], min_isr=2, lag=100)
    append(lead, 1, 0)
    lead.add_waiter(1, "p")
    d = shrink(lead, 200)
    assert lead.isr == (1,) and d.completed == [] and lead.hw == 0 and lead.waiting == 1
    assert lead.remove_waiter("p")


def test_kafka_after_append_error_when_the_maximal_isr_is_below_min_without_strict() -> None:
    import dataclasses
    pre37 = dataclasses.replace(KAFKA, name="kafka-pre-3.7", strict_min_isr=False)
    lead = make(pre37, replicas=[1, 2], min_isr=2, lag=100)
    append(lead, 1, 0)
    lead.add_waiter(1, "p")
    d = shrink(lead, 200)
    assert d.completed == [("p", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]


def test_kafka_pending_expansion_makes_acks_all_wait_for_the_joiner() -> None:
    # X22: maximal ISR holds the HW; a rejected expansion lets it go.
    lead = make(KAFKA, isr=[1, 2], min_isr=2)
    append(lead, 20, 0)
    fetch(lead, 2, 20, 1)
    assert lead.hw == 20
    d = lead.on_follower_fetch(3, 20, 2)
    assert d.isr_proposal == [1, 2, 3]
    append(lead, 1, 3)
    lead.add_waiter(21, "p")
    assert lead.on_follower_fetch(2, 21, 4).completed == []   # waits for 3 too
    lead.on_alter_partition_error(ErrorCode.INELIGIBLE_REPLICA, 5)
    assert lead.maximal_isr == (1, 2)
    # Still caught up and (as far as this leader knows) eligible, 3 holds the HW (H1) ...
    assert append(lead, 0, 6).completed == []
    # ... until the metadata says what the controller said: 3 is fenced.
    lead.set_replica_eligibility(3, False, -1, 7)
    d = append(lead, 0, 8)
    assert d.completed == [("p", ErrorCode.NONE)] and lead.hw == 21


@BOTH
def test_fail_all_waiters_when_leadership_is_lost(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 3, 0)
    lead.add_waiter(3, "b")
    lead.add_waiter(1, "a")
    d = lead.fail_all_waiters()
    assert d.completed == [("a", ErrorCode.NOT_LEADER_OR_FOLLOWER),
                           ("b", ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert lead.waiting == 0


# ------------------------------------------------- ISR change protocol (kafka)


def test_lesson_commits_isr_changes_at_once_and_bumps_the_partition_epoch() -> None:
    lead = make(LESSON, lag=10)
    d = lead.maybe_shrink_isr(100)
    assert d.isr_proposal is None and d.isr_changed
    assert lead.isr == (1,) and lead.pending is None and lead.partition_epoch == 1


def test_kafka_expansion_is_proposed_and_counts_at_once() -> None:
    lead = make(KAFKA, isr=[1, 2])
    append(lead, 5, 0)
    fetch(lead, 2, 5, 1)
    d = lead.on_follower_fetch(3, 5, 2)
    assert d.isr_proposal == [1, 2, 3] and not d.isr_changed
    assert lead.isr == (1, 2) and lead.maximal_isr == (1, 2, 3)
    assert lead.pending is not None and lead.pending.kind == "expand"
    assert lead.pending.isr == (1, 2, 3)
    c = lead.apply_committed_isr([1, 2, 3], 1, 3, 0)
    assert c.isr_changed and lead.isr == (1, 2, 3) and lead.pending is None
    assert lead.partition_epoch == 1 and lead.leader_epoch == 0
    assert [e.kind for e in c.events] == ["isr_expand"]


def test_kafka_shrink_counts_only_once_committed() -> None:
    # X4: the leaving replica holds the HW until the controller commits.
    lead = make(KAFKA, lag=100)
    append(lead, 10, 0)
    fetch(lead, 2, 10, 50)
    fetch(lead, 3, 2, 50)
    d = lead.maybe_shrink_isr(101)
    assert d.isr_proposal == [1, 2] and lead.pending.kind == "shrink"
    assert lead.maximal_isr == (1, 2, 3) and lead.hw == 2 and not d.hw_moved
    assert lead.check_produce(-1) == ErrorCode.NONE
    c = lead.apply_committed_isr([1, 2], 1, 102)
    assert c.hw_moved and lead.hw == 10 and lead.isr == (1, 2)


def test_kafka_only_one_isr_change_is_in_flight() -> None:
    lead = make(KAFKA, isr=[1, 2], lag=100)
    append(lead, 5, 0)
    fetch(lead, 2, 5, 1)
    assert lead.on_follower_fetch(3, 5, 2).isr_proposal == [1, 2, 3]
    assert lead.maybe_shrink_isr(500).isr_proposal is None      # 2 is lagging, but skipped
    assert lead.on_follower_fetch(3, 5, 501).isr_proposal is None
    assert lead.isr_join_blocker(3) == "an ISR expand is in flight"


def test_kafka_adopts_the_controllers_isr_even_if_it_differs() -> None:
    lead = make(KAFKA, isr=[1, 2])
    d = lead.on_follower_fetch(3, 0, 1)
    assert d.isr_proposal == [1, 2, 3]
    lead.apply_committed_isr([3, 1], 4, 2)
    assert lead.isr == (3, 1) and lead.partition_epoch == 4


@pytest.mark.parametrize("answer", [
    dict(partition_epoch=1, leader_epoch=1),      # another leader epoch
    dict(partition_epoch=-1, leader_epoch=0),     # older partition epoch
])
def test_kafka_stale_alter_partition_answers_are_ignored(answer: dict[str, int]) -> None:
    lead = make(KAFKA, isr=[1, 2])
    lead.on_follower_fetch(3, 0, 1)
    d = lead.apply_committed_isr([1, 2, 3], answer["partition_epoch"], 2,
                                 answer["leader_epoch"])
    assert lead.isr == (1, 2) and lead.pending is not None and not d.isr_changed
    assert d.events[0].kind == "isr_update_ignored"


def test_kafka_answer_without_a_pending_change_is_ignored() -> None:
    lead = make(KAFKA, isr=[1, 2])
    d = lead.apply_committed_isr([1, 2, 3], 5, 2)
    assert lead.isr == (1, 2) and lead.partition_epoch == 0
    assert d.events[0].kind == "isr_update_ignored"


@pytest.mark.parametrize("code", [ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA])
def test_kafka_rejected_alter_partition_reverts_to_the_committed_isr(code: ErrorCode) -> None:
    lead = make(KAFKA, isr=[1, 2])
    lead.on_follower_fetch(3, 0, 1)
    d = lead.on_alter_partition_error(code, 2)
    assert lead.pending is None and lead.maximal_isr == (1, 2) and d.isr_proposal is None
    assert d.events[0].kind == "isr_rejected"
    # no retry, but the next fetch may propose again
    assert lead.on_follower_fetch(3, 0, 3).isr_proposal == [1, 2, 3]


@pytest.mark.parametrize("code", [
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 100, ErrorCode.INVALID_REQUEST,
    ErrorCode.NEW_LEADER_ELECTED])
def test_kafka_alter_partition_error_that_stays_pending_until_metadata(code: ErrorCode) -> None:
    lead = make(KAFKA, isr=[1, 2])
    lead.on_follower_fetch(3, 0, 1)
    d = lead.on_alter_partition_error(code, 2)
    assert lead.pending is not None and d.isr_proposal is None
    lead.on_metadata([1, 2], 1, 0, [1, 2, 3], 3)
    assert lead.pending is None and lead.isr == (1, 2) and lead.partition_epoch == 1


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NOT_CONTROLLER,
                                  ErrorCode.REQUEST_TIMED_OUT])
def test_kafka_other_alter_partition_errors_resend_the_same_proposal(code: ErrorCode) -> None:
    lead = make(KAFKA, isr=[1, 2])
    lead.on_follower_fetch(3, 0, 1)
    d = lead.on_alter_partition_error(code, 2)
    assert d.isr_proposal == [1, 2, 3] and lead.pending is not None


def test_alter_partition_error_without_a_pending_change_does_nothing() -> None:
    lead = make(KAFKA)
    d = lead.on_alter_partition_error(ErrorCode.INELIGIBLE_REPLICA, 1)
    assert d.events == [] and d.isr_proposal is None


def test_kafka_proposal_carries_broker_epochs() -> None:
    lead = PartitionLeader("t-0", [1, 2, 3], 1, leader_epoch=0, partition_epoch=0,
                           isr=[1, 2], leo=0, hw=0, lag_max_ms=100, min_isr=1,
                           profile=KAFKA, now_ms=0, broker_epoch=11)
    lead.on_follower_fetch(2, 0, 1, broker_epoch=12)
    d = lead.on_follower_fetch(3, 0, 1, broker_epoch=13)
    assert lead.isr_with_broker_epochs(d.isr_proposal or []) == [(1, 11), (2, 12), (3, 13)]


# -------------------------------------------------------------- metadata (I7, L4)


@BOTH
def test_metadata_with_a_lower_partition_epoch_is_ignored(profile: Profile) -> None:
    lead = make(profile, partition_epoch=5)
    d = lead.on_metadata([1], 4, 0, [1, 2, 3], 1)
    assert lead.isr == (1, 2, 3) and d.events[0].kind == "isr_update_ignored"


@BOTH
def test_metadata_with_an_equal_partition_epoch_overwrites_and_discards_pending(
        profile: Profile) -> None:
    lead = make(profile, isr=[1, 2], partition_epoch=3)
    lead.on_follower_fetch(3, 0, 1)
    d = lead.on_metadata([1], lead.partition_epoch, 0, [1, 2, 3], 2)
    assert lead.isr == (1,) and lead.pending is None and d.isr_changed


@BOTH
def test_same_epoch_metadata_keeps_follower_state(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 5, 0)
    fetch(lead, 2, 5, 10)
    before = lead.followers[2]
    lead.on_metadata([1, 2, 3], 1, 0, [1, 2, 3], 20)
    assert lead.followers[2] == before and lead.epoch_start_offset == 0


@BOTH
def test_reelection_keeps_follower_leos_and_resets_times(profile: Profile) -> None:
    # L4, re-elected: a new leader epoch for the same broker.
    lead = make(profile, isr=[1, 2])
    append(lead, 5, 0)
    fetch(lead, 2, 5, 10, broker_epoch=4)
    fetch(lead, 3, 3, 10)
    lead.on_metadata([1, 2], 1, 1, [1, 2, 3], 50)
    assert lead.leader_epoch == 1 and lead.epoch_start_offset == 5
    assert lead.followers[2] == FollowerState(5, 50, 50, 5, 4, -1)
    assert lead.followers[3] == FollowerState(3, None, None, 5, -1, -1)


@BOTH
def test_metadata_reassignment_adds_unknown_followers_and_drops_removed_ones(
        profile: Profile) -> None:
    lead = make(profile)
    lead.on_metadata([1, 2], 1, 0, [1, 2, 4], 5)
    assert set(lead.followers) == {2, 4} and lead.followers[4].leo == -1
    assert lead.replicas == (1, 2, 4)


@BOTH
def test_metadata_shrink_moves_the_hw_and_completes_waiters(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 4, 0)
    fetch(lead, 2, 4, 1)
    lead.add_waiter(4, "p")
    # late enough that 3 no longer counts as caught up (kafka's H1 would hold it)
    d = lead.on_metadata([1, 2], 1, 0, [1, 2, 3], 500)
    assert d.hw_moved and d.completed == [("p", ErrorCode.NONE)]


@BOTH
def test_metadata_that_drops_the_leader_is_a_programming_error(profile: Profile) -> None:
    lead = make(profile)
    with pytest.raises(ValueError):
        lead.on_metadata([2, 3], 1, 0, [1, 2, 3], 1)
    with pytest.raises(ValueError):
        lead.on_metadata([1], 1, 0, [2, 3], 1)


# -------------------------------------------------------------------- fetch errors


@BOTH
def test_fetch_from_an_unknown_replica_is_rejected_without_state_change(
        profile: Profile) -> None:
    lead = make(profile)
    d = lead.on_follower_fetch(9, 0, 1)
    assert d.error == ErrorCode.UNKNOWN_LEADER_EPOCH
    d = lead.on_follower_fetch(9, 0, 1, has_leader_epoch=False)
    assert d.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert lead.on_follower_fetch(1, 0, 1).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert set(lead.followers) == {2, 3}


@BOTH
@pytest.mark.parametrize("offset", [-1, 6])
def test_fetch_outside_the_log_is_out_of_range_and_changes_nothing(
        profile: Profile, offset: int) -> None:
    lead = make(profile)
    append(lead, 5, 0)
    before = dict(lead.followers)
    d = lead.on_follower_fetch(2, offset, 1)
    assert d.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert dict(lead.followers) == before


# ------------------------------------------------------------------------ events


@BOTH
def test_every_transition_is_an_event_with_a_reason(profile: Profile) -> None:
    events: list[Event] = []
    lead = make(profile, lag=100, events=events)
    append(lead, 4, 0)
    fetch(lead, 2, 4, 150)
    d = shrink(lead, 200)
    kinds = [e.kind for e in d.events]
    assert "isr_shrink" in kinds and "hw_move" in kinds
    for e in events:
        assert e.partition == "t-0" and e.reason
    shrink_ev = next(e for e in events if e.kind == "isr_shrink")
    assert (shrink_ev.before, shrink_ev.after, shrink_ev.time_ms) == ([1, 2, 3], [1, 2], 200)
    hw_ev = next(e for e in d.events if e.kind == "hw_move")
    assert (hw_ev.before, hw_ev.after) == (0, 4)
    assert events[0].kind == "became_leader"
    assert all(e in events for e in d.events)


@BOTH
def test_decision_reports_no_change_for_a_quiet_event(profile: Profile) -> None:
    lead = make(profile)
    d = lead.maybe_shrink_isr(1)
    assert (d.hw_moved, d.isr_changed, d.isr_proposal, d.completed, d.events) == \
        (False, False, None, [], [])


# ------------------------------------------------------------------- construction


@pytest.mark.parametrize("kw", [
    dict(isr=[2, 3]),                       # leader missing
    dict(isr=[1, 4]),                       # not a replica
    dict(replicas=[1, 1, 2]),
    dict(leo=3, hw=4),
    dict(hw=2, leo=5, log_start_offset=3),
    dict(min_isr=0),
    dict(lag_max_ms=-1),
])
def test_constructor_rejects_inconsistent_state(kw: dict[str, Any]) -> None:
    args: dict[str, Any] = dict(replicas=[1, 2, 3], isr=[1, 2, 3], leo=5, hw=2,
                                log_start_offset=0, min_isr=1, lag_max_ms=10)
    args.update(kw)
    with pytest.raises(ValueError):
        PartitionLeader("t-0", args.pop("replicas"), 1, leader_epoch=0, partition_epoch=0,
                        profile=LESSON, now_ms=0, **args)


@BOTH
def test_append_cannot_move_the_leo_back(profile: Profile) -> None:
    lead = make(profile, leo=5, hw=5)
    with pytest.raises(ValueError):
        lead.on_append(4, 1)


@BOTH
def test_timed_out_waiters_do_not_pile_up_while_the_hw_is_stuck(profile: Profile) -> None:
    lead = make(profile)
    append(lead, 1, 0)
    tokens = [object() for _ in range(1000)]
    for i, tok in enumerate(tokens):
        lead.add_waiter(1, tok)
        if i:
            assert lead.remove_waiter(tokens[i - 1])
    assert lead.waiting == 1 and len(lead._waiters) <= 2 + 64 + 1
    fetch(lead, 2, 1, 1)
    assert fetch(lead, 3, 1, 2).completed == [(tokens[-1], ErrorCode.NONE)]


def test_a_rejoining_replica_is_appended_to_the_isr_as_kafka_keeps_it() -> None:
    lead = make(KAFKA, [2, 0, 1], isr=[2, 1])
    d = lead.on_follower_fetch(0, 0, 1)
    assert d.isr_proposal == [2, 1, 0]
    lead.apply_committed_isr([2, 1, 0], 1, 2)
    assert lead.isr == (2, 1, 0)


def test_a_min_isr_config_change_applies_to_the_next_check_at_once() -> None:
    events: list[Event] = []
    lead = make(KAFKA, isr=[1, 2], min_isr=2, events=events)
    assert not lead.under_min_isr
    d = lead.on_min_isr_changed(3, 5)
    assert lead.min_isr == 3 and lead.under_min_isr
    assert [(e.kind, e.before, e.after) for e in d.events] == [("min_isr_changed", 2, 3)]
    assert lead.on_min_isr_changed(3, 6).events == []
    with pytest.raises(ValueError):
        lead.on_min_isr_changed(0, 7)


@BOTH
def test_a_fetch_below_a_log_start_moved_by_retention_is_out_of_range_and_not_recorded(profile):
    lead = make(profile, leo=10, hw=10)
    assert lead.fetch_offset_error(0) == ErrorCode.NONE and lead.fetch_offset_error(11) == ErrorCode.OFFSET_OUT_OF_RANGE
    lead.on_log_start_offset(4)
    before = lead.followers[2]
    assert lead.fetch_offset_error(3) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert lead.on_follower_fetch(2, 3, 5).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert lead.followers[2] == before and lead.log_start_offset == 4
    lead.on_log_start_offset(2)                      # never backwards
    assert lead.log_start_offset == 4
    with pytest.raises(ValueError):
        lead.on_log_start_offset(11)


@BOTH
def test_the_leaders_own_broker_epoch_in_an_isr_proposal_is_the_current_registration(profile):
    lead = make(profile)
    assert lead.isr_with_broker_epochs([1, 2], 42)[0] == (1, 42)
    assert lead.isr_with_broker_epochs([1, 2])[0] == (1, lead.broker_epoch)


def test_lowering_min_isr_at_runtime_releases_a_frozen_hw() -> None:
    lead = make(KAFKA, isr=[1], leo=10, hw=10, min_isr=2)
    append(lead, 1, 0)
    assert lead.hw == 10                                   # frozen: ISR 1 < min ISR 2 (X2)
    d = lead.on_min_isr_changed(1, 5)
    assert d.hw_moved and lead.hw == 11


def _quiet_leader() -> PartitionLeader:
    lead = PartitionLeader("t-0", [1, 2, 3], 1, leader_epoch=0, partition_epoch=0, isr=[1, 2, 3], leo=10, hw=0,
                           lag_max_ms=1000, min_isr=2, profile=KAFKA, now_ms=0, routine_events=False)
    for r in (2, 3):
        lead.on_follower_fetch(r, 10, 100, broker_epoch=7, log_start_offset=0)
    return lead


def test_a_refetch_at_the_leo_in_the_isr_changes_what_a_fetch_would() -> None:
    """on_follower_refetch (a session Fetch that does not name the partition) takes the
    fast path only where on_follower_fetch would just refresh the fetch times."""
    import copy
    lead = _quiet_leader()
    twin = copy.deepcopy(lead)
    assert lead.on_follower_refetch(2, 10, 600, broker_epoch=7, log_start_offset=0)
    d = twin.on_follower_fetch(2, 10, 600, broker_epoch=7, log_start_offset=0)
    assert d.error == ErrorCode.NONE and not d.hw_moved and d.isr_proposal is None and not d.completed
    assert lead.followers == twin.followers and lead.hw == twin.hw and lead.isr == twin.isr


@pytest.mark.parametrize("case", ["behind", "other_offset", "new_broker_epoch", "new_log_start", "out_of_isr",
                                  "routine_events"])
def test_a_refetch_leaves_everything_else_to_the_fetch_rule(case: str) -> None:
    lead = _quiet_leader()
    offset, epoch, start = 10, 7, 0
    if case == "behind":
        lead.on_append(12, 200)
    elif case == "other_offset":
        offset = 9
    elif case == "new_broker_epoch":
        epoch = 8
    elif case == "new_log_start":
        start = 5
    elif case == "out_of_isr":
        lead = PartitionLeader("t-0", [1, 2, 3], 1, leader_epoch=0, partition_epoch=0, isr=[1, 3], leo=10, hw=0,
                               lag_max_ms=1000, min_isr=2, profile=KAFKA, now_ms=0, routine_events=False)
        lead.on_follower_fetch(3, 10, 100, broker_epoch=7, log_start_offset=0)
        lead.on_follower_fetch(2, 10, 100, broker_epoch=7, log_start_offset=0)
    else:
        lead = PartitionLeader("t-0", [1, 2, 3], 1, leader_epoch=0, partition_epoch=0, isr=[1, 2, 3], leo=10,
                               hw=0, lag_max_ms=1000, min_isr=2, profile=KAFKA, now_ms=0)
        lead.on_follower_fetch(2, 10, 100, broker_epoch=7, log_start_offset=0)
    before = dict(lead.followers)
    assert not lead.on_follower_refetch(2, offset, 600, broker_epoch=epoch, log_start_offset=start)
    assert dict(lead.followers) == before


@BOTH
def test_the_low_watermark_is_the_smallest_log_start_of_the_leader_and_its_alive_followers(profile: Profile) -> None:
    """Kafka's lowWatermarkIfLeader (what DeleteRecords waits for): a follower that has not reported its log
    start counts as below any offset; a follower whose broker is not alive does not count."""
    lead = make(profile, leo=10, hw=10, prime=False)
    lead.on_log_start_offset(6)
    assert lead.low_watermark(lambda r: True) < 0                      # neither follower has reported
    fetch(lead, 2, 10, 1, log_start_offset=6)
    fetch(lead, 3, 10, 1, log_start_offset=4)
    assert lead.low_watermark(lambda r: True) == 4
    assert lead.low_watermark(lambda r: r != 3) == 6
    fetch(lead, 3, 10, 2, log_start_offset=8)
    assert lead.low_watermark(lambda r: True) == 6                     # never above the leader's own
