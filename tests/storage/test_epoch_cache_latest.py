"""LeaderEpochCache.latest_epoch / latest_entry are plain attributes: after every change they name the last
entry (None when empty)."""
from __future__ import annotations

from hypothesis import given, strategies as st

from minibroker.storage.epoch_cache import LeaderEpochCache

OPS = st.lists(st.tuples(st.sampled_from(["assign", "end", "start", "clear"]), st.integers(0, 6),
                         st.integers(0, 30)), max_size=40)


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30)), max_size=5), OPS)
def test_latest_follows_every_change(initial, ops):
    cache = LeaderEpochCache(initial)
    for op, epoch, offset in [("none", 0, 0), *ops]:
        if op == "assign":
            cache.assign(epoch, offset)
        elif op == "end":
            cache.truncate_from_end(offset)
        elif op == "start":
            cache.truncate_from_start(offset)
        elif op == "clear":
            cache.clear()
        entries = cache.entries
        assert cache.latest_entry == (entries[-1] if entries else None)
        assert cache.latest_epoch == (entries[-1][0] if entries else None)
