"""The pure follower core (R3-R7 and the no-progress back-off), with a manual
clock: each test feeds events with now_ms and checks the returned actions,
the phase and the events."""
from __future__ import annotations

from minibroker.errors import ErrorCode
from minibroker.events import Event
from minibroker.replication.follower_core import (
    Append,
    FetchAnswer,
    FetchPhase,
    ListLeaderOffset,
    LogView,
    PartitionFollower,
    Truncate,
    TruncateFullyAndStartAt,
    UpdateHighWatermark,
    follower_high_watermark,
    follows_log_start,
)

BACKOFF = 1000
T = 10_000


def core(events: list[Event] | None = None, epoch: int = 2) -> PartitionFollower:
    return PartitionFollower("t-0", 1, epoch, BACKOFF, (events if events is not None else []).append)


def sent(c: PartitionFollower, log: LogView) -> LogView:
    c.next_position(log)
    return log


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def test_the_next_fetch_carries_the_leo_and_the_latest_epoch_of_the_log():
    c = core()
    pos = c.next_position(LogView(5, 0, ((0, 0), (1, 5))))
    assert (pos.fetch_offset, pos.last_fetched_epoch, pos.current_leader_epoch, pos.log_start_offset) == (5, 1, 2, 0)
    assert c.next_position(LogView(0, 0)).last_fetched_epoch == -1


def test_records_are_appended_then_the_hw_taken_from_the_leader():
    c = core()
    log = sent(c, LogView(3, 0, ((0, 0),)))
    acts = c.on_fetch_answer(FetchAnswer(high_watermark=7, log_start_offset=0, has_records=True), log, T)
    assert acts == [Append(), UpdateHighWatermark(7, 0)]
    assert c.phase(T) is FetchPhase.FETCHING


def test_the_follower_hw_is_the_leaders_clamped_to_its_own_log_and_may_drop():
    assert follower_high_watermark(9, 0, 5) == 5
    assert follower_high_watermark(2, 0, 5) == 2
    assert follower_high_watermark(1, 3, 5) == 3
    assert follows_log_start(4, 0, 5) and not follows_log_start(6, 0, 5) and not follows_log_start(0, 0, 5)


def test_an_answer_for_an_older_log_end_is_dropped():
    c = core()
    sent(c, LogView(3, 0, ((0, 0),)))
    assert c.on_fetch_answer(FetchAnswer(has_records=True), LogView(2, 0, ((0, 0),)), T) == []


def test_divergence_truncates_to_the_end_of_the_common_epoch():
    c = core()
    log = sent(c, LogView(12, 0, ((0, 0),)))
    (act,) = c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 10)), log, T)
    assert isinstance(act, Truncate) and act.offset == 10
    assert "diverging epoch 0 ending at 10" in act.reason
    assert c.phase(T) is FetchPhase.FETCHING


def test_an_epoch_unknown_to_the_follower_takes_several_truncation_rounds():
    c = core(epoch=5)
    log = sent(c, LogView(9, 0, ((1, 0), (2, 3), (4, 6))))
    (act,) = c.on_fetch_answer(FetchAnswer(diverging_epoch=(3, 7)), log, T)
    assert act == Truncate(6, act.reason) and c.phase(T) is FetchPhase.TRUNCATING
    after = LogView(6, 0, ((1, 0), (2, 3)))
    c.on_truncated(log, after, T)
    sent(c, after)
    (act,) = c.on_fetch_answer(FetchAnswer(diverging_epoch=(1, 4)), after, T)
    assert act.offset == 3 and c.phase(T) is FetchPhase.FETCHING


def test_a_demoted_leaders_stale_epoch_makes_a_truncation_at_its_leo_that_must_change_the_epochs():
    """Issue 9: [0 0, 1 5], LEO 5, the leader answers diverging epoch 0 ending at 5. The core
    asks for Truncate(5); the log drops (1, 5) (E4) and the follower moves on."""
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(5, 0, ((0, 0), (1, 5))))
    (act,) = c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 5)), log, T)
    assert act.offset == 5
    c.on_truncated(log, LogView(5, 0, ((0, 0),)), T)
    assert c.stuck is None and c.is_ready(T) and not events


def test_a_truncation_that_changes_nothing_backs_off_and_says_the_follower_is_stuck():
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(5, 0, ((0, 0), (1, 5))))
    c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 5)), log, T)
    c.on_truncated(log, log, T)                     # a log that kept the stale entry
    assert c.phase(T) is FetchPhase.DELAYED and not c.is_ready(T + BACKOFF - 1) and c.is_ready(T + BACKOFF)
    assert kinds(events) == ["follower_stuck"]
    assert events[0].after == "empty_truncation" and "truncation changed nothing" in events[0].reason
    assert c.status(T)["stuck"] is True and "truncation changed nothing" in c.status(T)["stuck_reason"]


