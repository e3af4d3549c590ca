"""Partition: one replica's driver half, on a real PartitionLog in a tmp dir
and a real PartitionLeader core. The fetch exchange between a leader and a
follower replica is played in-process (no sockets) to check the truncation
flow end to end (F5/R4/E2/X7/X8)."""
from __future__ import annotations

import os

import pytest

from minibroker.broker.fetcher import log_view
from minibroker.broker.partition import ByteTracker, Partition
from minibroker.errors import ErrorCode, KafkaError
from minibroker.events import Event
from minibroker.metadata import PartitionRecord
from minibroker.records import build_batch, iter_records
from minibroker.replication import KAFKA, LESSON
from minibroker.replication.follower_core import FetchAnswer, PartitionFollower, Truncate
from minibroker.storage import LogConfig, PartitionLog

NOW = 1_000_000


def make_partition(tmp_path, name: str, node_id: int, events: list[Event] | None = None,
                   batches: list[tuple[int, int, str]] = (), hw: int = 0) -> Partition:
    sink = events.append if events is not None else (lambda e: None)
    lg = PartitionLog(os.path.join(tmp_path, name, "t-0"), LogConfig(), event_sink=sink)
    for epoch, n, tag in batches:
        for _ in range(n):
            lg.append_as_leader(build_batch([f"{tag}@{lg.log_end_offset}".encode()], timestamp_ms=1), epoch)
    return Partition("t", 0, node_id=node_id, log=lg, hw=hw, sink=sink)


def rec(leader: int, epoch: int, *, replicas=(1, 2, 3), isr=None, pe: int = 0) -> PartitionRecord:
    return PartitionRecord("t", 0, tuple(replicas), tuple(isr if isr is not None else replicas), leader,
                           epoch, pe)


def lead(p: Partition, r: PartitionRecord, profile=KAFKA) -> list:
    return p.make_leader(r, NOW, profile=profile, lag_max_ms=30_000, min_isr=1, broker_epoch=7,
                         eligibility=[(b, True, -1) for b in r.replicas])


def vals(p: Partition) -> list[bytes]:
    lg = p.log
    if lg.log_end_offset == lg.log_start_offset:
        return []
    return [r.value for r in iter_records(lg.read(lg.log_start_offset, 1 << 30))]


def replicate(leader: Partition, follower: Partition, replica_id: int, rounds: int = 10) -> list[tuple[int, int]]:
    """Play follower fetches against the leader until nothing changes, the follower's
    decisions made by its PartitionFollower core as the fetcher does; returns the
    (before, after) LEOs of each truncation."""
    truncations = []
    core = PartitionFollower(follower.name, leader.node_id, leader.leader_epoch, 1000)
    for _ in range(rounds):
        pos = core.next_position(log_view(follower))
        err, div = leader.divergence(pos.fetch_offset, pos.last_fetched_epoch)
        assert err == ErrorCode.NONE
        if div is not None:
            before = follower.leo
            (action,) = core.on_fetch_answer(FetchAnswer(diverging_epoch=div), log_view(follower), NOW)
            assert isinstance(action, Truncate)
            view = log_view(follower)
            follower.truncate_to(action.offset, NOW, action.reason)
            core.on_truncated(view, log_view(follower), NOW)
            assert core.stuck is None
            truncations.append((before, follower.leo))
            continue
        hw_before = leader.hw
        d = leader.core.on_follower_fetch(replica_id, pos.fetch_offset, NOW)
        assert d.error == ErrorCode.NONE
        data = leader.read(pos.fetch_offset, 1 << 20, leader.leo, True)
        follower.append_as_follower(data, NOW)
        follower.update_follower_hw(hw_before, leader.log_start_offset, NOW)
        if not data:
            break
    return truncations


def test_new_leader_writes_its_epoch_cache_entry_at_election_before_any_data(tmp_path):
    p = make_partition(tmp_path, "a", 1, batches=[(0, 5, "x")])
    lead(p, rec(1, 3))
    assert p.log.epoch_cache.entries == [(0, 0), (3, 5)]
    assert p.core.epoch_start_offset == 5 and p.role == "leader"


def test_leader_append_stamps_offsets_and_its_epoch(tmp_path):
    p = make_partition(tmp_path, "a", 1)
    lead(p, rec(1, 4, replicas=(1,)))
    first, last, d, _ = p.append_as_leader(build_batch([b"a", b"b"], timestamp_ms=NOW), NOW)
    assert (first, last) == (0, 1)
    assert d.hw_moved and p.hw == 2                    # ISR = {leader}: HW moves on the append
    assert p.log.batch_containing(1) == (0, 1, 4)


def test_re_election_keeps_the_core_and_adds_an_epoch_entry(tmp_path):
    p = make_partition(tmp_path, "a", 1, batches=[(0, 2, "x")])
    lead(p, rec(1, 0))
    core = p.core
    lead(p, rec(1, 1, pe=1))
    assert p.core is core and core.leader_epoch == 1
    assert p.log.epoch_cache.entries == [(0, 0), (1, 2)]


