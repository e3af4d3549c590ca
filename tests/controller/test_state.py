from dataclasses import replace

import pytest

from minibroker.controller.state import ControllerState
from minibroker.errors import ErrorCode
from minibroker.metadata import NO_LEADER, RECOVERED, RECOVERING, BrokerRecord, PartitionRecord, TopicRecord

from .harness import SESSION_MS, Harness

# -- registration, broker epochs, unfencing ----------------------------------------------


def test_broker_epoch_is_the_offset_of_its_registration_record_and_grows_per_incarnation():
    h = Harness()
    first = h.register(1)
    (off, rec), = first.records
    assert isinstance(rec, BrokerRecord) and rec.fenced and first.response["broker_epoch"] == off == rec.broker_epoch
    h.register(2)
    again = h.register(1, incarnation="another")
    assert again.response["broker_epoch"] > first.response["broker_epoch"]
    assert [e.kind for e in again.events] == ["broker_registered"]


def test_same_incarnation_registering_again_keeps_its_epoch_and_writes_nothing():
    h = Harness()
    a = h.register(1, incarnation="x")
    b = h.register(1, incarnation="x")
    assert b.response["broker_epoch"] == a.response["broker_epoch"] and b.records == []


def test_fenced_broker_is_unfenced_only_once_caught_up_to_its_registration_record():
    h = Harness()
    h.register(1)
    reg = h.epochs[1]
    resp = h.heartbeat(1, offset=reg - 1).response
    assert resp["is_fenced"] and not resp["is_caught_up"]
    out = h.heartbeat(1, offset=reg)
    assert out.response == {"error": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}
    assert [e.kind for e in out.events] == ["unfenced"]
    assert not h.state.cluster.brokers[1].fenced


def test_want_fence_keeps_a_caught_up_broker_fenced():
    h = Harness()
    h.register(1)
    assert h.heartbeat(1, want_fence=True).response["is_fenced"]


def test_heartbeat_with_old_broker_epoch_is_stale_broker_epoch():
    h = Harness()
    h.register(1)
    old = h.epochs[1]
    h.register(1, incarnation="new")
    resp = h.heartbeat(1, epoch=old).response
    assert resp["error"] == ErrorCode.STALE_BROKER_EPOCH
    assert h.state.heartbeat(h.now, 9, 0, 0).response["error"] == ErrorCode.STALE_BROKER_EPOCH


def test_registration_of_negative_broker_id_is_invalid_request():
    h = Harness()
    assert h.register(-1).response["error"] == ErrorCode.INVALID_REQUEST


# -- liveness and fencing (C1, C2) ------------------------------------------------------


def test_broker_silent_past_session_timeout_is_fenced_with_a_reason():
    h = Harness()
    h.start(1, 2)
    h.advance(SESSION_MS)
    h.heartbeat(1)
    assert h.tick() == []
    h.advance(12)
    h.heartbeat(1)
    outs = h.tick()
    assert h.state.cluster.brokers[2].fenced and not h.state.cluster.brokers[1].fenced
    (ev,) = [e for o in outs for e in o.events if e.kind == "fenced"]
    assert ev.reason == (f"broker 2 fenced: no heartbeat for {SESSION_MS + 12} ms "
                         f"(broker.session.timeout.ms={SESSION_MS})")


def test_a_liveness_gap_of_the_controller_itself_restarts_sessions_instead_of_fencing():
    h = Harness()
    h.start(1, 2)
    h.advance(SESSION_MS + 500)                  # the controller was frozen: nobody could reach it
    out = h.state.on_liveness_gap(h.now, SESSION_MS + 500)
    assert [e.kind for e in out.events] == ["controller_resumed"] and out.records == []
    assert h.tick() == []
    assert not h.state.cluster.brokers[1].fenced and not h.state.cluster.brokers[2].fenced
    h.advance(SESSION_MS + 1)                    # silence after the resume still fences
    h.heartbeat(1)
    h.tick()
    assert h.state.cluster.brokers[2].fenced and not h.state.cluster.brokers[1].fenced


def test_a_tick_that_raises_hands_every_applied_record_to_take_partial():
    """The driver's timer calls `tick`; should a periodic task raise (a bug) after a fencing was
    applied, `take_partial` still returns that fencing's records so the driver persists them."""
    h = Harness()
    h.start(1, 2)
    h.advance(SESSION_MS + 12)
    h.heartbeat(1)

    def broken(now_ms):
        raise RuntimeError("bug")
    h.state.due_periodic_tasks = lambda now_ms: [broken]
    with pytest.raises(RuntimeError):
        h.state.tick(h.now)
    partial = h.state.take_partial()
    assert h.state.cluster.brokers[2].fenced
    assert [e.kind for e in partial.events if e.kind == "fenced"] == ["fenced"] and partial.records
    assert h.state.take_partial().records == []


