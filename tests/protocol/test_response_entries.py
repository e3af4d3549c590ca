"""The server counts every response's entries (`response_entries`) to decide
whether to encode it on the loop or on the decoder thread. The C count
(minibroker._speedups.response_entries, the default where it was built) and
the Python one agree on every message and limit, including where they stop
counting early."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.framing import _response_entries

speedups = pytest.importorskip("minibroker._speedups")

leaves = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2), st.binary(max_size=2))
inner_lists = st.lists(leaves, max_size=30)
entries = st.one_of(leaves, st.dictionaries(st.sampled_from(["partitions", "records", "error", "x"]),
                                            st.one_of(leaves, inner_lists), max_size=4))
messages = st.dictionaries(st.sampled_from(["topics", "error", "id", "groups", "session_id"]),
                           st.one_of(leaves, st.lists(entries, max_size=40)), max_size=5)


@settings(max_examples=400, deadline=None)
@given(messages, st.integers(0, 120))
def test_the_c_count_is_the_python_count(message: dict, limit: int) -> None:
    assert speedups.response_entries(message, limit) == _response_entries(message, limit)


def test_it_counts_partitions_of_topics_and_stops_past_the_limit() -> None:
    resp = {"error": 0, "topics": [{"topic": "t", "partitions": [{"partition": i} for i in range(5)]}] * 3}
    assert speedups.response_entries(resp, 100) == 3 + 15
    assert speedups.response_entries(resp, 4) == 3 + 5        # stops after the first topic passes 4
    assert speedups.response_entries({"topics": [1] * 10}, 4) == 10


def test_it_refuses_what_is_not_a_message() -> None:
    with pytest.raises(TypeError):
        speedups.response_entries([], 1)
    with pytest.raises(TypeError):
        speedups.response_entries({}, "1")
