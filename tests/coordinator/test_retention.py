"""Time retention without compaction: live keys are written again before retention reaches them."""
from __future__ import annotations

from minibroker.coordinator.group import CommittedOffset, Group, GroupState, Member
from minibroker.coordinator.retention import maybe_refresh

DAY = 86_400_000
RETENTION = 7 * DAY


def group(state: GroupState, committed_at: int, written_at: int, gen: int = 1) -> Group:
    g = Group("g")
    g.state, g.generation_id, g.metadata_written_ms = state, gen, written_at
    if state is not GroupState.EMPTY:
        g.members["m"] = Member("m", None, "c", "/h", 10_000, 10_000, "consumer", [("range", b"")])
    g.commit({("t", 0): CommittedOffset(5, -1, "", committed_at)}, written_at)
    return g


def test_a_stable_groups_offsets_and_metadata_are_rewritten_after_half_the_retention() -> None:
    g = group(GroupState.STABLE, committed_at=0, written_at=0)
    assert maybe_refresh([g], 3 * DAY, RETENTION, set()).offsets == []
    r = maybe_refresh([g], 4 * DAY, RETENTION, set())
    assert r.offsets == [("g", ("t", 0))] and r.groups == ["g"] and not r.expired


def test_a_stable_groups_old_commit_never_expires_only_an_empty_groups() -> None:
    stable = group(GroupState.STABLE, committed_at=0, written_at=5 * DAY)
    assert maybe_refresh([stable], 8 * DAY, RETENTION, set()).expired == []
    empty = group(GroupState.EMPTY, committed_at=0, written_at=5 * DAY)
    r = maybe_refresh([empty], 8 * DAY, RETENTION, set())
    assert r.expired == [("g", ("t", 0))] and r.offsets == []


def test_an_empty_group_whose_offsets_all_expired_and_metadata_is_old_expires_too() -> None:
    empty = group(GroupState.EMPTY, committed_at=0, written_at=0)
    r = maybe_refresh([empty], 8 * DAY, RETENTION, set())
    assert r.expired_groups == ["g"] and r.groups == []


def test_keys_with_a_write_in_flight_are_left_alone() -> None:
    g = group(GroupState.STABLE, committed_at=0, written_at=0)
    r = maybe_refresh([g], 4 * DAY, RETENTION, {("g", ("t", 0)), ("g", None)})
    assert r.offsets == [] and r.groups == []