def test_only_one_stale_broker_is_fenced_per_check_oldest_first():
    h = Harness()
    h.start(1, 2, 3)
    h.advance(10)
    h.heartbeat(3)
    h.advance(SESSION_MS - 5)
    first = h.state.maybe_fence_one_stale_broker(h.now)
    assert [e.extra["broker_id"] for e in first.events if e.kind == "fenced"] == [1]
    second = h.state.maybe_fence_one_stale_broker(h.now)
    assert [e.extra["broker_id"] for e in second.events if e.kind == "fenced"] == [2]
    assert h.state.maybe_fence_one_stale_broker(h.now) is None


def test_fencing_removes_broker_from_every_isr_and_reelects_where_it_led():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[2, 1, 3], [1, 2, 3]])
    h.advance(SESSION_MS + 1)
    h.beat_all(2)
    h.tick()
    p0, p1 = h.p("t", 0), h.p("t", 1)
    assert p0.isr == (1, 3) and p0.leader == 1 and (p0.leader_epoch, p0.partition_epoch) == (1, 1)
    assert p1.isr == (1, 3) and p1.leader == 1 and (p1.leader_epoch, p1.partition_epoch) == (0, 1)
    assert p0.reason.startswith("broker 2 fenced: no heartbeat")
    kinds = [e.kind for e in h.events() if e.partition == "t-0"]
    assert "election" in kinds and "isr_shrink" in kinds


def test_last_isr_member_fenced_leaves_isr_unchanged_and_partition_offline():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    p = h.p()
    assert p.isr == (1,) and p.leader == NO_LEADER and p.leader_epoch == 1
    off = [e for e in h.events("offline") if e.partition == "t-0"]
    assert off and off[0].before == 1


def test_unfencing_reelects_leaderless_partitions_with_the_returning_broker():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    assert h.p().leader == NO_LEADER
    h.heartbeat(1)
    p = h.p()
    assert p.leader == 1 and p.isr == (1,) and p.leader_epoch == 2


# -- X10: unclean election ------------------------------------------------------------------


def test_x10_unclean_off_fencing_sole_isr_member_goes_offline():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    p = h.p()
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (1,), 1)


def test_x10_unclean_on_elects_out_of_sync_replica_recovering():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]], configs={"unclean.leader.election.enable": "true"})
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    p = h.p()
    assert (p.leader, p.isr, p.leader_recovery_state, p.leader_epoch) == (2, (2,), RECOVERING, 1)
    (ev,) = [e for e in h.events("election") if e.partition == "t-0"]
    assert ev.extra["unclean"] is True
    # The new leader's first ISR expansion carries RECOVERED.
    h.heartbeat(1)
    r = h.alter(2, [2, 1], lrs=RECOVERED)
    assert r["error"] == 0 and r["isr"] == [2, 1] and r["leader_recovery_state"] == RECOVERED


def test_periodic_unclean_check_elects_leaderless_partition_once_topic_allows_it():
    h = Harness(unclean_leader_election_interval_ms=1000)
    h.start(1, 2)
    h.create("t", [[1, 2]])
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    assert h.p().leader == NO_LEADER
    h.state.topics.topics["t"] = TopicRecord("t", "id", 1, {"unclean.leader.election.enable": "true"})
    h.advance(1000)
    h.beat_all(1)
    h.tick()
    assert h.p().leader == 2 and h.p().leader_recovery_state == RECOVERING


def test_unclean_election_on_request_and_its_errors():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    r = h.state.elect_leaders(h.now, 1, [{"topic": "t", "partitions": [0]}]).response
    assert r["results"][0]["partitions"][0]["error"] == ErrorCode.ELECTION_NOT_NEEDED
    h.alter(1, [1])
    h.advance(SESSION_MS + 1)
    h.beat_all(1)
    h.tick()
    r = h.state.elect_leaders(h.now, 1, [{"topic": "t", "partitions": [0]}]).response
    assert r["results"][0]["partitions"][0]["error"] == 0
    assert h.p().leader == 2 and h.p().isr == (2,)


# -- X11: fencing and preferred re-election -------------------------------------------------


