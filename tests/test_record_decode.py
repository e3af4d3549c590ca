"""The consumer's decoder (records.decode_into): the C walk gives exactly what the aiokafka
path gives, for every record shape, offset window, timestamp type and codec, and refuses
corrupt sections without appending anything."""
from __future__ import annotations

import struct

import pytest

from minibroker import codec, records
from minibroker.client.types import ConsumerRecord
from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import build_batch, decode_into, iter_records, stamp

SHAPES = [b"plain", None, (b"k", b"v"), (None, b""), (b"", None, 1_700_000_000_123),
          (b"key", b"value", 1_700_000_000_000, [("h1", b"x"), ("h\u00e9", None), ("", b"")]),
          (b"k" * 300, b"v" * 70_000)]


def _log(compression: int = codec.NONE) -> bytes:
    first = stamp(build_batch(SHAPES, timestamp_ms=1_600_000_000_000, compression=compression), 10, 4)
    second = stamp(build_batch([b"a", b"b", b"c"], timestamp_ms=5, compression=compression), 10 + len(SHAPES), 5)
    return first + second


def _reference(buf: bytes, min_offset: int, stop: int) -> list[ConsumerRecord]:
    out = []
    for h in records.iter_batch_headers(buf):
        for r in iter_records(buf[h.position:h.position + h.size], min_offset=min_offset, with_headers=True):
            if 0 <= stop <= r.offset:
                return out
            out.append(ConsumerRecord("t", 3, r.offset, r.timestamp, r.key, r.value, r.headers, h.leader_epoch,
                                      1 if h.attributes & records.TIMESTAMP_TYPE_LOG_APPEND else 0))
    return out


@pytest.mark.parametrize("compression", [codec.NONE, codec.GZIP])
@pytest.mark.parametrize("window", [(0, -1), (12, -1), (10, 13), (16, 18), (30, -1), (0, 10)])
def test_decode_into_matches_the_aiokafka_path(compression: int, window: tuple[int, int]) -> None:
    buf = _log(compression)
    got: list[ConsumerRecord] = []
    nxt = decode_into(got, buf, "t", 3, ConsumerRecord, min_offset=window[0], stop_offset=window[1])
    want = _reference(buf, *window)
    assert got == want
    assert all(type(r) is ConsumerRecord for r in got)
    assert nxt == (want[-1].offset + 1 if want else None)


def test_the_c_decoder_is_built_here() -> None:
    assert records._c_decode is not None, "the C extension minibroker._recordscan was not built"


def test_log_append_time_batches_give_every_record_the_max_timestamp() -> None:
    buf = bytearray(stamp(build_batch([b"a", b"b"], timestamp_ms=7), 0, 0))
    attr_pos, max_ts_pos = 21, 35
    struct.pack_into(">h", buf, attr_pos, records.TIMESTAMP_TYPE_LOG_APPEND)
    struct.pack_into(">q", buf, max_ts_pos, 99)
    struct.pack_into(">I", buf, records.CRC_POS, records.crc32c(memoryview(buf)[records.CRC_START:]))
    got: list[ConsumerRecord] = []
    decode_into(got, bytes(buf), "t", 0, ConsumerRecord)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(99, 1), (99, 1)]


@pytest.mark.parametrize("compression", [codec.NONE, codec.GZIP])     # the C walk, and aiokafka's for a codec
def test_both_decoders_say_which_timestamp_a_record_carries(compression: int) -> None:
    created = stamp(build_batch([b"a"], timestamp_ms=7, compression=compression), 0, 0)
    appended = stamp(records.with_log_append_time(build_batch([b"b"], timestamp_ms=7, compression=compression), 99),
                     1, 0)
    got: list[ConsumerRecord] = []
    decode_into(got, created + appended, "t", 0, ConsumerRecord)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in got] == [(0, 7, 0), (1, 99, 1)]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_a_corrupt_records_section_appends_nothing_and_is_corrupt_message(cut: int) -> None:
    good = stamp(build_batch([b"a", b"b", b"c"], timestamp_ms=1), 0, 0)
    assert records._c_decode is not None
    section = good[records.HEADER_SIZE:-cut]            # records section cut short, count still 3
    out: list[ConsumerRecord] = [ConsumerRecord("x", 0, 0, 0, None, None)]
    with pytest.raises(ValueError):
        records._c_decode(section, 3, 0, 1, None, 0, -1, ConsumerRecord, "t", 0, 0, out)
    assert len(out) == 1
    bad = bytearray(good)
    bad[-2] ^= 0xFF                                       # CRC no longer matches
    with pytest.raises(KafkaError) as e:
        decode_into([], bytes(bad), "t", 0, ConsumerRecord)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("window", [(0, -1), (12, -1), (10, 13)])
def test_without_the_c_extension_decode_into_gives_the_same_records(monkeypatch, window: tuple[int, int]) -> None:
    buf = _log()
    with_c: list[ConsumerRecord] = []
    decode_into(with_c, buf, "t", 3, ConsumerRecord, min_offset=window[0], stop_offset=window[1])
    monkeypatch.setattr(records, "_c_decode", None)     # as where minibroker was installed without a compiler
    without: list[ConsumerRecord] = []
    nxt = decode_into(without, buf, "t", 3, ConsumerRecord, min_offset=window[0], stop_offset=window[1])
    assert without == with_c == _reference(buf, *window)
    assert nxt == (without[-1].offset + 1 if without else None)


def test_the_c_decoders_records_are_outside_the_cyclic_gc() -> None:
    """Each record holds only atoms, so the C decoder untracks it (and its header tuples) as
    it makes it: the collector never walks the records a consumer buffers (with them tracked,
    decoding a poll's worth cost 3-4x as much, most of it in collections)."""
    import gc
    out: list[ConsumerRecord] = []
    decode_into(out, _log(), "t", 3, ConsumerRecord)
    assert out and not any(gc.is_tracked(r) or gc.is_tracked(r.headers) for r in out)
    assert any(r.headers for r in out) and not any(gc.is_tracked(h) for r in out for h in r.headers)
    assert out == _reference(_log(), 0, -1)
    with pytest.raises(TypeError):
        records._c_decode(b"", 0, 0, 0, None, 0, -1, ConsumerRecord, ["not", "a", "str"], 0, 0, [])
