"""Delayed produces and parked fetches: who wakes them and when."""
from __future__ import annotations

import asyncio

from minibroker.broker.purgatory import DelayedFetch, DelayedProduce, FetchPurgatory, StandingWatch
from minibroker.errors import ErrorCode

K0 = ("t", 0)
K1 = ("t", 1)


async def test_delayed_produce_entries_start_as_request_timed_out():
    op = DelayedProduce()
    entry: dict = {"partition": 0, "error": 0}
    op.add(entry, K0)
    assert entry["error"] == ErrorCode.REQUEST_TIMED_OUT


async def test_delayed_produce_resolves_when_every_partition_completed():
    op = DelayedProduce()
    e0: dict = {}
    e1: dict = {}
    w0, w1 = op.add(e0, K0), op.add(e1, K1)
    waiting = asyncio.ensure_future(op.wait(60_000))
    w0.complete(ErrorCode.NONE)
    await asyncio.sleep(0)
    assert not waiting.done()
    w1.complete(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    assert await waiting is True
    assert e0["error"] == 0 and e1["error"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert op.pending() == []


async def test_delayed_produce_timeout_keeps_resolved_partitions_and_times_out_the_rest():
    op = DelayedProduce()
    e0: dict = {}
    e1: dict = {}
    w0, _ = op.add(e0, K0), op.add(e1, K1)
    w0.complete(ErrorCode.NONE)
    assert await op.wait(1) is False
    assert e0["error"] == 0 and e1["error"] == ErrorCode.REQUEST_TIMED_OUT
    assert [w.key for w in op.pending()] == [K1]


async def test_a_waiter_completes_once():
    op = DelayedProduce()
    e: dict = {}
    w = op.add(e, K0)
    w.complete(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    w.complete(ErrorCode.NONE)
    assert e["error"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and op.remaining == 0


async def test_follower_fetch_wakes_on_append_not_on_hw_move():
    p = FetchPurgatory()
    op = DelayedFetch([K0], needed=1, follower=True)
    p.watch(op)
    p.on_hw_move(K0, 100)
    assert not op.future.done()               # F10: HW-only changes do not wake followers
    p.on_append(K0, 10)
    assert op.future.done()


async def test_consumer_fetch_wakes_on_hw_move_not_on_append():
    p = FetchPurgatory()
    op = DelayedFetch([K0], needed=1, follower=False)
    p.watch(op)
    p.on_append(K0, 100)
    assert not op.future.done()               # uncommitted data is not readable
    p.on_hw_move(K0, 10)
    assert op.future.done()


async def test_fetch_waits_for_min_bytes_summed_over_partitions():
    p = FetchPurgatory()
    op = DelayedFetch([K0, K1], needed=100, follower=True)
    p.watch(op)
    p.on_append(K0, 60)
    assert not op.future.done()
    p.on_append(K1, 40)
    assert op.future.done()


async def test_unknown_byte_count_completes_the_fetch():
    p = FetchPurgatory()
    op = DelayedFetch([K0], needed=1 << 20, follower=False)
    p.watch(op)
    p.on_hw_move(K0, None)
    assert op.future.done()


async def test_state_change_completes_every_fetch_on_that_partition_only():
    p = FetchPurgatory()
    a = DelayedFetch([K0], needed=1, follower=True)
    b = DelayedFetch([K0, K1], needed=1, follower=False)
    c = DelayedFetch([K1], needed=1, follower=False)
    for op in (a, b, c):
        p.watch(op)
    p.on_state_change(K0)
    assert a.future.done() and b.future.done() and not c.future.done()


async def test_closed_fetch_is_no_longer_watched():
    p = FetchPurgatory()
    op = DelayedFetch([K0, K1], needed=1, follower=True)
    p.watch(op)
    assert len(p) == 1 and p.watching(K0) and p.watching(K1)
    p.close(op)
    assert len(p) == 0 and not p.watching(K0)
    p.on_append(K0, 10)
    assert not op.future.done()


async def test_fetch_wait_ends_at_max_wait():
    op = DelayedFetch([K0], needed=1, follower=True)
    await op.wait(1)
    assert op.future.done()


async def test_complete_all_answers_every_parked_fetch():
    p = FetchPurgatory()
    ops = [DelayedFetch([K0], needed=1, follower=bool(i % 2)) for i in range(4)]
    for op in ops:
        p.watch(op)
    p.complete_all()
    assert all(op.future.done() for op in ops)


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


async def test_a_standing_watch_tells_the_fetch_parked_on_it_and_nothing_while_none_is():
    """A replica session's watch stays registered between its Fetches: parking one costs nothing
    per partition, and a notification with nobody parked is only counted."""
    pg = FetchPurgatory()
    watch = StandingWatch()
    pg.stand(watch, [K0, K1])
    assert not pg.watching(K0) and len(pg) == 0
    pg.on_append(K0, 10)                                   # nobody parked: dropped (but counted)
    op = DelayedFetch([], 1, follower=True)
    pg.watch(op, watch)
    assert watch.op is op and pg.watching(K1) and len(pg) == 1
    pg.on_hw_move(K1, 10)                                  # a follower fetch is not woken by HW moves
    assert not op.future.done() and op.changed == {K1}
    pg.on_append(K1, 10)
    assert op.future.done() and op.changed == {K1}
    pg.close(op, watch)
    assert watch.op is None and not pg.watching(K1)
    busy = DelayedFetch([], 1, follower=True)
    pg.watch(busy, watch)
    second = DelayedFetch([K0], 1, follower=True)          # the watch is taken: parks on its own keys
    pg.watch(second, watch)
    assert watch.op is busy
    pg.on_state_change(K0)
    assert busy.future.done() and second.future.done()
    pg.close(second, watch)
    assert watch.op is busy, "closing another fetch leaves the watch's"
    pg.close(busy, watch)
    pg.stand(watch, [K1])                                  # the session forgot K0
    pg.watch(op2 := DelayedFetch([], 1, follower=True), watch)
    pg.on_append(K0, 10)
    assert not op2.future.done() and not pg.watching(K0)
    pg.stand(watch, [])
    assert not pg._by_key