def test_x11_fencing_preferred_leader_then_auto_rebalance_restores_it():
    h = Harness(leader_imbalance_check_interval_ms=300_000)
    h.start(1, 2, 3)
    h.create("t", [[2, 1, 3]])
    h.tick()
    h.advance(SESSION_MS + 1)
    h.beat_all(2)
    h.tick()
    p = h.p()
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1, 3), 1, 1, 1)
    # Broker 2 restarts (clean shutdown not recorded: it crashed) and catches up.
    h.register(2, prev=-1)
    h.heartbeat(2)
    assert not h.state.cluster.brokers[2].fenced and h.p().leader == 1
    assert h.alter(1, [1, 3, 2])["isr"] == [1, 3, 2]
    h.advance(300_000)
    h.beat_all()
    h.tick()
    p = h.p()
    assert (p.leader, p.isr, p.leader_epoch) == (2, (1, 3, 2), 2)
    assert p.reason == "preferred election (auto leader rebalance)"


def test_auto_rebalance_is_off_when_disabled():
    h = Harness(auto_leader_rebalance_enable=False, leader_imbalance_check_interval_ms=1000)
    h.start(1, 2)
    h.create("t", [[2, 1]])
    h.tick()
    h.heartbeat(1, want_fence=True)
    h.heartbeat(1)
    assert h.p().leader == 2
    h.alter(2, [2, 1])
    h.heartbeat(2, want_fence=True)
    assert h.p().leader == 1
    h.heartbeat(2)
    h.advance(5000)
    h.beat_all()
    h.tick()
    assert h.p().leader == 1


def test_preferred_election_on_request_answers_not_needed_not_available_or_elects():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[2, 1]])
    req = [{"topic": "t", "partitions": [0, 5]}]
    r = h.state.elect_leaders(h.now, 0, req).response["results"][0]["partitions"]
    assert [x["error"] for x in r] == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    h.heartbeat(2, want_fence=True)
    assert h.p().leader == 1
    r = h.state.elect_leaders(h.now, 0, req).response["results"][0]["partitions"]
    assert r[0]["error"] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    h.heartbeat(2)
    h.alter(1, [1, 2])
    out = h.state.elect_leaders(h.now, 0, req)
    assert out.response["results"][0]["partitions"][0]["error"] == 0 and h.p().leader == 2
    assert h.p().reason == "preferred election (requested)"


def test_elect_all_partitions_omits_those_not_needing_election():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2], [2, 1]])
    r = h.state.elect_leaders(h.now, 0, None).response
    assert r["results"] == [{"topic": "t", "partitions": []}]
    assert h.state.elect_leaders(h.now, 7, None).response["error"] == ErrorCode.INVALID_REQUEST


# -- X12: ELR lifecycle ----------------------------------------------------------------------


def _elr_cluster() -> Harness:
    h = Harness(elr_enabled=True)
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]], configs={"min.insync.replicas": "2"})
    return h


def _fence(h: Harness, b: int) -> None:
    h.heartbeat(b, want_fence=True)


def test_x12_elr_lifecycle():
    h = _elr_cluster()
    _fence(h, 3)
    p = h.p()
    assert (p.isr, p.elr) == ((1, 2), ())
    _fence(h, 2)
    p = h.p()
    assert (p.isr, p.elr, p.leader) == ((1,), (2,), 1)
    _fence(h, 1)
    p = h.p()
    assert (p.isr, p.elr, p.leader, p.last_known_elr) == ((), (1, 2), NO_LEADER, (1,))
    h.heartbeat(2)
    p = h.p()
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, (2,), (1,), ())


def test_x12_broker_reregistering_after_unclean_shutdown_leaves_elr_and_cannot_lead():
    h = _elr_cluster()
    for b in (3, 2, 1):
        _fence(h, b)
    h.register(2, prev=-1)
    assert h.p().elr == (1,)
    h.heartbeat(2)
    assert h.p().leader == NO_LEADER


def test_broker_reregistering_after_clean_shutdown_stays_in_elr():
    h = _elr_cluster()
    for b in (3, 2, 1):
        _fence(h, b)
    h.register(2, prev=h.epochs[2])
    assert h.p().elr == (1, 2)
    h.heartbeat(2)
    assert h.p().leader == 2


def test_elr_is_recomputed_on_alter_partition_and_cleared_at_min_isr():
    h = _elr_cluster()
    r = h.alter(1, [1])
    assert r["error"] == 0 and h.p().elr == (2, 3)
    r = h.alter(1, [1, 2])
    assert r["error"] == 0 and h.p().elr == ()


