"""send's one-pass append: minibroker._speedups.OpenAppend held to its Python twin (producer._OpenAppendPy),
record for record, on the same inputs: same answers, batches, accounting, wake-ups, errors and bytes."""
from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

from minibroker import records
from minibroker.client.accumulator import RecordAccumulator, record_size
from minibroker.client.producer import RecordFuture, _OpenAppendPy, open_append
from minibroker.client.types import TopicPartition
from minibroker.codec import GZIP, NONE

speedups = pytest.importorskip("minibroker._speedups")

TP = TopicPartition("t", 0)


class Side:
    """One accumulator with its appender (C or Python), a scripted clock and a wake-up count."""

    def __init__(self, make: Callable[..., Any], compression: int, batch_size: int, buffer_memory: int,
                 times: list[int]) -> None:
        self.acc = RecordAccumulator(batch_size=batch_size, buffer_memory=buffer_memory,
                                     new_builder=lambda *state: records.new_builder(compression, *state),
                                     decode=records.decode_rows)
        self.times = iter(times)
        self.wakes = 0
        self.append = make(self.acc, lambda: next(self.times), self._wake)
        self.batches: list[Any] = []

    def _wake(self) -> None:
        self.wakes += 1

    def step(self, key: bytes | None, value: bytes | None, max_request_size: int, now: int) -> Any:
        """The appender on the open batch; where it declines, the general path (`append`) as `_send`'s."""
        b = self.acc.open_batches.get(TP)
        if b is not None:
            fut = self.append(b, key, value, max_request_size)
            if fut is not None:
                return ("fast", fut._index, self.batches.index(fut._batch))
        size = record_size(key, value, None)
        if size > max_request_size or self.acc.buffered_bytes + size > self.acc.buffer_memory:
            return ("declined",)
        batch, index, new, _ = self.acc.append(TP, key, value, None, now, now, size)
        if new:
            self.batches.append(batch)
        return ("general", index, self.batches.index(batch))

    def state(self) -> tuple:
        return (self.acc.buffered_bytes, self.wakes, [
            (b.count, b.size, b.first_ts, b.max_ts, b.mixed_ts, b.closed) for b in self.batches])


def c_append(acc: RecordAccumulator, now_ms: Callable[[], int], wake: Callable[[], None]) -> Any:
    made = open_append(acc, now_ms, wake)
    assert isinstance(made, speedups.OpenAppend)
    return made


class _FrozenClock:
    """A `time` for the gzip module: aiokafka's gzip encoder writes the wall clock's second into each
    member's header (MTIME), so the two sides' bytes would differ when their batches are built on either
    side of a second boundary."""

    @staticmethod
    def time() -> float:
        return 1_700_000_000.0


