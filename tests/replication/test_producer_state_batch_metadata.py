"""ProducerState.on_batch makes its BatchMetadata without the NamedTuple's Python __new__: the
record it keeps must be the one the constructor makes (same type, fields, equality, snapshot)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.replication.producer_state import (BATCHES_TO_RETAIN, INT32_MAX, BatchMetadata, ProducerState,
                                                   last_sequence)

batches = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, INT32_MAX),
                             st.integers(0, 50), st.integers(-1, 2**63 - 1)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(batches)
def test_on_batch_keeps_what_the_constructor_makes(spec: list[tuple[int, int, int, int, int]]) -> None:
    state = ProducerState("t-0")
    expected: dict[int, tuple[int, list[BatchMetadata]]] = {}
    offset = 0
    for pid, epoch, first_seq, delta, ts in spec:
        state.on_batch(pid, epoch, first_seq, offset, offset + delta, ts)
        kept = expected.get(pid)
        if kept is None or kept[0] != epoch:
            kept = expected[pid] = (epoch, [])
        kept[1].append(BatchMetadata(first_seq, last_sequence(first_seq, delta), offset, offset + delta, ts))
        del kept[1][:-BATCHES_TO_RETAIN]
        offset += delta + 1
    for pid, (epoch, metas) in expected.items():
        entry = state.entry(pid)
        assert entry is not None and entry.epoch == epoch
        assert entry.batches == metas
        for got, want in zip(entry.batches, metas, strict=True):
            assert type(got) is BatchMetadata
            assert got._asdict() == want._asdict() and got.last_offset == want.last_offset
    assert ProducerState.from_snapshot(state.snapshot()).snapshot() == state.snapshot()