# -- AlterPartition validation order (C6) --------------------------------------------------


def _ap_cluster() -> Harness:
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]])
    return h


def test_alter_partition_with_stale_broker_epoch_fails_whole_request():
    h = _ap_cluster()
    assert h.alter(1, [1, 2], broker_epoch=h.epochs[1] - 1)["error"] == ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_unknown_topic_or_partition():
    h = _ap_cluster()
    out = h.state.alter_partition(h.now, 1, h.epochs[1], [
        {"topic": "nope", "partitions": [{"partition": 0, "leader_epoch": 0, "partition_epoch": 0,
                                          "new_isr_with_epochs": [], "leader_recovery_state": 0}]},
        {"topic": "t", "partitions": [{"partition": 9, "leader_epoch": 0, "partition_epoch": 0,
                                       "new_isr_with_epochs": [], "leader_recovery_state": 0}]}])
    assert [t["partitions"][0]["error"] for t in out.response["topics"]] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2


def test_alter_partition_newer_epochs_than_controller_are_not_controller():
    h = _ap_cluster()
    assert h.alter(1, [1, 2], le=1)["error"] == ErrorCode.NOT_CONTROLLER
    assert h.alter(1, [1, 2], pe=1)["error"] == ErrorCode.NOT_CONTROLLER


def test_alter_partition_old_leader_epoch_beats_wrong_requester():
    h = _ap_cluster()
    h.heartbeat(1, want_fence=True)   # leader moves to 2, leader epoch 1
    assert h.alter(1, [1, 2], le=0, pe=1)["error"] == ErrorCode.FENCED_LEADER_EPOCH
    assert h.alter(3, [2, 3])["error"] == ErrorCode.INVALID_REQUEST


def test_alter_partition_wrong_requester_is_checked_before_partition_epoch():
    h = _ap_cluster()
    h.alter(1, [1, 2])
    assert h.alter(2, [1, 2], pe=0)["error"] == ErrorCode.INVALID_REQUEST
    assert h.alter(1, [1], pe=0)["error"] == ErrorCode.INVALID_UPDATE_VERSION


def test_alter_partition_isr_must_be_duplicate_free_subset_of_replicas_containing_leader():
    h = _ap_cluster()
    assert h.alter(1, [1, 4])["error"] == ErrorCode.INVALID_REQUEST
    assert h.alter(1, [1, 1])["error"] == ErrorCode.INVALID_REQUEST
    assert h.alter(1, [2, 3])["error"] == ErrorCode.INVALID_REQUEST


def test_alter_partition_recovering_rules():
    h = _ap_cluster()
    assert h.alter(1, [1], lrs=RECOVERING)["error"] == ErrorCode.INVALID_REQUEST   # RECOVERED -> RECOVERING
    h2 = Harness()
    h2.start(1, 2)
    h2.create("t", [[1, 2]], configs={"unclean.leader.election.enable": "true"})
    h2.alter(1, [1])
    h2.heartbeat(1, want_fence=True)
    assert h2.p().leader_recovery_state == RECOVERING
    h2.heartbeat(1)
    assert h2.alter(2, [2, 1], lrs=RECOVERING)["error"] == ErrorCode.INVALID_REQUEST
    assert h2.alter(2, [2], lrs=RECOVERING)["error"] == 0


def test_alter_partition_ineligible_replicas():
    h = _ap_cluster()
    h.alter(1, [1, 2])
    h.heartbeat(3, want_fence=True)
    assert h.alter(1, [1, 2, 3])["error"] == ErrorCode.INELIGIBLE_REPLICA
    h.heartbeat(3)
    assert h.alter(1, [1, 2, 3], epochs={3: h.epochs[3] + 100})["error"] == ErrorCode.INELIGIBLE_REPLICA
    r = h.alter(1, [1, 2, 3], epochs={3: -1})
    assert r["error"] == 0 and r["isr"] == [1, 2, 3]


def test_alter_partition_isr_shrink_bumps_partition_epoch_only_and_returns_state():
    h = _ap_cluster()
    r = h.alter(1, [1, 2])
    assert r == {"partition": 0, "error": 0, "message": "", "leader_id": 1, "leader_epoch": 0, "isr": [1, 2],
                 "partition_epoch": 1, "leader_recovery_state": RECOVERED}
    (ev,) = [e for e in h.events("isr_shrink")]
    assert ev.before == [1, 2, 3] and ev.after == [1, 2]
    assert ev.reason == "AlterPartition from leader 1: shrink ISR [1,2,3] -> [1,2]"
    r = h.alter(1, [1, 2, 3])
    assert r["partition_epoch"] == 2 and h.events("isr_expand")


