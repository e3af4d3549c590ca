"""The tail cache answers reads of recent appends exactly as the log would."""
from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minibroker.broker.partition import Partition
from minibroker.broker.tail import TailBudget, TailCache
from minibroker.metadata import PartitionRecord
from minibroker.records import build_batch, stamp
from minibroker.replication import KAFKA
from minibroker.storage import LogConfig, PartitionLog


def test_reads_whole_chunks_from_an_exact_start_within_limit_and_size():
    t = TailCache(max_bytes=100)
    t.on_append(0, 2, b"aa")
    t.on_append(2, 5, b"bbb")
    t.on_append(5, 6, b"c")
    assert t.read(0, 100, 6) == b"aabbbc"
    assert t.read(2, 100, 6) == b"bbbc"
    assert t.read(2, 100, 5) == b"bbb"          # the next chunk crosses the limit
    assert t.read(0, 4, 6) == b"aa"             # the next chunk would exceed max_bytes
    assert t.read(1, 100, 6) is None            # not a chunk start: ask the log
    assert t.read(2, 2, 6) is None              # the first chunk does not fit: ask the log
    assert t.read(0, 100, 1) is None            # the first chunk crosses the limit
    assert t.read(6, 100, 6) is None


def test_evicts_oldest_chunks_beyond_its_size_and_never_keeps_a_chunk_bigger_than_it():
    t = TailCache(max_bytes=4, budget=TailBudget(100))
    t.on_append(0, 1, b"aa")
    t.on_append(1, 2, b"bb")
    t.on_append(2, 3, b"cc")
    assert t.read(0, 100, 3) is None and t.read(1, 100, 3) == b"bbcc"
    t.on_append(3, 4, b"dddddd")
    assert len(t) == 0 and t.size == 0 and t.read(3, 100, 4) is None
    t.on_append(4, 5, b"ee")
    assert t.read(4, 100, 5) == b"ee"


def test_caches_sharing_a_budget_hold_at_most_its_bytes_together():
    budget = TailBudget(6)
    a, b = TailCache(max_bytes=4, budget=budget), TailCache(max_bytes=4, budget=budget)
    a.on_append(0, 1, b"aaaa")
    b.on_append(0, 1, b"bbb")                   # would make 7: not kept
    assert budget.used == 4 and b.read(0, 100, 1) is None
    b.on_append(1, 2, b"bb")
    assert budget.used == 6 and b.read(1, 100, 2) == b"bb"
    a.truncate(0)
    b.clear()
    assert budget.used == 0


def test_truncation_drops_chunks_at_or_above_the_new_end():
    t = TailCache()
    t.on_append(0, 2, b"aa")
    t.on_append(2, 4, b"bb")
    t.truncate(2)
    assert t.read(2, 100, 10) is None and t.read(0, 100, 10) == b"aa"


def test_a_gap_in_appends_restarts_the_cache():
    t = TailCache()
    t.on_append(0, 2, b"aa")
    t.on_append(7, 8, b"b")
    assert t.read(0, 100, 10) is None and t.read(7, 100, 10) == b"b"


ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("read"), st.integers(0, 40), st.integers(0, 2000), st.integers(0, 40)),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_partition_reads_equal_log_reads_through_appends_and_truncations(seq):
    with tempfile.TemporaryDirectory() as d:
        lg = PartitionLog(os.path.join(d, "t-0"), LogConfig())
        p = Partition("t", 0, node_id=1, log=lg, hw=0, sink=lambda e: None)
        p.tail.max_bytes = 600
        p.make_follower(PartitionRecord("t", 0, (1, 2), (1, 2), 2, 0, 0), 0)
        for op in seq:
            if op[0] == "append":
                payload = b"".join(build_batch([b"x" * 20] * op[2], timestamp_ms=1) for _ in range(op[1]))
                p.append_as_follower(stamp(payload, lg.log_end_offset, 0), 0)
            elif op[0] == "truncate":
                p.truncate_to(op[1], 0, "test")
            else:
                _, offset, max_bytes, limit = op
                leo = lg.log_end_offset
                offset = offset % (leo + 1)
                if offset < leo:
                    offset = lg.batch_containing(offset)[0]      # batch starts, where chunks start
                limit = offset + limit % (leo - offset + 1)
                got = p.read(offset, max_bytes, limit, True)
                cached = p.tail.read(offset, max_bytes, limit) if offset < limit else None
                if cached is not None:
                    assert got == cached == lg.read(offset, len(cached), limit, min_one_batch=False)
                else:
                    assert got == lg.read(offset, max_bytes, limit, min_one_batch=True)


def test_reading_what_was_just_appended_needs_no_file_read(tmp_path):
    lg = PartitionLog(os.path.join(tmp_path, "t-0"), LogConfig())
    p = Partition("t", 0, node_id=1, log=lg, hw=0, sink=lambda e: None)
    p.make_leader(PartitionRecord("t", 0, (1,), (1,), 1, 3, 0), 0, profile=KAFKA, lag_max_ms=1000,
                  min_isr=1, broker_epoch=1, eligibility=[])
    p.append_as_leader(build_batch([b"a"], timestamp_ms=0), 0)
    p.append_as_leader(build_batch([b"b", b"c"], timestamp_ms=0), 0)
    expected = lg.read(1, 1 << 20)

    def no_file_reads(*a, **k):
        raise AssertionError("read the log file")
    lg.read = no_file_reads
    assert p.read(1, 1 << 20, 3, True) == expected
