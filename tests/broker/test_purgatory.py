"""Delayed produces and parked fetches: who wakes them and when."""
from __future__ import annotations

from minibroker.broker.purgatory import DelayedFetch, DelayedProduce, FetchPurgatory, StandingWatch
from minibroker.errors import ErrorCode

K0 = ("t", 0)
K1 = ("t", 1)


class CountedFetch(DelayedFetch):
    """A DelayedFetch whose completions are counted (`calls`)."""

    def __init__(self, keys: list, needed: int, follower: bool) -> None:
        self.calls: list[int] = []
        super().__init__(keys, needed, follower, on_complete=lambda: self.calls.append(1))


fetch = CountedFetch


def produce() -> tuple[DelayedProduce, list[int]]:
    calls: list[int] = []
    return DelayedProduce(lambda: calls.append(1)), calls


def test_delayed_produce_entries_start_as_request_timed_out():
    op, _ = produce()
    entry: dict = {"partition": 0, "error": 0}
    op.add(entry, K0)
    assert entry["error"] == ErrorCode.REQUEST_TIMED_OUT


def test_delayed_produce_completes_once_every_partition_completed_after_it_is_armed():
    op, calls = produce()
    e0: dict = {}
    e1: dict = {}
    w0, w1 = op.add(e0, K0), op.add(e1, K1)
    w0.complete(ErrorCode.NONE)
    op.arm()
    assert not calls and not op.done
    w1.complete(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert calls == [1] and op.done
    assert e0["error"] == 0 and e1["error"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert op.pending() == []


def test_a_partition_resolved_before_the_others_are_added_does_not_complete_the_produce():
    """A multi-partition produce whose first partition resolves at once (its ISR is the leader
    alone) waits for the others: it completes only once armed with all of them."""
    op, calls = produce()
    w0 = op.add({}, K0)
    w0.complete(ErrorCode.NONE)
    assert not calls
    w1 = op.add({}, K1)
    op.arm()
    assert not calls
    w1.complete(ErrorCode.NONE)
    assert calls == [1]


def test_an_armed_produce_with_everything_resolved_completes_at_once():
    op, calls = produce()
    op.add({}, K0).complete(ErrorCode.NONE)
    op.arm()
    assert calls == [1]


def test_the_deadline_keeps_resolved_partitions_and_times_out_the_rest():
    op, calls = produce()
    e0: dict = {}
    e1: dict = {}
    w0, _ = op.add(e0, K0), op.add(e1, K1)
    w0.complete(ErrorCode.NONE)
    op.arm()
    op.complete()                              # the driver's deadline
    assert calls == [1]
    assert e0["error"] == 0 and e1["error"] == ErrorCode.REQUEST_TIMED_OUT
    assert [w.key for w in op.pending()] == [K1]
    op.complete()
    assert calls == [1]


def test_a_waiter_completes_once():
    op, _ = produce()
    e: dict = {}
    w = op.add(e, K0)
    w.complete(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    w.complete(ErrorCode.NONE)
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and op.remaining == 0


def test_follower_fetch_wakes_on_append_not_on_hw_move():
    p = FetchPurgatory()
    op = fetch([K0], 1, True)
    p.watch(op)
    p.on_hw_move(K0, 100)
    assert not op.done               # F10: HW-only changes do not wake followers
    p.on_append(K0, 10)
    assert op.done


def test_consumer_fetch_wakes_on_hw_move_not_on_append():
    p = FetchPurgatory()
    op = fetch([K0], 1, False)
    p.watch(op)
    p.on_append(K0, 100)
    assert not op.done               # uncommitted data is not readable
    p.on_hw_move(K0, 10)
    assert op.done


def test_fetch_waits_for_min_bytes_summed_over_partitions():
    p = FetchPurgatory()
    op = fetch([K0, K1], 100, True)
    p.watch(op)
    p.on_append(K0, 60)
    assert not op.done
    p.on_append(K1, 40)
    assert op.done


def test_unknown_byte_count_completes_the_fetch():
    p = FetchPurgatory()
    op = fetch([K0], 1 << 20, False)
    p.watch(op)
    p.on_hw_move(K0, None)
    assert op.done


def test_state_change_completes_every_fetch_on_that_partition_only():
    p = FetchPurgatory()
    a = fetch([K0], 1, True)
    b = fetch([K0, K1], 1, False)
    c = fetch([K1], 1, False)
    for op in (a, b, c):
        p.watch(op)
    p.on_state_change(K0)
    assert a.done and b.done and not c.done


def test_closed_fetch_is_no_longer_watched():
    p = FetchPurgatory()
    op = fetch([K0, K1], 1, True)
    p.watch(op)
    assert len(p) == 1 and p.watching(K0) and p.watching(K1)
    p.close(op)
    assert len(p) == 0 and not p.watching(K0)
    p.on_append(K0, 10)
    assert not op.done


def test_a_fetch_completes_once_however_often_it_is_told():
    p = FetchPurgatory()
    op = fetch([K0], 1, True)
    p.watch(op)
    p.on_append(K0, 10)
    p.on_state_change(K0)
    op.complete()                              # the driver's deadline, after it completed
    assert op.calls == [1]
    assert not p.watching(K0), "a completed fetch waiting to be closed watches nothing"


def test_complete_all_answers_every_parked_fetch():
    p = FetchPurgatory()
    ops = [fetch([K0], 1, bool(i % 2)) for i in range(4)]
    for op in ops:
        p.watch(op)
    p.complete_all()
    assert all(op.done for op in ops)


def test_the_change_log_names_the_keys_changed_since_a_count_within_its_window():
    from minibroker.broker.purgatory import CHANGE_LOG_MAX
    pg = FetchPurgatory()
    start = pg.changes
    pg.touched(("t", 0))
    pg.on_append(("t", 1), 10)
    mid = pg.changes
    pg.on_state_change(("t", 2))
    assert pg.changed_since(start) == {("t", 0), ("t", 1), ("t", 2)}
    assert pg.changed_since(mid) == {("t", 2)} and pg.changed_since(pg.changes) == set()
    assert pg.changed_since(-1) is None and pg.changed_since(pg.changes + 1) is None
    for _ in range(CHANGE_LOG_MAX):
        pg.touched(("t", 3))
    assert pg.changed_since(mid) is None and pg.changed_since(pg.changes - 1) == {("t", 3)}
    pg.complete_all()
    assert pg.changed_since(pg.changes - 1) is None and pg.changed_since(pg.changes) == set()


def test_a_standing_watch_tells_the_fetch_parked_on_it_and_nothing_while_none_is():
    """A replica session's watch stays registered between its Fetches: parking one costs nothing
    per partition, and a notification with nobody parked is only counted."""
    pg = FetchPurgatory()
    watch = StandingWatch()
    pg.stand(watch, [K0, K1])
    assert not pg.watching(K0) and len(pg) == 0
    pg.on_append(K0, 10)                                   # nobody parked: dropped (but counted)
    op = fetch([], 1, True)
    pg.watch(op, watch)
    assert watch.op is op and pg.watching(K1) and len(pg) == 1
    pg.on_hw_move(K1, 10)                                  # a follower fetch is not woken by HW moves
    assert not op.done and op.changed == {K1}
    pg.on_append(K1, 10)
    assert op.done and op.changed == {K1}
    pg.close(op, watch)
    assert watch.op is None and not pg.watching(K1)
    busy = fetch([], 1, True)
    pg.watch(busy, watch)
    second = fetch([K0], 1, True)          # the watch is taken: parks on its own keys
    pg.watch(second, watch)
    assert watch.op is busy
    pg.on_state_change(K0)
    assert busy.done and second.done
    pg.close(second, watch)
    assert watch.op is busy, "closing another fetch leaves the watch's"
    pg.close(busy, watch)
    pg.stand(watch, [K1])                                  # the session forgot K0
    pg.watch(op2 := fetch([], 1, True), watch)
    pg.on_append(K0, 10)
    assert not op2.done and not pg.watching(K0)
    pg.stand(watch, [])
    assert not pg._by_key