def test_alter_partition_no_op_writes_nothing():
    h = _ap_cluster()
    before = h.state.next_offset
    assert h.alter(1, [1, 2, 3])["partition_epoch"] == 0 and h.state.next_offset == before


def test_alter_partition_listing_a_fenced_leader_is_ineligible_and_changes_nothing():
    h = _ap_cluster()
    h.state.cluster.brokers[1] = replace(h.state.cluster.brokers[1], fenced=True)
    before = h.p()
    assert h.alter(1, [1, 2])["error"] == ErrorCode.INELIGIBLE_REPLICA
    assert h.p() == before


# -- controlled shutdown ---------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_then_answers_should_shut_down():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3], [2, 1, 3]])
    r = h.heartbeat(1, want_shut_down=True)
    assert r.response["should_shut_down"] is False and r.response["is_fenced"] is False
    assert h.state.cluster.brokers[1].in_controlled_shutdown
    assert h.p("t", 0).leader == 2 and 1 not in h.p("t", 0).isr and 1 not in h.p("t", 1).isr
    assert "controlled_shutdown" in [e.kind for e in r.events]
    # Not yet: the other brokers have not reported seeing the change.
    assert h.heartbeat(1, want_shut_down=True).response["should_shut_down"] is False
    h.heartbeat(2)
    h.heartbeat(3)
    r = h.heartbeat(1, want_shut_down=True)
    assert r.response["should_shut_down"] is True and r.response["is_fenced"] is True
    assert h.state.cluster.brokers[1].fenced


def test_unfenced_broker_leading_nothing_shuts_down_at_once():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    assert h.heartbeat(2, want_shut_down=True).response["should_shut_down"] is True
    assert h.p().isr == (1,)


def test_shutting_down_broker_is_not_an_acceptable_leader_and_isr_member():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    h.heartbeat(1, want_shut_down=True)
    assert h.p().leader == 2
    assert h.alter(2, [2, 1])["error"] == ErrorCode.INELIGIBLE_REPLICA


# -- topic creation (C8) ---------------------------------------------------------------------


def test_create_topic_uses_adminutils_placement_and_isr_of_active_brokers():
    h = Harness()
    h.start(0, 1, 2, 3, 4)
    out = h.create("t", partitions=10, rf=3)
    assert out.response["topics"][0]["error"] == 0
    assert h.p("t", 5).replicas == (0, 2, 3) and h.p("t", 9).replicas == (4, 1, 2)
    p = h.p("t", 3)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch, p.reason) == ((3, 4, 0), 3, 0, 0, "created")
    assert [e.kind for e in out.events] == ["topic_created"]


