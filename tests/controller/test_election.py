from minibroker.controller.election import Election, build_partition_change
from minibroker.metadata import NO_LEADER, RECOVERED, RECOVERING, PartitionRecord


def part(replicas=(1, 2, 3), isr=None, leader=None, le=5, pe=7, elr=(), lkelr=(), lrs=RECOVERED):
    isr = tuple(replicas) if isr is None else tuple(isr)
    leader = (isr[0] if isr else NO_LEADER) if leader is None else leader
    return PartitionRecord("t", 0, tuple(replicas), isr, leader, le, pe, tuple(elr), tuple(lkelr), lrs)


def live(*ids):
    return lambda r: r in ids


def build(p, acceptable, **kw):
    kw.setdefault("min_isr", 1)
    kw.setdefault("elr_enabled", False)
    return build_partition_change(p, acceptable=acceptable, **kw)


def test_valid_current_leader_is_kept_and_isr_only_change_keeps_leader_epoch():
    c = build(part(leader=2, isr=(2, 1, 3)), live(1, 2, 3), target_isr=[2, 1])
    assert c.after.leader == 2 and c.after.isr == (2, 1)
    assert c.after.leader_epoch == 5 and c.after.partition_epoch == 8
    assert not c.leader_changed


def test_new_leader_is_first_in_assignment_order_that_is_in_isr_not_first_in_isr_order():
    p = part(replicas=(3, 1, 2), isr=(2, 1, 3), leader=3)
    c = build(p, live(1, 2), target_isr=[2, 1])
    assert c.after.leader == 1
    assert c.after.leader_epoch == 6 and c.after.partition_epoch == 8 and c.how == "clean"


def test_unacceptable_isr_members_are_skipped():
    p = part(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1)
    c = build(p, live(3), target_isr=[2, 3])
    assert c.after.leader == 3


def test_removing_last_isr_member_without_elr_keeps_isr_and_goes_leaderless():
    p = part(replicas=(1, 2), isr=(1,), leader=1)
    c = build(p, live(2), target_isr=[])
    assert c.after.isr == (1,) and c.after.leader == NO_LEADER
    assert c.after.leader_epoch == 6 and c.after.partition_epoch == 8


def test_no_op_change_produces_nothing():
    assert build(part(), live(1, 2, 3)) is None
    p = part(replicas=(1, 2), isr=(1,), leader=NO_LEADER)
    assert build(p, live(2), target_isr=[1]) is None


def test_unclean_election_forces_isr_to_leader_and_recovering():
    p = part(replicas=(1, 2), isr=(1,), leader=1)
    c = build(p, live(2), target_isr=[], election=Election.UNCLEAN)
    assert c.after.leader == 2 and c.after.isr == (2,)
    assert c.after.leader_recovery_state == RECOVERING and c.unclean
    assert c.after.leader_epoch == 6


def test_unclean_election_prefers_a_clean_leader_when_one_exists():
    p = part(replicas=(1, 2, 3), isr=(1, 3), leader=1)
    c = build(p, live(2, 3), target_isr=[3], election=Election.UNCLEAN)
    assert c.after.leader == 3 and not c.unclean and c.after.leader_recovery_state == RECOVERED


def test_preferred_election_picks_replica_zero_when_in_isr_and_live():
    p = part(replicas=(2, 1, 3), isr=(1, 3, 2), leader=1)
    c = build(p, live(1, 2, 3), election=Election.PREFERRED)
    assert c.after.leader == 2 and c.after.isr == (1, 3, 2) and c.after.leader_epoch == 6


def test_preferred_election_keeps_valid_leader_when_preferred_is_not_in_isr():
    p = part(replicas=(2, 1, 3), isr=(1, 3), leader=1)
    assert build(p, live(1, 2, 3), election=Election.PREFERRED) is None


def test_target_recovery_state_is_adopted():
    p = part(replicas=(1, 2), isr=(1,), lrs=RECOVERING)
    c = build(p, live(1, 2), target_isr=[1, 2], target_recovery_state=RECOVERED)
    assert c.after.leader_recovery_state == RECOVERED and c.after.isr == (1, 2)
    assert c.after.leader_epoch == 5


# -- ELR (C9) -----------------------------------------------------------------

def test_elr_collects_removed_isr_members_while_isr_is_below_min_isr():
    p = part(isr=(1, 2), leader=1)
    c = build(p, live(1, 3), target_isr=[1], elr_enabled=True, min_isr=2)
    assert c.after.isr == (1,) and c.after.elr == (2,) and c.after.leader == 1


def test_elr_is_cleared_when_isr_reaches_min_isr():
    p = part(isr=(1,), elr=(2,), leader=1)
    c = build(p, live(1, 2), target_isr=[1, 2], elr_enabled=True, min_isr=2)
    assert c.after.elr == () and c.after.isr == (1, 2)


def test_with_elr_the_isr_may_become_empty_and_last_leader_is_remembered():
    p = part(isr=(1,), elr=(2,), leader=1)
    c = build(p, live(), target_isr=[], elr_enabled=True, min_isr=2)
    assert c.after.isr == () and c.after.elr == (1, 2)
    assert c.after.leader == NO_LEADER and c.after.last_known_elr == (1,)


def test_leader_from_elr_becomes_sole_isr_member_and_leaves_elr():
    p = part(isr=(), elr=(1, 2), leader=NO_LEADER, lkelr=(1,))
    c = build(p, live(2), elr_enabled=True, min_isr=2)
    assert c.after.leader == 2 and c.after.isr == (2,) and c.after.elr == (1,)
    assert c.after.last_known_elr == () and c.how == "elr" and not c.unclean


def test_uncleanly_shut_down_replica_leaves_elr():
    p = part(isr=(), elr=(1, 2), leader=NO_LEADER, lkelr=(1,))
    c = build(p, live(), elr_enabled=True, min_isr=2, unclean_shutdown=[2])
    assert c.after.elr == (1,) and c.after.leader == NO_LEADER


def test_last_known_leader_is_elected_uncleanly_when_isr_and_elr_are_empty():
    p = part(isr=(), elr=(), leader=NO_LEADER, lkelr=(1,))
    c = build(p, live(1), elr_enabled=True, min_isr=2)
    assert c.after.leader == 1 and c.after.isr == (1,) and c.how == "last_known_leader"
    assert c.after.leader_recovery_state == RECOVERING


def test_last_known_leader_must_be_acceptable():
    p = part(isr=(), elr=(), leader=NO_LEADER, lkelr=(1,))
    assert build(p, live(), elr_enabled=True, min_isr=2) is None


def test_unclean_election_clears_elr():
    p = part(replicas=(1, 2, 3), isr=(), elr=(1,), leader=NO_LEADER, lkelr=(1,))
    c = build(p, live(3), elr_enabled=True, min_isr=2, election=Election.UNCLEAN)
    assert c.after.leader == 3 and c.after.isr == (3,) and c.after.elr == ()
    assert c.after.leader_recovery_state == RECOVERING


def test_elr_fields_are_cleared_when_elr_is_disabled():
    p = part(isr=(1,), elr=(2,), lkelr=(3,), leader=1)
    c = build(p, live(1), elr_enabled=False)
    assert c.after.elr == () and c.after.last_known_elr == ()
