"""Producer state rules (KIP-98 / KIP-360 without transactions), as unit
tests and as data-driven scenarios with golden output
(tests/replication/testdata/producer_state/*.scenario -> *.golden;
MINIBROKER_UPDATE_GOLDEN=1 rewrites the golden files)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from minibroker.errors import ErrorCode
from minibroker.replication.producer_state import (
    INT32_MAX,
    AppendCheck,
    ProducerState,
    in_sequence,
    last_sequence,
)

DATA = Path(__file__).parent / "testdata" / "producer_state"


class Log:
    """A log end offset and the producer state, as the partition driver keeps them."""

    def __init__(self) -> None:
        self.state = ProducerState("t-0")
        self.leo = 0

    def client(self, pid: int, epoch: int, seq: int, count: int, ts: int = -1) -> str:
        check = self.state.check_client_batch(pid, epoch, seq, count - 1)
        if check.kind == "duplicate":
            return f"duplicate base={check.base_offset} last={check.last_offset} ts={check.timestamp}"
        if check.kind == "reject":
            return f"error {check.error.name}"
        return self.replicate(pid, epoch, seq, count, ts)

    def replicate(self, pid: int, epoch: int, seq: int, count: int, ts: int = -1) -> str:
        base = self.leo
        self.leo += count
        self.state.on_batch(pid, epoch, seq, base, self.leo - 1, ts)
        return f"appended base={base} last={self.leo - 1}"

    def run(self, line: str) -> str:
        cmd, *args = line.split()
        n = [int(a) for a in args]
        if cmd == "client":
            return self.client(*n)
        if cmd == "replicate":
            return self.replicate(*n)
        if cmd == "truncate":
            self.state.truncate_to(n[0])
            self.leo = n[0]
            return f"leo={self.leo}"
        if cmd == "expire":
            gone = self.state.remove_expired(n[0], n[1])
            return f"expired={gone} producers={len(self.state)}"
        if cmd == "head":
            self.state.truncate_head(n[0])
            return f"producers={len(self.state)}"
        if cmd == "show":
            snap = self.state.snapshot()
            return "; ".join(f"pid={p} epoch={e} batches={[tuple(b) for b in bs]}"
                             for p, e, bs in snap["producers"]) or "(none)"
        raise ValueError(f"unknown command {cmd!r}")


def run_scenario(text: str) -> str:
    log = Log()
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            out.append(raw)
            continue
        out.append(f"{line}\n  => {log.run(line)}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("path", sorted(DATA.glob("*.scenario")), ids=lambda p: p.stem)
def test_scenario_output_matches_its_golden_file(path: Path) -> None:
    got = run_scenario(path.read_text())
    golden = path.with_suffix(".golden")
    if os.environ.get("MINIBROKER_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text()


def test_a_retried_batch_among_the_last_five_is_answered_with_its_original_offsets() -> None:
    log = Log()
    for i in range(5):
        log.client(1, 0, i * 2, 2)
    assert log.client(1, 0, 0, 2) == "duplicate base=0 last=1 ts=-1"
    assert log.client(1, 0, 8, 2) == "duplicate base=8 last=9 ts=-1"
    assert log.leo == 10


def test_a_sixth_batch_pushes_the_oldest_out_of_the_dedup_window() -> None:
    log = Log()
    for i in range(6):
        log.client(1, 0, i, 1)
    assert log.client(1, 0, 0, 1) == "error OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert log.client(1, 0, 1, 1) == "duplicate base=1 last=1 ts=-1"


def test_a_sequence_gap_is_out_of_order_and_appends_nothing() -> None:
    log = Log()
    log.client(1, 0, 0, 1)
    assert log.client(1, 0, 2, 1) == "error OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert log.leo == 1


def test_an_older_epoch_is_fenced_with_invalid_producer_epoch() -> None:
    log = Log()
    log.client(1, 3, 0, 1)
    assert log.client(1, 2, 1, 1) == "error INVALID_PRODUCER_EPOCH"


def test_a_newer_epoch_must_start_at_sequence_zero_and_resets_the_window() -> None:
    log = Log()
    log.client(1, 0, 0, 1)
    assert log.client(1, 1, 1, 1) == "error OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert log.client(1, 1, 0, 1) == "appended base=1 last=1"
    entry = log.state.entry(1)
    assert entry is not None and entry.epoch == 1 and len(entry.batches) == 1


def test_an_unknown_producer_is_accepted_at_any_sequence() -> None:
    assert Log().client(5, 0, 77, 1) == "appended base=0 last=0"


def test_an_idempotent_batch_without_epoch_or_sequence_is_an_invalid_record() -> None:
    assert ProducerState().check_client_batch(5, 0, -1, 0).error == ErrorCode.INVALID_RECORD


def test_sequences_wrap_at_int32_max() -> None:
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX, 1) == 0
    assert last_sequence(INT32_MAX - 1, 3) == 1
    assert in_sequence(INT32_MAX, 0)
    log = Log()
    log.client(1, 0, INT32_MAX - 1, 2)
    assert log.client(1, 0, 0, 1) == "appended base=2 last=2"


def test_truncation_forgets_the_batches_above_the_truncation_offset() -> None:
    log = Log()
    log.client(1, 0, 0, 2)
    log.client(1, 0, 2, 2)
    log.run("truncate 2")
    assert log.client(1, 0, 2, 2) == "appended base=2 last=3"


def test_log_start_moving_past_a_producer_removes_it() -> None:
    log = Log()
    log.client(1, 0, 0, 2)
    log.client(2, 0, 0, 2)
    log.state.truncate_head(2)
    assert log.state.entry(1) is None and log.state.entry(2) is not None


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 12), st.integers(1, 4)),
                max_size=40))
def test_snapshot_round_trip_gives_the_same_decisions(ops: list[tuple[int, int, int, int]]) -> None:
    log = Log()
    for op in ops:
        log.client(*op)
    restored = ProducerState.from_snapshot(log.state.snapshot(), "t-0")
    assert restored.snapshot() == log.state.snapshot()
    for pid, epoch, seq, count in ops:
        assert restored.check_client_batch(pid, epoch, seq, count - 1) == \
            log.state.check_client_batch(pid, epoch, seq, count - 1)


def test_a_snapshot_written_before_batches_kept_their_timestamp_loads_with_none() -> None:
    old = {"through": 4, "producers": [[7, 0, [[0, 1, 0, 1], [2, 3, 2, 3]]]]}
    restored = ProducerState.from_snapshot(old, "t-0")
    assert restored.check_client_batch(7, 0, 2, 1) == AppendCheck("duplicate", ErrorCode.NONE, 2, 3, timestamp=-1)
    assert restored.snapshot()["producers"] == [[7, 0, [[0, 1, 0, 1, -1], [2, 3, 2, 3, -1]]]]


def test_a_malformed_snapshot_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ProducerState.from_snapshot({"through": 1})