def test_create_topic_with_rack_aware_placement():
    h = Harness()
    h.start(0, 1, 2, 3, 4, 5, racks={0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"})
    h.create("t", partitions=7, rf=3)
    assert [h.p("t", i).replicas for i in range(7)] == [
        (0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3), (0, 4, 2)]


def test_create_topic_leader_is_first_active_replica():
    h = Harness()
    h.start(1, 2)
    h.heartbeat(1, want_fence=True)
    h.create("t", [[1, 2]])
    assert (h.p().isr, h.p().leader) == ((2,), 2)


def test_create_topic_defaults_come_from_settings():
    h = Harness(num_partitions=3, default_replication_factor=2)
    h.start(1, 2, 3)
    r = h.create("t").response["topics"][0]
    assert (r["num_partitions"], r["replication_factor"]) == (3, 2)


def test_create_topic_errors():
    h = Harness()
    h.start(1, 2)
    h.create("t", partitions=1, rf=1)

    def err(**kw):
        return h.create(**kw).response["topics"][0]["error"]

    assert err(topic="t") == ErrorCode.TOPIC_ALREADY_EXISTS
    assert err(topic="bad name") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert err(topic="a" * 250) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert err(topic="..") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert err(topic="x", partitions=0) == ErrorCode.INVALID_PARTITIONS
    assert err(topic="x", rf=0) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert err(topic="x", rf=3) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert err(topic="x", configs={"nope": "1"}) == ErrorCode.INVALID_CONFIG
    assert err(topic="x", configs={"min.insync.replicas": "two"}) == ErrorCode.INVALID_CONFIG
    assert err(topic="x", configs={"min.insync.replicas": "0"}) == ErrorCode.INVALID_CONFIG
    assert err(topic="x", configs={"unclean.leader.election.enable": "yes"}) == ErrorCode.INVALID_CONFIG
    assert err(topic="x", assignments=[[1, 5]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err(topic="x", assignments=[[1, 1]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err(topic="x", assignments=[[1], [1, 2]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert err(topic="x", assignments=[[1]], partitions=1) == ErrorCode.INVALID_REQUEST
    assert "x" not in h.state.topics.topics


def test_create_topic_collision_and_duplicates():
    h = Harness()
    h.start(1)
    h.create("a.b")
    assert h.create("a_b").response["topics"][0]["error"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    r = h.state.create_topics(h.now, [{"topic": "d"}, {"topic": "d"}]).response
    assert [t["error"] for t in r["topics"]] == [ErrorCode.INVALID_REQUEST] * 2


def test_create_topic_with_every_broker_fenced_is_invalid_replication_factor():
    h = Harness()
    h.register(1)
    assert h.create("t").response["topics"][0]["error"] == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_topic_places_on_active_brokers_first_and_refuses_partitions_with_no_active_replica():
    h = Harness()
    h.start(1, 2, 3, 4, 5)
    for b in (2, 3, 4, 5):
        h.heartbeat(b, want_fence=True)
    r = h.create("t", partitions=5, rf=2).response["topics"][0]
    assert r["error"] == ErrorCode.INVALID_REPLICATION_FACTOR and "fenced" in r["message"]
    h.heartbeat(2)
    h.create("u", partitions=4, rf=2)
    assert {h.p("u", i).replicas for i in range(4)} <= {(1, 2), (2, 1)}


def test_min_insync_replicas_above_rf_is_accepted_and_capped():
    h = Harness(elr_enabled=True)
    h.start(1, 2)
    assert h.create("t", [[1, 2]], configs={"min.insync.replicas": "5"}).response["topics"][0]["error"] == 0
    assert h.state.effective_min_isr("t", 2) == 2


def test_validate_only_creates_nothing():
    h = Harness()
    h.start(1)
    out = h.state.create_topics(h.now, [{"topic": "t"}], validate_only=True)
    assert out.response["topics"][0]["error"] == 0 and out.records == [] and "t" not in h.state.topics.topics


# -- replay ----------------------------------------------------------------------------------


def test_replaying_every_record_rebuilds_the_same_image():
    h = _elr_cluster()
    _fence(h, 3)
    h.alter(1, [1])
    h.heartbeat(3)
    records = [r for o in h.log for r in o.records]
    assert [off for off, _ in records] == list(range(h.state.next_offset))
    fresh = ControllerState(h.state.settings)
    for off, rec in records:
        fresh.replay(off, rec)
    fresh.finish_replay(h.now)
    assert fresh.image() == h.state.image()
    assert fresh.next_offset == h.state.next_offset


def test_a_controller_restarted_mid_reassignment_completes_it_from_the_replayed_records():
    """C10: the move's adding/removing replicas are in the records, so a controller that replays them (a
    restart, or a snapshot) lists the move and completes it when the new replica joins the ISR."""
    h = Harness()
    h.start(1, 2, 3, 4)
    h.create("t", [[1, 2, 3]])
    h._keep(h.state.alter_partition_reassignments(h.now, [{"topic": "t", "partitions": [
        {"partition": 0, "replicas": [2, 3, 4]}]}]))
    fresh = ControllerState(h.state.settings)
    for off, rec in h.state.image():
        fresh.replay(off, rec)
    fresh.finish_replay(h.now)
    assert fresh.image() == h.state.image()
    assert fresh.list_partition_reassignments(None)["topics"] == [{"topic": "t", "partitions": [
        {"partition": 0, "replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}]}]
    h.state = fresh
    h.beat_all()
    res = h.alter(1, [1, 2, 3, 4])
    assert res["error"] == int(ErrorCode.NEW_LEADER_ELECTED)
    part = h.p()
    assert (part.replicas, part.isr, part.leader, part.reassigning) == ((2, 3, 4), (2, 3, 4), 2, False)


def test_snapshot_image_lists_brokers_then_topics_with_partitions():
    h = _ap_cluster()
    kinds = [type(r).__name__ for _, r in h.state.image()]
    assert kinds == ["BrokerRecord"] * 3 + ["TopicRecord", "PartitionRecord"]
    assert all(isinstance(r, PartitionRecord) for _, r in h.state.image()[4:])
