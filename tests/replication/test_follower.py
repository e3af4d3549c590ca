"""Follower truncation arithmetic (R4) and epoch end offsets (E3)."""
from __future__ import annotations

from functools import partial

from minibroker.replication.follower import epoch_end_offset, truncation_offset


def cache(entries: list[tuple[int, int]], leo: int):
    return partial(epoch_end_offset, entries, leo)


# ------------------------------------------------------------------------ E3


def test_end_offset_of_the_latest_epoch_is_the_leo() -> None:
    assert epoch_end_offset([(0, 0), (3, 5)], 9, 3) == (3, 9)


def test_end_offset_of_an_older_epoch_is_the_next_epochs_start() -> None:
    assert epoch_end_offset([(0, 0), (2, 4), (3, 5)], 9, 2) == (2, 5)


def test_end_offset_of_an_unknown_middle_epoch_names_the_largest_epoch_below() -> None:
    assert epoch_end_offset([(1, 0), (3, 5)], 7, 2) == (1, 5)


def test_end_offset_below_the_first_epoch_is_the_first_start() -> None:
    assert epoch_end_offset([(4, 10), (5, 20)], 30, 2) == (2, 10)


def test_end_offset_is_undefined_above_every_epoch_or_for_undefined_or_empty() -> None:
    assert epoch_end_offset([(0, 0)], 5, 1) == (-1, -1)
    assert epoch_end_offset([(0, 0)], 5, -1) == (-1, -1)
    assert epoch_end_offset([], 5, 0) == (-1, -1)


# ------------------------------------------------------------------------ R4


def test_x7_same_epoch_truncates_to_the_smallest_end() -> None:
    # A has 0-11 in epoch 0; leader B answers diverging(0, 10).
    assert truncation_offset(0, 10, cache([(0, 0)], 12), 12) == (10, True)


def test_x8_follower_epoch_unknown_to_the_leader_truncates_to_the_shared_epoch_end() -> None:
    # B holds {1:0, 2:5}, LEO 6; leader C answers diverging(1, 5) for B's epoch 2.
    assert truncation_offset(1, 5, cache([(1, 0), (2, 5)], 6), 6) == (5, True)


def test_s5_fast_double_failover_truncates_the_foreign_tail() -> None:
    # KIP-279: B holds Z at 10-15 in epoch 2 (cache {1:0, 2:10}, LEO 16); A leads
    # epoch 3 with Y at 10-20 in epoch 1 (cache {1:0, 3:21}) and never saw epoch 2.
    leader_answer = epoch_end_offset([(1, 0), (3, 21)], 21, 2)
    assert leader_answer == (1, 21)
    assert truncation_offset(*leader_answer, cache([(1, 0), (2, 10)], 16), 16) == (10, True)


def test_follower_without_the_leaders_epoch_truncates_and_fetches_again() -> None:
    # Leader answers (4, 30); the follower's largest epoch <= 4 is 2, ending at 20.
    follower = cache([(0, 0), (2, 12), (5, 20)], 26)
    assert truncation_offset(4, 30, follower, 26) == (20, False)


def test_iteration_converges_over_several_rounds() -> None:
    # Leader {0:0, 2:5, 4:12}; follower {0:0, 1:3, 3:10} (epochs 1 and 3 only it saw).
    # Round 1: leader says (2, 12); follower knows no epoch 2, cuts to its epoch-1 end 10.
    # Round 2: leader says (0, 5); follower's epoch 0 ends at 3: truncate to 3, done.
    leader_entries, leader_leo = [(0, 0), (2, 5), (4, 12)], 40
    follower_entries, follower_leo = [(0, 0), (1, 3), (3, 10)], 15
    rounds = 0
    while True:
        rounds += 1
        last_epoch = follower_entries[-1][0]
        epoch, end = epoch_end_offset(leader_entries, leader_leo, last_epoch)
        offset, done = truncation_offset(epoch, end, cache(follower_entries, follower_leo),
                                         follower_leo)
        follower_leo = offset
        follower_entries = [(e, s) for e, s in follower_entries if s < offset] or [(0, 0)]
        if done:
            break
    assert (follower_leo, rounds) == (3, 2)


def test_follower_with_no_entry_at_or_below_the_epoch_trusts_the_leader_end() -> None:
    assert truncation_offset(3, 7, cache([], 9), 9) == (7, True)


def test_leader_without_any_epoch_at_or_below_ours_gives_its_end_offset() -> None:
    assert truncation_offset(-1, 4, cache([(0, 0)], 9), 9) == (4, True)


def test_truncation_never_goes_beyond_the_local_leo() -> None:
    assert truncation_offset(0, 50, cache([(0, 0)], 8), 8) == (8, True)
    assert truncation_offset(-1, 50, cache([(0, 0)], 8), 8) == (8, True)