def test_leader_without_itself_in_the_isr_still_leads(tmp_path):
    p = make_partition(tmp_path, "a", 1)
    lead(p, rec(1, 0, isr=(2,)))
    assert 1 in p.core.isr


def test_lesson_profile_core_is_used_when_asked(tmp_path):
    p = make_partition(tmp_path, "a", 1)
    lead(p, rec(1, 0), profile=LESSON)
    assert p.core.profile is LESSON


def test_epoch_checks_fence_older_and_flag_newer_epochs(tmp_path):
    p = make_partition(tmp_path, "a", 1)
    lead(p, rec(1, 5))
    assert p.check_leader_epoch(5) == ErrorCode.NONE
    assert p.check_leader_epoch(-1) == ErrorCode.NONE
    assert p.check_leader_epoch(4) == ErrorCode.FENCED_LEADER_EPOCH
    assert p.check_leader_epoch(6) == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_divergence_check_matches_f5(tmp_path):
    # Leader cache {0:0, 2:4}, LEO 6.
    p = make_partition(tmp_path, "a", 1, batches=[(0, 4, "x"), (2, 2, "y")])
    lead(p, rec(1, 2))
    assert p.divergence(6, -1) == (ErrorCode.NONE, None)          # no last fetched epoch: no check
    assert p.divergence(6, 2) == (ErrorCode.NONE, None)
    assert p.divergence(4, 0) == (ErrorCode.NONE, None)           # epoch 0 ends at 4 >= 4
    assert p.divergence(5, 0) == (ErrorCode.NONE, (0, 4))         # beyond the end of epoch 0
    assert p.divergence(5, 1) == (ErrorCode.NONE, (0, 4))         # epoch 1 unknown: largest below
    assert p.divergence(5, 3) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)   # above every epoch


def test_divergence_below_log_start_is_out_of_range(tmp_path):
    p = make_partition(tmp_path, "a", 1, batches=[(0, 6, "x")])
    lead(p, rec(1, 0))
    p.log.maybe_increment_log_start_offset(3)
    assert p.divergence(2, 0) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)


def test_x7_old_leader_truncates_to_the_end_of_the_common_epoch_and_refetches(tmp_path):
    events: list[Event] = []
    a = make_partition(tmp_path, "a", 1, events, batches=[(0, 12, "a")])
    b = make_partition(tmp_path, "b", 2, batches=[(0, 10, "a")])
    lead(b, rec(2, 1, isr=(2, 1)))
    b.append_as_leader(build_batch([b"b@10"], timestamp_ms=NOW), NOW)
    b.append_as_leader(build_batch([b"b@11"], timestamp_ms=NOW), NOW)
    a.make_follower(rec(2, 1, isr=(2, 1)), NOW)
    assert replicate(b, a, 1) == [(12, 10)]
    assert vals(a) == vals(b) and vals(a)[9:] == [b"a@9", b"b@10", b"b@11"]
    assert a.log.epoch_cache.entries == [(0, 0), (1, 10)]
    trunc = [e for e in events if e.kind == "truncation"]
    assert trunc and "diverging epoch 0 ending at 10" in trunc[0].reason


def test_x8_follower_drops_an_epoch_the_leader_never_saw(tmp_path):
    b = make_partition(tmp_path, "b", 2, batches=[(1, 5, "a"), (2, 1, "b")])
    c = make_partition(tmp_path, "c", 3, batches=[(1, 5, "a"), (3, 2, "c")])
    lead(c, rec(3, 3, isr=(3,)))
    b.make_follower(rec(3, 3, isr=(3,)), NOW)
    assert replicate(c, b, 2) == [(6, 5)]
    assert vals(b) == vals(c)
    assert b.log.epoch_cache.entries == [(1, 0), (3, 5)]


def test_a_demoted_leader_that_wrote_nothing_drops_its_epoch_and_stops_diverging(tmp_path):
    """Issue 9: 3 led epoch 1 and wrote nothing ([0 0, 1 5]); 1 leads epoch 2 ([0 0, 2 5]).
    One truncation round at the LEO drops (1, 5); the next fetch no longer diverges."""
    events: list[Event] = []
    one = make_partition(tmp_path, "one", 1, batches=[(0, 5, "a")])
    three = make_partition(tmp_path, "three", 3, events, batches=[(0, 5, "a")])
    lead(three, rec(3, 1, isr=(3, 2)))
    lead(one, rec(1, 2, isr=(1, 2, 3)))
    three.make_follower(rec(1, 2, isr=(1, 2, 3)), NOW)
    assert three.log.epoch_cache.entries == [(0, 0), (1, 5)]
    assert one.divergence(5, 1) == (ErrorCode.NONE, (0, 5))
    assert replicate(one, three, 3) == [(5, 5)]
    assert three.log.epoch_cache.entries == [(0, 0)]
    assert one.divergence(5, 0) == (ErrorCode.NONE, None)
    trunc = [e for e in events if e.kind == "truncation"]
    assert len(trunc) == 1 and trunc[0].extra["epoch_entries_removed"] == [[1, 5]]