@pytest.mark.parametrize("compression", [NONE, GZIP])
@pytest.mark.parametrize("seed", range(6))
def test_the_c_append_matches_its_python_twin(compression: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip
    monkeypatch.setattr(gzip, "time", _FrozenClock)
    rnd = random.Random(seed)
    steps = 400
    times = sorted(rnd.randrange(1000, 1010) for _ in range(steps))
    if seed % 2:
        rnd.shuffle(times)                       # out-of-order clocks: max_ts and mixed_ts both ways
    batch_size, memory = rnd.choice([200, 1000, 5000]), rnd.choice([800, 3000, 1 << 20])
    c = Side(c_append, compression, batch_size, memory, times)
    py = Side(_OpenAppendPy, compression, batch_size, memory, times)
    for i in range(steps):
        key = rnd.choice([None, b"", b"k" * rnd.randrange(1, 40)])
        value = rnd.choice([None, b"", b"v" * rnd.randrange(1, 300)])
        max_request_size = rnd.choice([60, 1 << 20])
        now = times[i]
        assert c.step(key, value, max_request_size, now) == py.step(key, value, max_request_size, now)
        assert c.state() == py.state()
        if rnd.random() < 0.02 and c.batches:        # a released batch frees its memory on both sides
            j = rnd.randrange(len(c.batches))
            c.acc.release(c.batches[j])
            py.acc.release(py.batches[j])
    assert [b.encoded() for b in c.batches] == [b.encoded() for b in py.batches]


class Huge:
    def __len__(self) -> int:
        return sys.maxsize


def test_it_declines_what_the_general_path_decides() -> None:
    for make in (c_append, _OpenAppendPy):
        acc = RecordAccumulator(batch_size=1000, buffer_memory=10_000)
        wakes: list[int] = []
        append = make(acc, lambda: 1000, lambda w=wakes: w.append(1))
        b, _, _, _ = acc.append(TP, None, b"v", None, 1000, 1000)
        before = acc.buffered_bytes
        assert append(b, None, b"v" * 2000, 1 << 20) is None          # over batch.size
        assert append(b, None, b"v" * 50, 60) is None                 # over max.request.size
        acc.buffer_memory = before + 10
        assert append(b, None, b"v" * 50, 1 << 20) is None            # over buffer.memory
        acc.buffer_memory = 10_000
        b.closed = True
        assert append(b, None, b"v", 1 << 20) is None
        b.closed = False
        assert append(b, Huge(), b"v", 1 << 20) is None               # a length that would overflow C's sums
        b.closed = False
        fut = append(b, b"k", b"v", 1 << 20)
        assert isinstance(fut, RecordFuture) and (fut._batch, fut._index) == (b, 1)
        assert (b.count, acc.buffered_bytes) == (2, before + record_size(b"k", b"v", None))
        b.encoded()
        b.closed = False                                               # builder gone: declined all the same
        assert append(b, None, b"v", 1 << 20) is None and b.count == 2 and not wakes
        full, _, _, _ = acc.append(TopicPartition("t", 1), None, b"v", None, 1000, 1000)
        fut = append(full, None, b"v" * (1000 - full.size - record_size(None, b"", None)), 1 << 20)
        assert fut is not None and full.size == full.max_size and wakes == [1]    # full: the sender is woken


@pytest.mark.parametrize("key, value", [(None, 5), (None, "text"), (3, b"v"), (b"k", ["x"])])
def test_bad_fields_raise_as_the_twin_does_with_nothing_changed(key: Any, value: Any) -> None:
    errors = []
    for make in (c_append, _OpenAppendPy):
        acc = RecordAccumulator(batch_size=1000)
        b, _, _, _ = acc.append(TP, None, b"v", None, 1000, 1000)
        before = (acc.buffered_bytes, b.count, b.size, b.max_ts, b.mixed_ts)
        append = make(acc, lambda: 1001, lambda: None)
        with pytest.raises(TypeError) as exc:
            append(b, key, value, 1 << 20)
        errors.append(str(exc.value))
        assert (acc.buffered_bytes, b.count, b.size, b.max_ts, b.mixed_ts) == before
    assert errors[0] == errors[1]


def test_the_constructor_checks_what_it_is_given() -> None:
    acc = RecordAccumulator()
    from minibroker.client.accumulator import ProducerBatch
    args: list[Any] = [ProducerBatch, RecordFuture, records.RecordsBuilder, acc, lambda: 0, lambda: None, [], 16]
    speedups.OpenAppend(*args)
    for i, bad in [(1, ProducerBatch), (2, RecordFuture), (0, RecordFuture), (3, object()), (4, 5), (6, ())]:
        with pytest.raises((TypeError, AttributeError)):      # AttributeError: a batch class without those slots
            speedups.OpenAppend(*args[:i], bad, *args[i + 1:])
    with pytest.raises(TypeError):
        speedups.OpenAppend(*args)(None, None, b"v")                  # four arguments, not three
    assert speedups.OpenAppend(*args)(object(), None, b"v", 100) is None    # not a batch: declined
