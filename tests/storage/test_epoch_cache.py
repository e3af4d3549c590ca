"""Leader-epoch cache rules (semantics doc E2-E4, Kafka's LeaderEpochFileCache)."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from minibroker.storage.epoch_cache import UNDEFINED_EPOCH as U, LeaderEpochCache

UU = (U, U)


def cache(*entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache()
    for e, o in entries:
        c.assign(e, o)
    return c


# ---------------------------------------------------------------- assign (E2)

def test_assign_records_epoch_and_latest_epoch_ends_at_leo():
    c = cache((2, 10))
    assert c.latest_epoch == 2
    assert c.entries == [(2, 10)]
    assert c.end_offset_for(2, 11) == (2, 11)


def test_same_epoch_with_higher_start_offset_is_ignored():
    c = cache((2, 6))
    assert c.assign(2, 10) is False
    assert c.entries == [(2, 6)]


def test_same_epoch_with_lower_start_offset_replaces_entry():
    c = cache((5, 11), (6, 12), (7, 13))
    assert c.assign(7, 12) is True
    assert c.entries == [(5, 11), (7, 12)]
    assert c.end_offset_for(5, 0) == (5, 12)
    assert c.end_offset_for(6, 0) == (5, 12)


def test_new_epoch_at_same_start_offset_replaces_older_epoch():
    c = cache((2, 9))
    c.assign(3, 9)
    assert c.entries == [(3, 9)]


def test_lower_epoch_removes_every_entry_with_epoch_at_or_above_it():
    c = cache((1, 5), (2, 6))
    c.assign(1, 7)
    assert c.entries == [(1, 7)]
    assert c.latest_epoch == 1
    assert c.end_offset_for(1, 8) == (1, 8)
    assert c.end_offset_for(2, 8) == UU


def test_lower_start_offset_removes_entries_starting_at_or_after_it():
    c = cache((2, 6))
    c.assign(3, 5)
    assert c.entries == [(3, 5)]


def test_negative_epoch_or_offset_is_refused():
    c = LeaderEpochCache()
    with pytest.raises(ValueError):
        c.assign(-1, 0)
    with pytest.raises(ValueError):
        c.assign(0, -1)


def test_follower_appends_add_one_entry_per_epoch_change():
    c = LeaderEpochCache()
    for epoch, offsets in ((0, range(0, 3)), (1, range(3, 6)), (2, range(6, 9))):
        for o in offsets:
            c.assign(epoch, o)
    assert c.entries == [(0, 0), (1, 3), (2, 6)]
    assert c.end_offset_for(2, 9) == (2, 9)
    assert c.end_offset_for(0, 9) == (0, 3)
    assert c.end_offset_for(1, 9) == (1, 6)


def test_leader_changes_before_any_data_keep_only_the_last_epoch_at_that_offset():
    c = cache((0, 0), (1, 0))
    assert c.entries == [(1, 0)]
    assert c.end_offset_for(1, 0) == (1, 0)
    # epoch 0 is below the first entry: its end is the first entry's start
    assert c.end_offset_for(0, 0) == (0, 0)
    c.assign(2, 5)
    assert c.end_offset_for(2, 10) == (2, 10)
    assert c.end_offset_for(1, 10) == (1, 5)
    assert c.end_offset_for(0, 10) == (0, 0)


def test_version_moves_only_on_change():
    c = cache((1, 0))
    v = c.version
    c.assign(1, 5)
    c.truncate_from_end(100)
    c.truncate_from_start(0)
    assert c.version == v
    c.assign(2, 5)
    assert c.version == v + 1


# ---------------------------------------------------------------- end_offset_for (E3)

def test_undefined_epoch_requested_gives_undefined():
    assert cache((2, 11), (3, 12)).end_offset_for(U, 0) == UU
    assert LeaderEpochCache().end_offset_for(U, 73) == UU


def test_empty_cache_gives_undefined():
    assert LeaderEpochCache().end_offset_for(0, 0) == UU
    assert LeaderEpochCache().end_offset_for(7, 0) == UU


def test_epoch_above_every_known_epoch_gives_undefined():
    assert cache((2, 100)).end_offset_for(3, 100) == UU


def test_epoch_below_first_gives_requested_epoch_and_first_start():
    assert cache((5, 11), (6, 12), (7, 13)).end_offset_for(4, 0) == (4, 11)


def test_unknown_epoch_between_known_ones_gives_floor_epoch_and_next_start():
    c = cache((0, 10), (2, 13), (4, 17))
    assert c.end_offset_for(1, 0) == (0, 13)
    assert c.end_offset_for(2, 0) == (2, 17)
    assert c.end_offset_for(3, 0) == (2, 17)


def test_latest_epoch_ends_at_log_end_offset_even_when_start_repeated():
    c = cache((2, 11), (2, 12))
    assert c.end_offset_for(2, 14) == (2, 14)


def test_previous_epoch_ends_where_next_epoch_starts():
    c = cache((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16))
    assert c.end_offset_for(2, 17) == (2, 15)


# ---------------------------------------------------------------- truncation (E4)

def test_truncate_from_end_drops_entries_starting_at_or_after_offset():
    c = cache((2, 6), (3, 8), (4, 11))
    assert c.truncate_from_end(8) == [(3, 8), (4, 11)]
    assert c.entries == [(2, 6)]


def test_truncate_from_end_between_boundaries_keeps_the_epoch_holding_it():
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_end(9)
    assert c.latest_epoch == 3
    assert c.entries == [(2, 6), (3, 8)]


def test_truncate_from_start_keeps_last_removed_epoch_moved_to_offset():
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(9)
    assert c.entries == [(3, 9), (4, 11)]


def test_truncate_from_start_on_boundary_keeps_that_epoch():
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(8)
    assert c.entries == [(3, 8), (4, 11)]


def test_truncate_from_start_at_or_before_first_offset_changes_nothing():
    for offset in (1, 6):
        c = cache((2, 6), (3, 8), (4, 11))
        assert c.truncate_from_start(offset) == []
        assert c.entries == [(2, 6), (3, 8), (4, 11)]


def test_truncate_from_start_past_every_entry_keeps_latest_epoch():
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(11)
    assert c.entries == [(4, 11)]
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(15)
    assert c.entries == [(4, 15)]


def test_truncate_from_start_between_first_two_epochs():
    c = cache((0, 0), (1, 7), (2, 10))
    c.truncate_from_start(5)
    assert c.entries == [(0, 5), (1, 7), (2, 10)]


def test_undefined_offset_truncates_nothing():
    c = cache((2, 6), (3, 8), (4, 11))
    c.truncate_from_start(-1)
    c.truncate_from_end(-1)
    assert len(c) == 3


def test_truncation_of_empty_cache_is_harmless():
    c = LeaderEpochCache()
    assert c.truncate_from_start(7) == []
    assert c.truncate_from_end(7) == []


def test_truncation_in_several_rounds():
    c = cache((1, 0), (2, 10), (3, 20), (5, 30), (6, 45))
    c.truncate_from_end(50)
    assert c.entries == [(1, 0), (2, 10), (3, 20), (5, 30), (6, 45)]
    c.truncate_from_end(40)
    assert c.entries == [(1, 0), (2, 10), (3, 20), (5, 30)]
    c.truncate_from_end(30)
    assert c.entries == [(1, 0), (2, 10), (3, 20)]
    c.truncate_from_start(5)
    assert c.entries == [(1, 5), (2, 10), (3, 20)]
    c.truncate_from_start(15)
    assert c.entries == [(2, 15), (3, 20)]
    c.assign(7, 25)
    assert c.entries == [(2, 15), (3, 20), (7, 25)]
    c.truncate_from_end(21)
    assert c.entries == [(2, 15), (3, 20)]
    c.truncate_from_start(30)
    assert c.entries == [(3, 30)]
    c.truncate_from_end(30)
    assert c.entries == []


def test_previous_and_next_epoch_lookups():
    c = LeaderEpochCache()
    assert c.previous_epoch(2) is None
    c.assign(2, 10)
    assert c.previous_epoch(2) is None
    c.assign(4, 15)
    assert c.previous_epoch(4) == 2
    c.assign(10, 20)
    assert c.previous_epoch(10) == 4
    assert c.previous_epoch(7) == 4
    assert c.next_epoch(4) == 10
    assert c.next_epoch(10) is None
    c.truncate_from_end(18)
    assert c.previous_epoch(10) == 4
    assert c.latest_epoch == 4


def test_epoch_for_offset_names_the_epoch_whose_range_holds_it():
    c = cache((2, 6), (3, 8), (4, 11))
    assert c.epoch_for_offset(5) is None
    assert c.epoch_for_offset(6) == 2
    assert c.epoch_for_offset(10) == 3
    assert c.epoch_for_offset(1000) == 4


def test_divergence_resolved_in_several_rounds_kip_279():
    """S5/KIP-279: when the leader answers with an epoch the follower does not
    hold, the follower truncates to its own end of that epoch and asks again
    with its new latest epoch, until the epochs match."""
    leader, leader_leo = cache((1, 0), (3, 15), (5, 25)), 40
    follower, follower_leo = cache((1, 0), (2, 10), (4, 20)), 30
    rounds = []
    while True:
        asked = follower.latest_epoch
        epoch, leader_end = leader.end_offset_for(asked, leader_leo)
        own_epoch, own_end = follower.end_offset_for(epoch, follower_leo)
        done = own_epoch == epoch
        target = min(leader_end, own_end) if done else min(own_end, follower_leo)
        follower.truncate_from_end(target)
        follower_leo = min(follower_leo, target)
        rounds.append((asked, (epoch, leader_end), follower_leo))
        if done:
            break
    assert rounds == [(4, (3, 25), 20), (2, (1, 15), 10)]
    assert follower.entries == [(1, 0)]


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=30),
       st.integers(-1, 220), st.integers(-1, 220))
def test_entries_stay_strictly_increasing_in_epoch_and_offset(ops, t_end, t_start):
    c = LeaderEpochCache()
    for e, o in ops:
        c.assign(e, o)
        es = c.entries
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(es, es[1:], strict=False))
        assert c.latest_entry == (e, o) or (c.latest_epoch == e and c.latest_entry[1] <= o)
    c.truncate_from_end(t_end)
    if t_end >= 0:
        assert all(o < t_end for _, o in c.entries)
    had_entries = len(c) > 0
    c.truncate_from_start(t_start)
    es = c.entries
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(es, es[1:], strict=False))
    assert bool(es) == had_entries
    if t_start >= 0 and es:
        assert es[0][1] >= t_start
