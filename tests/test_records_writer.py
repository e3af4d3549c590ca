"""minibroker._speedups.RecordsWriter, through records.new_builder: the batches
it frames are byte for byte what aiokafka's builder makes of the same records,
and bad input is refused without touching what was appended."""
import random

import pytest

from minibroker import codec, records

speedups = pytest.importorskip("minibroker._speedups")
from aiokafka.record._crecords import DefaultRecordBatchBuilder  # type: ignore[import-untyped]  # noqa: E402


def random_records(rng: random.Random, n: int) -> list:
    out, ts = [], 1_700_000_000_000
    for _ in range(n):
        ts += rng.randrange(-50, 5000)        # timestamps may go back: deltas are signed varlongs
        key = None if rng.random() < 0.4 else rng.randbytes(rng.randrange(0, 300))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 63, 64, 127, 128, 8191, 20000]))
        headers = [] if rng.random() < 0.6 else [
            (f"h{j}" + "é" * rng.randrange(3), None if rng.random() < 0.3 else rng.randbytes(rng.randrange(200)))
            for j in range(rng.randrange(4))]
        out.append((ts, key, value, headers))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_batches_are_the_bytes_aiokafkas_builder_makes(seed):
    rng = random.Random(seed)
    state = rng.choice([(-1, -1, -1), (4001, 3, 7), (2**62, 32767, 2**31 - 1)])
    ours = records.new_builder(codec.NONE, *state)
    theirs = DefaultRecordBatchBuilder(records.MAGIC, codec.NONE, 0, *state, 1 << 62)
    assert isinstance(ours, records.RecordsBuilder)
    rows = random_records(rng, rng.randrange(1, 200))
    for i, (ts, key, value, headers) in enumerate(rows):
        ours.append(i, ts, key, value, headers)
        theirs.append(i, ts, key, value, headers)
    built = ours.build()
    assert built == bytes(theirs.build())
    got = list(records.iter_records(built))
    assert [(r.key, r.value, r.timestamp) for r in got] == [(k, v, ts) for ts, k, v, _ in rows]


def test_the_idempotent_state_set_after_appends_is_in_the_header():
    b = records.new_builder()
    b.append(0, 5, None, b"v", [])
    b.set_producer_state(77, 2, 40)
    h = records.parse_header(b.build())
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (77, 2, 40, 1)


def test_memoryview_and_bytearray_fields_encode_as_bytes():
    a, b = records.new_builder(), records.new_builder()
    a.append(0, 9, bytearray(b"k"), memoryview(b"value"), [])
    b.append(0, 9, b"k", b"value", [])
    assert a.build() == b.build()


@pytest.mark.parametrize("args, message", [
    ((0, 1, "text", b"v", []), "key must be bytes"),
    ((0, 1, None, 12, []), "value must be bytes"),
    ((0, 1, None, b"v", [("h", "str")]), "header's value"),
    ((0, 1, None, b"v", [(b"h", b"v")]), "header must be"),
    ((0, 1, None, b"v", "headers"), "headers must be"),
    ((0, None, None, b"v", []), "integer"),
])
def test_bad_fields_are_refused_and_leave_the_section_as_it_was(args, message):
    w = speedups.RecordsWriter()
    w.append(0, 1, None, b"first", [])
    before = (w.records(), w.count, w.max_timestamp)
    with pytest.raises(TypeError, match=message):
        w.append(*args)
    assert (w.records(), w.count, w.max_timestamp) == before


def test_an_empty_writer_describes_no_records():
    w = speedups.RecordsWriter()
    assert (w.count, w.nbytes, w.first_timestamp, w.max_timestamp, w.records()) == (0, 0, -1, -1, b"")


def test_compressed_batches_still_use_aiokafkas_builder():
    assert isinstance(records.new_builder(codec.GZIP), DefaultRecordBatchBuilder)


def test_finish_refuses_an_empty_batch():
    with pytest.raises(ValueError, match="at least one record"):
        speedups.RecordsWriter().finish(-1, -1, -1, lambda _view: 0)