def test_the_same_divergence_twice_for_the_same_log_backs_off_once_per_answer_and_reports_once():
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(8, 0, ((0, 0), (1, 5))))
    c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 5)), log, T)
    for i in range(1, 4):                            # the driver never carried the truncation out
        sent(c, log)
        assert c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 5)), log, T + i * BACKOFF) == []
        assert c.delayed_until_ms == T + (i + 1) * BACKOFF
    assert kinds(events) == ["follower_stuck"] and c.status(T)["stuck_count"] == 3
    assert "diverging epoch 0 ending at 5 again" in c.stuck_reason


def test_progress_after_being_stuck_is_reported_and_clears_the_reason():
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(5, 0, ((0, 0), (1, 5))))
    c.on_fetch_answer(FetchAnswer(diverging_epoch=(0, 5)), log, T)
    c.on_truncated(log, log, T)
    fixed = sent(c, LogView(5, 0, ((0, 0),)))
    assert c.on_fetch_answer(FetchAnswer(high_watermark=6, has_records=True), fixed, T + BACKOFF)[0] == Append()
    assert kinds(events) == ["follower_stuck", "follower_resumed"] and c.stuck is None


def test_an_empty_answer_of_a_caught_up_follower_is_not_stuck():
    events: list[Event] = []
    c = core(events)
    for i in range(5):
        log = sent(c, LogView(5, 0, ((0, 0),)))
        assert c.on_fetch_answer(FetchAnswer(high_watermark=5), log, T + i) == [UpdateHighWatermark(5, -1)]
    assert not events and c.is_ready(T)


def test_fenced_at_our_epoch_fails_until_a_new_core_replaces_it():
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(5, 0))
    assert c.on_fetch_answer(FetchAnswer(error=int(ErrorCode.FENCED_LEADER_EPOCH)), log, T) == []
    assert c.phase(T + 10**9) is FetchPhase.FAILED and not c.is_ready(T + 10**9)
    assert [e.after for e in events] == ["FENCED_LEADER_EPOCH"]


def test_other_errors_back_off_and_the_same_error_twice_is_stuck():
    events: list[Event] = []
    c = core(events)
    log = sent(c, LogView(5, 0))
    c.on_fetch_answer(FetchAnswer(error=int(ErrorCode.UNKNOWN_LEADER_EPOCH)), log, T)
    assert c.phase(T) is FetchPhase.DELAYED and c.is_ready(T + BACKOFF)
    assert kinds(events) == ["fetch_error"]
    sent(c, log)
    c.on_fetch_answer(FetchAnswer(error=int(ErrorCode.UNKNOWN_LEADER_EPOCH)), log, T + BACKOFF)
    assert kinds(events) == ["fetch_error", "follower_stuck"]
    assert "answered UNKNOWN_LEADER_EPOCH again" in c.stuck_reason and events[-1].after == "repeated_error"
    assert c.delayed_until_ms == T + 2 * BACKOFF


def test_out_of_range_asks_the_leaders_leo_and_truncates_to_it_when_lower():
    c = core()
    log = sent(c, LogView(6, 0, ((5, 0),)))
    assert c.on_fetch_answer(FetchAnswer(error=int(ErrorCode.OFFSET_OUT_OF_RANGE)), log, T) == \
        [ListLeaderOffset("latest")]
    (act,) = c.on_leader_log_end(4, log, T)
    assert isinstance(act, Truncate) and act.offset == 4


def test_out_of_range_restarts_at_a_leader_log_start_beyond_our_leo():
    c = core()
    log = sent(c, LogView(2, 0, ((5, 0),)))
    assert c.on_leader_log_end(100, log, T) == [ListLeaderOffset("earliest")]
    (act,) = c.on_leader_log_start(50, 100, log, T)
    assert isinstance(act, TruncateFullyAndStartAt) and act.offset == 50


def test_out_of_range_with_our_leo_inside_the_leaders_log_backs_off():
    c = core()
    log = sent(c, LogView(20, 0, ((5, 0),)))
    assert c.on_leader_log_start(10, 100, log, T) == []
    assert c.phase(T) is FetchPhase.DELAYED and c.last_error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_transport_error_delays_without_an_error_code():
    c = core()
    c.on_transport_error(T)
    assert c.phase(T) is FetchPhase.DELAYED and c.last_error == 0 and c.is_ready(T + BACKOFF)


def test_the_status_keeps_the_leaders_hw_of_the_last_good_answer_for_the_fetcher_lag_metric():
    c = core()
    assert c.status(T)["leader_hw"] == -1
    log = sent(c, LogView(3, 0, ((0, 0),)))
    c.on_fetch_answer(FetchAnswer(high_watermark=7, log_start_offset=0, has_records=True), log, T)
    assert c.status(T)["leader_hw"] == 7