def test_truncation_takes_several_rounds_when_the_follower_lacks_the_leaders_epoch(tmp_path):
    f = make_partition(tmp_path, "f", 1, batches=[(1, 3, "x"), (2, 3, "f"), (4, 3, "f")])
    ld = make_partition(tmp_path, "l", 2, batches=[(1, 4, "x"), (3, 4, "l")])
    lead(ld, rec(2, 5, replicas=(1, 2), isr=(2,)))
    f.make_follower(rec(2, 5, replicas=(1, 2), isr=(2,)), NOW)
    assert replicate(ld, f, 1) == [(9, 6), (6, 3)]
    assert vals(f) == vals(ld)


def test_truncation_below_the_hw_is_named_in_the_event(tmp_path):
    events: list[Event] = []
    f = make_partition(tmp_path, "f", 1, events, batches=[(0, 5, "x")], hw=5)
    f.make_follower(rec(2, 1), NOW)
    f.truncate_to(3, NOW, "test")
    assert f.hw == 3
    assert "below HW 5" in [e for e in events if e.kind == "truncation"][0].reason


def test_follower_hw_is_min_of_leader_hw_and_own_leo_and_may_drop(tmp_path):
    events: list[Event] = []
    f = make_partition(tmp_path, "f", 1, events, batches=[(0, 5, "x")], hw=4)
    f.make_follower(rec(2, 1), NOW)
    f.update_follower_hw(9, 0, NOW)
    assert f.hw == 5
    assert not [e for e in events if e.kind == "hw_move"]
    assert f.update_follower_hw(2, 0, NOW) == 5 and f.hw == 2     # a new leader may report less
    (drop,) = [e for e in events if e.kind == "hw_move"]
    assert (drop.before, drop.after) == (5, 2)


def test_follower_follows_the_leaders_log_start_forward(tmp_path):
    f = make_partition(tmp_path, "f", 1, batches=[(0, 5, "x")])
    f.make_follower(rec(2, 1), NOW)
    f.update_follower_hw(5, 3, NOW)
    assert f.log_start_offset == 3 and f.hw == 5


def test_restarting_follower_fetches_from_its_leo_without_truncating(tmp_path):
    events: list[Event] = []
    f = make_partition(tmp_path, "f", 1, events, batches=[(0, 5, "x")], hw=2)
    f.make_follower(rec(2, 1), NOW)
    assert f.initial_fetch_offset(NOW) == 5                       # R1: never truncate before asking
    assert f.leo == 5 and not [e for e in events if e.kind == "truncation"]


def test_losing_leadership_fails_acks_all_waiters(tmp_path):
    p = make_partition(tmp_path, "a", 1)
    lead(p, rec(1, 0))
    p.append_as_leader(build_batch([b"v"], timestamp_ms=NOW), NOW)
    token = object()
    p.core.add_waiter(1, token, NOW)
    failed, restart = p.make_follower(rec(2, 1, pe=1), NOW)
    assert failed.completed == [(token, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert restart and p.core is None and p.role == "follower"


def test_same_epoch_metadata_does_not_restart_fetching(tmp_path):
    f = make_partition(tmp_path, "f", 1)
    assert f.make_follower(rec(2, 1), NOW)[1] is True
    assert f.make_follower(rec(2, 1, isr=(2, 3), pe=1), NOW)[1] is False


def test_follower_append_rejects_a_gap(tmp_path):
    f = make_partition(tmp_path, "f", 1, batches=[(0, 2, "x")])
    src = make_partition(tmp_path, "src", 2, batches=[(0, 4, "x")])
    with pytest.raises(KafkaError):
        f.append_as_follower(src.read(3, 1 << 20, 4, True), NOW)
    assert f.leo == 2


def test_byte_tracker_counts_bytes_between_batch_boundaries():
    t = ByteTracker(10)
    t.on_append(12, 100)
    t.on_append(15, 50)
    assert t.bytes_between(10, 15) == 150
    assert t.bytes_between(12, 15) == 50
    assert t.bytes_between(15, 15) == 0
    assert t.bytes_between(5, 15) is None          # older than tracked: unknown
    t.truncate(12)
    assert t.bytes_between(10, 15) == 100
    t.truncate(3)
    assert t.bytes_between(3, 10) == 0


def test_byte_tracker_forgets_oldest_boundaries_beyond_its_capacity():
    t = ByteTracker(0, cap=4)
    for i in range(1, 10):
        t.on_append(i, 1)
    assert t.bytes_between(0, 9) is None
    assert t.bytes_between(7, 9) == 2
