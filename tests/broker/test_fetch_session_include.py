"""FetchSession.include applies KS4 itself: it answers and remembers exactly as `must_respond` followed by
the bookkeeping of what the follower was told."""
from __future__ import annotations

from hypothesis import given, strategies as st

from minibroker.broker.fetch_session import FetchSession

READS = st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from([0, 0, 6]), st.integers(0, 2),
                           st.integers(0, 1), st.booleans(), st.booleans()), max_size=40)


def reference(s: FetchSession, key, full, error, hw, start, has_records, diverging) -> bool:
    if not full and not s.must_respond(key, error, hw, start, has_records, diverging):
        return False
    if error:
        s.told.pop(key, None)
    else:
        s.told[key] = (hw, start)
    return True


@given(READS)
def test_include_answers_and_remembers_as_must_respond_says(reads):
    a, b = FetchSession(1, 2, 1), FetchSession(1, 2, 1)
    for p, full, error, hw, start, has_records, diverging in reads:
        key = ("t", p)
        assert a.include(key, full, error, hw, start, has_records, diverging) == \
            reference(b, key, full, error, hw, start, has_records, diverging)
        assert a.told == b.told
