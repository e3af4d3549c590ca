"""The record batch format: client encode/decode, broker validate/stamp/scan."""
from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings, strategies as st

from minibroker import codec
from minibroker.errors import ErrorCode, KafkaError
from minibroker.records import (
    CRC_POS, CRC_START, EPOCH_POS, HEADER_SIZE, MAGIC, TIMESTAMP_TYPE_LOG_APPEND, BatchPosition,
    Record, build_batch, decode_rows, encode_batch, iter_batch_headers, iter_records, needs_recompression,
    parse_header, recompress, scan_headers, stamp, validate_batches, with_log_append_time,
)
from minibroker.testing.batches import batch_of, raw_record

T = 1_700_000_000_000


def corrupt_code(buf, **kw) -> ErrorCode:
    with pytest.raises(KafkaError) as ei:
        validate_batches(buf, **kw)
    return ei.value.code


# ---------------------------------------------------------------- layout

def test_header_is_61_bytes_with_fields_at_documented_offsets():
    b = build_batch([(b"k", b"v", T), (None, b"w", T + 5)], producer_id=7, producer_epoch=1, base_sequence=3)
    assert HEADER_SIZE == 61
    base, length, epoch, magic, crc = struct.unpack_from(">qiibI", b, 0)
    assert (base, length, epoch, magic) == (0, len(b) - 12, -1, MAGIC)
    attrs, lod, first_ts, max_ts, pid, pepoch, seq, count = struct.unpack_from(">hiqqqhii", b, 21)
    assert (attrs, lod, first_ts, max_ts, pid, pepoch, seq, count) == (0, 1, T, T + 5, 7, 1, 3, 2)
    assert crc == crc32c(b[21:])


def test_crc_covers_everything_after_the_crc_field_only():
    b = bytearray(build_batch([b"a"]))
    struct.pack_into(">qii", b, 0, 123456, len(b) - 12, 99)
    h = parse_header(b)
    assert (h.base_offset, h.leader_epoch) == (123456, 99)
    assert list(iter_batch_headers(b, verify_crc=True))  # still valid: not CRC'd


# ---------------------------------------------------------------- client round trip

def test_values_keys_timestamps_and_headers_round_trip():
    b = build_batch([b"plain", (b"k", None), (None, b"v", T + 7), (b"k2", b"v2", T - 3, [("h", b"1"), ("n", None)])],
                    timestamp_ms=T)
    recs = list(iter_records(b))
    assert recs == [Record(0, T, None, b"plain"), Record(1, T, b"k", None), Record(2, T + 7, None, b"v"),
                    Record(3, T - 3, b"k2", b"v2")]
    with_h = list(iter_records(b, with_headers=True))
    assert with_h[3].headers == (("h", b"1"), ("n", None))
    assert parse_header(b).max_timestamp == T + 7


def test_iter_records_follows_stamped_offsets_and_skips_below_min_offset():
    two = stamp(build_batch([b"a", b"b", b"c"]) + build_batch([b"d", b"e"]), 40, 3)
    assert [r.offset for r in iter_records(two)] == [40, 41, 42, 43, 44]
    assert [r.value for r in iter_records(two, min_offset=42)] == [b"c", b"d", b"e"]


def test_log_append_time_batches_report_max_timestamp_for_every_record():
    b = batch_of([raw_record(0, 0, None, b"x"), raw_record(1, 5, None, b"y")], first_timestamp=T,
                 max_timestamp=T + 100, attributes=TIMESTAMP_TYPE_LOG_APPEND)
    assert [r.timestamp for r in iter_records(b)] == [T + 100, T + 100]


def test_empty_record_list_is_refused_by_the_client():
    with pytest.raises(ValueError):
        build_batch([])


def test_client_detects_payload_not_matching_header():
    b = batch_of([raw_record(0, 0, None, b"x")], record_count=2, last_offset_delta=1)
    with pytest.raises(KafkaError) as ei:
        list(iter_records(b))
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


def test_client_detects_garbage_payload_and_bad_record_lengths():
    for payload in (b"\xc1\xc1", raw_record(0, 0, b"k", b"x")[:-1], b"\x7f" + raw_record(0)[1:]):
        b = encode_batch(payload, record_count=1, first_timestamp=T, max_timestamp=T)
        with pytest.raises(KafkaError) as ei:
            list(iter_records(b))
        assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=200)),
                          st.integers(0, 2**41)), min_size=1, max_size=40),
       st.integers(0, 2**40), st.integers(0, 2**31 - 1))
def test_any_records_round_trip_through_stamp(records, base, epoch):
    b = stamp(build_batch(records), base, epoch)
    got = list(iter_records(b))
    assert [(r.key, r.value, r.timestamp) for r in got] == records
    assert [r.offset for r in got] == list(range(base, base + len(records)))
    assert parse_header(b).leader_epoch == epoch


# ---------------------------------------------------------------- broker validation

def test_validate_summarises_several_batches_without_decoding():
    buf = build_batch([(None, b"a", T)]) + build_batch([(None, b"b", T + 9), (None, b"c", T + 1)])
    info = validate_batches(buf)
    assert (info.batch_count, info.record_count, info.offset_count) == (2, 3, 3)
    assert (info.first_timestamp, info.max_timestamp, info.size) == (T, T + 9, len(buf))
    assert [h.position for h in info.batches] == [0, len(build_batch([(None, b"a", T)]))]


def test_empty_payload_is_an_invalid_request():
    assert corrupt_code(b"") == ErrorCode.INVALID_REQUEST


def test_batch_above_max_message_bytes_is_message_too_large():
    b = build_batch([b"x" * 1000])
    assert corrupt_code(b, max_message_bytes=len(b) - 1) == ErrorCode.MESSAGE_TOO_LARGE
    validate_batches(b, max_message_bytes=len(b))


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, -1])
def test_truncated_batch_is_corrupt(cut):
    b = build_batch([b"hello", b"world"])
    assert corrupt_code(b[:cut]) == ErrorCode.CORRUPT_MESSAGE


def test_trailing_garbage_after_a_batch_is_corrupt():
    b = build_batch([b"hello"])
    assert corrupt_code(b + b"\x00" * 5) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("field,fmt,pos,value", [
    ("magic", ">b", 16, 1),
    ("length below header", ">i", 8, 10),
    ("negative length", ">i", 8, -5),
    ("base offset not 0", ">q", 0, 5),
])
def test_bad_header_fields_are_corrupt(field, fmt, pos, value):
    b = bytearray(build_batch([b"hello"]))
    struct.pack_into(fmt, b, pos, value)
    assert corrupt_code(bytes(b)) == ErrorCode.CORRUPT_MESSAGE, field


def _reframe(b: bytearray) -> bytes:
    struct.pack_into(">I", b, CRC_POS, crc32c(bytes(b[CRC_START:])))
    return bytes(b)


@pytest.mark.parametrize("fmt,pos,value", [
    (">h", 21, 0x05),       # compression codec 5 does not exist
    (">h", 21, 0x01),       # gzip, but the records are not gzip data
    (">h", 21, 0x40),       # unknown attribute bit
    (">i", 57, 5),          # record count != last_offset_delta + 1
    (">i", 23, -1),         # negative last offset delta
    (">i", 57, 0),          # zero records
])
def test_crc_valid_but_inconsistent_headers_are_corrupt(fmt, pos, value):
    b = bytearray(build_batch([b"hello"]))
    struct.pack_into(fmt, b, pos, value)
    assert corrupt_code(_reframe(b)) == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_flipped_bit_in_the_crc_region_is_detected(data):
    b = bytearray(build_batch([(b"key", b"value" * 10, T)] * 5))
    pos = data.draw(st.integers(CRC_POS, len(b) - 1))
    bit = data.draw(st.integers(0, 7))
    b[pos] ^= 1 << bit
    assert corrupt_code(bytes(b)) == ErrorCode.CORRUPT_MESSAGE


def test_error_messages_name_the_position():
    good = build_batch([b"a"])
    bad = bytearray(build_batch([b"b"]))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError, match=f"byte {len(good)}"):
        validate_batches(good + bytes(bad))


# ---------------------------------------------------------------- stamping and scanning

def test_stamp_assigns_consecutive_base_offsets_and_epoch_without_touching_crc():
    a, b = build_batch([b"1", b"2", b"3"]), build_batch([b"4", b"5"])
    out = stamp(a + b, 100, 7)
    assert out[CRC_POS:CRC_POS + 4] == a[CRC_POS:CRC_POS + 4]
    assert out[len(a):][21:] == b[21:]
    assert list(scan_headers(out, verify_crc=True)) == [
        BatchPosition(0, 100, 102, 7, len(a)), BatchPosition(len(a), 103, 104, 7, len(b))]
    assert struct.unpack_from(">i", out, EPOCH_POS)[0] == 7


def test_scan_headers_raises_on_a_torn_tail():
    out = stamp(build_batch([b"1"]) * 2, 0, 0)
    with pytest.raises(KafkaError) as ei:
        list(scan_headers(out[:-3]))
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_single_batch_fast_path_agrees_with_full_validation(data):
    from minibroker.records import single_producer_batch
    b = bytearray(build_batch([(b"k", b"v" * data.draw(st.integers(0, 50)), T)] * data.draw(st.integers(1, 4))))
    mutation = data.draw(st.sampled_from(["none", "flip", "cut", "extend", "two"]))
    if mutation == "flip":
        b[data.draw(st.integers(0, len(b) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif mutation == "cut":
        b = b[: data.draw(st.integers(0, len(b) - 1))]
    elif mutation == "extend":
        b += b"\x00"
    elif mutation == "two":
        b += build_batch([b"x"])
    limit = data.draw(st.one_of(st.none(), st.integers(0, 500)))
    try:
        fast = single_producer_batch(bytes(b), limit)
    except KafkaError:
        fast = None
    try:
        info = validate_batches(bytes(b), max_message_bytes=limit)
    except KafkaError:
        info = None
    if fast is not None:
        assert info is not None and info.batch_count == 1
        h = info.batches[0]
        assert fast == (h.size, h.last_offset_delta, h.max_timestamp)
    elif info is not None:
        assert info.batch_count > 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_batch_headers_agrees_with_iter_batch_headers_on_any_mutation(data):
    """The follower's one-pass header parse gives the same headers, or the same CORRUPT_MESSAGE; its C
    version the same headers, or None where the Python twin raises."""
    from minibroker import records
    from minibroker.records import batch_headers, batch_headers_py
    b = bytearray(b"".join(stamp(build_batch([b"v" * data.draw(st.integers(0, 30))] * data.draw(st.integers(1, 3)),
                                             timestamp_ms=T), i * 10, 3) for i in range(data.draw(st.integers(1, 3)))))
    for _ in range(data.draw(st.integers(0, 2))):
        mutation = data.draw(st.sampled_from(["flip", "cut", "extend", "field"]))
        if mutation == "flip" and b:
            b[data.draw(st.integers(0, len(b) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        elif mutation == "cut":
            b = b[: data.draw(st.integers(0, len(b)))]
        elif mutation == "extend":
            b += bytes(data.draw(st.binary(max_size=70)))
        elif mutation == "field" and len(b) >= 61:
            pos, fmt = data.draw(st.sampled_from([(8, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (57, ">i"),
                                                  (0, ">q")]))
            struct.pack_into(fmt, b, pos, data.draw(st.integers(-3, 70)))
    try:
        want: object = list(iter_batch_headers(bytes(b), verify_crc=True))
    except KafkaError as exc:
        want = (exc.code, exc.message)
    for parse in (batch_headers, batch_headers_py):
        try:
            got: object = parse(bytes(b))
        except KafkaError as exc:
            got = (exc.code, exc.message)
        assert got == want
    if records._c_batch_headers is not None:
        c = records._c_batch_headers(bytearray(b), records.BatchHeader, crc32c)
        assert c == (want if isinstance(want, list) else None)
        assert c is None or all(type(h) is records.BatchHeader for h in c)


# ---------------------------------------------------------------- Kafka records, compression, payload checks

def test_the_compiled_aiokafka_record_code_is_used():
    import aiokafka.record._crecords.default_records as c
    from minibroker import record_check, records
    assert c.__file__.endswith(".so")
    assert records.DefaultRecordBatch is c.DefaultRecordBatch is record_check.DefaultRecordBatch
    assert records.DefaultRecordBatchBuilder is c.DefaultRecordBatchBuilder


def test_records_are_kafkas_varint_encoding():
    b = build_batch([(b"k", b"v", T, [("h", b"1")])])
    assert b[HEADER_SIZE:] == raw_record(0, 0, b"k", b"v", [("h", b"1")])


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip_and_pass_validation_as_they_came(scanner, name):
    from minibroker.codec import codec_id
    recs = [(b"k%d" % i, b"value-%d" % i * 20, T + i) for i in range(50)]
    b = build_batch(recs, compression=codec_id(name))
    assert parse_header(b).attributes & 0x07 == codec_id(name)
    assert len(b) < len(build_batch(recs))
    info = validate_batches(b)
    assert (info.record_count, info.max_timestamp) == (50, T + 49)
    assert [(r.key, r.value, r.timestamp) for r in iter_records(stamp(b, 10, 1))] == recs


def test_a_77_byte_batch_claiming_2_pow_31_minus_1_records_is_invalid_record(scanner):
    from minibroker.records import single_producer_batch
    n = 2**31 - 1
    b = batch_of([raw_record(0, 0, None, b"x" * 9)], record_count=n, last_offset_delta=n - 1)
    assert len(b) == 77
    assert corrupt_code(b) == ErrorCode.INVALID_RECORD
    with pytest.raises(KafkaError) as ei:
        single_producer_batch(b)
    assert ei.value.code == ErrorCode.INVALID_RECORD


@pytest.fixture(params=["c", "aiokafka"])
def scanner(request, monkeypatch):
    """Both implementations of the leader's payload check: the C extension and its fallback."""
    from minibroker import record_check
    if request.param == "aiokafka":
        monkeypatch.setattr(record_check, "_scan", None)
    elif record_check._scan is None:
        pytest.skip("minibroker._recordscan was not built (no C compiler at install time)")
    return request.param


@pytest.mark.parametrize("records,count,max_ts,why", [
    ([raw_record(0), raw_record(1)], 3, 0, "fewer records than the count"),
    ([raw_record(0), raw_record(1), raw_record(2)], 2, 0, "more records than the count"),
    ([raw_record(1), raw_record(0)], 2, 0, "offset deltas out of order"),
    ([raw_record(0), raw_record(2)], 2, 0, "offset delta skipped"),
    ([raw_record(0, 0), raw_record(1, 7)], 2, 3, "max timestamp is not the largest"),
    ([raw_record(0, 0)[:-1] + b"\x02"], 1, 0, "header count runs past the record"),
])
def test_records_that_disagree_with_their_header_are_invalid_record(scanner, records, count, max_ts, why):
    b = batch_of(records, record_count=count, max_timestamp=max_ts)
    assert corrupt_code(b) == ErrorCode.INVALID_RECORD, why


def test_a_compressed_batch_that_expands_beyond_its_bound_is_refused():
    import gzip

    from minibroker.record_check import decompressed_limit
    limit = decompressed_limit(1000)
    one = raw_record(0, 0, None, b"\x00" * (limit + 10))
    b = encode_batch(gzip.compress(one), record_count=1, first_timestamp=0, max_timestamp=0, attributes=1)
    assert len(b) < 1000
    with pytest.raises(KafkaError, match="expand beyond") as ei:
        validate_batches(b, max_message_bytes=1000)
    assert ei.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec_id", [1, 2, 3, 4])
def test_compressed_garbage_is_corrupt(codec_id):
    b = encode_batch(b"not compressed at all, really", record_count=1, first_timestamp=0, max_timestamp=0,
                     attributes=codec_id)
    assert corrupt_code(b) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("bit", [0x10, 0x20])
def test_transactional_and_control_batches_from_clients_are_invalid_record(bit):
    b = batch_of([raw_record(0)], attributes=bit)
    assert corrupt_code(b) == ErrorCode.INVALID_RECORD


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=300)),
                          st.integers(-2**40, 2**41),
                          st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=9))),
                                   max_size=3)), min_size=1, max_size=30),
       st.data())
def test_both_payload_checks_accept_every_built_batch_and_refuse_every_truncation(records, data):
    from minibroker import record_check
    b = memoryview(build_batch([(k, v, T + d, h) for k, v, d, h in records]))
    h = parse_header(b)
    section = b[HEADER_SIZE:]
    want = max(T + d for _k, _v, d, _h in records), min(T + d for _k, _v, d, _h in records)
    scans = [lambda s, n: record_check._scan_with_aiokafka(b[:HEADER_SIZE].tobytes() + bytes(s), memoryview(s), 0,
                                                             n, "x")]
    if record_check._scan is not None:
        scans.append(lambda s, n: record_check._scan(s, n, h.first_timestamp))
    cut = data.draw(st.integers(0, len(section) - 1))
    for scan in scans:
        assert scan(section, h.record_count) == want
        assert want[0] == h.max_timestamp
        with pytest.raises((KafkaError, ValueError)):
            scan(section[:cut], h.record_count)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 4), st.integers(1, 2**31 - 1), st.sampled_from(["raw", "xerial",
                                                                                           "compressed"]))
def test_any_records_section_under_any_codec_gets_a_verdict_and_never_another_exception(section, codec_id, count,
                                                                                         how):
    from aiokafka import codec as ak
    if codec_id == 2 and how == "xerial":
        section = b"\x82SNAPPY\x00" + b"\x00" * 8 + section
    elif codec_id and how == "compressed":
        section = [ak.gzip_encode, ak.snappy_encode, ak.lz4_encode, ak.zstd_encode][codec_id - 1](section)
    b = encode_batch(section, record_count=count, first_timestamp=T, max_timestamp=T, attributes=codec_id)
    try:
        validate_batches(b, max_message_bytes=1 << 20)
    except KafkaError as exc:
        assert exc.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def test_the_decompression_bound_holds_for_all_the_batches_of_one_payload_together():
    from aiokafka.codec import zstd_encode

    from minibroker.record_check import decompressed_limit
    limit = decompressed_limit(10_000)
    one = encode_batch(zstd_encode(raw_record(0, 0, None, b"\x00" * (limit // 3))), record_count=1,
                       first_timestamp=0, max_timestamp=0, attributes=4)
    validate_batches(one * 2, max_message_bytes=10_000)                # two thirds of the bound: accepted
    with pytest.raises(KafkaError, match="expand beyond") as ei:
        validate_batches(one * 4, max_message_bytes=10_000)            # each fits, together they do not
    assert ei.value.code == ErrorCode.INVALID_RECORD


def test_is_compressed_reads_the_first_batchs_codec_bits_only():
    from minibroker.records import is_compressed
    assert is_compressed(build_batch([b"x" * 50], compression=4))
    assert not is_compressed(build_batch([b"x"]))
    assert not is_compressed(b"") and not is_compressed(b"\x00" * 22)


@pytest.mark.parametrize("target", [codec.NONE, codec.GZIP, codec.SNAPPY, codec.LZ4, codec.ZSTD])
@pytest.mark.parametrize("source", [codec.NONE, codec.LZ4])
def test_recompress_rebuilds_batches_in_the_topics_codec_and_keeps_every_field(source, target):
    """compression.type on a topic: the leader stores the records in its codec, with the same offsets,
    timestamps, keys, values, headers and producer id, epoch and base sequence."""
    rows = [(b"k1", b"v1", 1_000, [("h", b"x")]), (None, b"v2", 999, []), (b"k3", None, 2_000, [("e", None)])]
    batch = build_batch(rows, producer_id=7, producer_epoch=2, base_sequence=5, compression=source)
    assert needs_recompression(batch, target) == (source != target)
    out = recompress(batch + batch, target, 1 << 20)
    heads = [parse_header(out, 0), parse_header(out, parse_header(out).size)]
    for h in heads:
        assert (h.attributes & codec.CODEC_MASK, h.producer_id, h.producer_epoch, h.base_sequence) == (target, 7, 2, 5)
        assert (h.record_count, h.last_offset_delta, h.first_timestamp, h.max_timestamp) == (3, 2, 1_000, 2_000)
    assert decode_rows(out[:heads[0].size]) == decode_rows(batch)
    assert recompress(batch, source, 1 << 20) == batch                       # already in the codec: as it came
    if target == codec.NONE and source == codec.NONE:
        assert out == batch + batch


def test_recompress_validates_the_payload_first():
    bad = bytearray(build_batch([b"x"]))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as ei:
        recompress(bytes(bad), codec.LZ4, 1 << 20)
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("compression", [codec.NONE, codec.ZSTD])
def test_log_append_time_marks_every_batch_with_the_leaders_time_and_a_new_crc(compression):
    """message.timestamp.type=LogAppendTime (Kafka's setMaxTimestamp(LOG_APPEND_TIME, now)): bit 3 set, the
    max timestamp the leader's time, which every record reads as; the CRC holds; nothing else changes."""
    rows = [(b"k1", b"v1", 1_000, [("h", b"x")]), (None, b"v2", 999, [])]
    batch = build_batch(rows, producer_id=7, producer_epoch=2, base_sequence=5, compression=compression)
    out = with_log_append_time(batch + batch, T)
    info = validate_batches(out)                                     # CRCs and records check out
    for h in info.batches:
        before = parse_header(batch)
        assert h.attributes == before.attributes | TIMESTAMP_TYPE_LOG_APPEND
        assert h.max_timestamp == T and h.first_timestamp == before.first_timestamp
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (7, 2, 5, 2)
    assert [r.timestamp for r in iter_records(out)] == [T] * 4
    assert [(k, v, hs) for k, v, _ts, hs in decode_rows(out)] == [(k, v, tuple(hs)) for k, v, _ts, hs in rows] * 2
    assert len(out) == 2 * len(batch) and out[HEADER_SIZE:len(batch)] == batch[HEADER_SIZE:]


def test_log_append_time_checks_the_crc_before_it_writes_a_new_one():
    bad = bytearray(build_batch([b"x"]))
    bad[-1] ^= 0xFF
    with pytest.raises(KafkaError) as ei:
        with_log_append_time(bytes(bad), T)
    assert ei.value.code == ErrorCode.CORRUPT_MESSAGE


# ---------------------------------------------------------------- timestamp window (KIP-937)

HOUR = 3_600_000


def window_error(buf, window) -> KafkaError:
    with pytest.raises(KafkaError) as ei:
        validate_batches(buf, timestamp_window=window)
    return ei.value


@pytest.mark.parametrize("compression", [codec.NONE, codec.GZIP])
@pytest.mark.parametrize("fallback", [False, True])
def test_records_outside_the_window_are_invalid_timestamp_each_named_by_its_index(monkeypatch, compression, fallback):
    from minibroker import record_check
    if fallback:
        monkeypatch.setattr(record_check, "_scan", None)            # aiokafka's reader, as without a compiler
    window = (T - HOUR, T + HOUR)
    inside = build_batch([(None, b"a", T - HOUR), (None, b"b", T), (None, b"c", T + HOUR)], compression=compression)
    assert validate_batches(inside, timestamp_window=window).record_count == 3           # both ends are inside
    outside = build_batch([(None, b"a", T), (None, b"b", T + HOUR + 1), (None, b"c", T - HOUR - 1)],
                          compression=compression)
    err = window_error(outside, window)
    assert err.code == ErrorCode.INVALID_TIMESTAMP and not err.retriable
    assert err.message == "One or more records have been rejected due to invalid timestamp"
    assert err.record_errors == (
        (1, f"Timestamp {T + HOUR + 1} of message with offset 1 is out of range. "
            f"The timestamp should be within [{T - HOUR}, {T + HOUR}]"),
        (2, f"Timestamp {T - HOUR - 1} of message with offset 2 is out of range. "
            f"The timestamp should be within [{T - HOUR}, {T + HOUR}]"))
    assert validate_batches(outside).record_count == 3                                   # no window: no check


def test_a_record_without_a_timestamp_is_not_checked_and_a_log_append_time_batch_by_its_max_timestamp():
    window = (T - HOUR, T + HOUR)
    no_ts = batch_of([raw_record(0, 0), raw_record(1, 0)], first_timestamp=-1)
    assert validate_batches(no_ts, timestamp_window=window).record_count == 2            # -1 is Kafka's NO_TIMESTAMP
    appended = batch_of([raw_record(0, 0)], first_timestamp=0, max_timestamp=T + 2 * HOUR,
                        attributes=TIMESTAMP_TYPE_LOG_APPEND)
    assert window_error(appended, window).record_errors[0][0] == 0


def test_the_log_config_window_is_kafkas_default_and_none_for_log_append_time_or_unbounded():
    from minibroker.storage.log_config import LONG_MAX, LogConfig
    cfg = LogConfig()
    assert (cfg.message_timestamp_before_max_ms, cfg.message_timestamp_after_max_ms) == (LONG_MAX, HOUR)  # Kafka 4.0
    assert cfg.timestamp_window(T) == (T - LONG_MAX, T + HOUR)                     # as Kafka computes it
    assert LogConfig(message_timestamp_type="LogAppendTime").timestamp_window(T) is None
    assert LogConfig(message_timestamp_after_max_ms=LONG_MAX).timestamp_window(T) is None
    props = LogConfig.from_properties({"message.timestamp.before.max.ms": "60000",
                                       "log.message.timestamp.after.max.ms": "0"})
    assert props.timestamp_window(T) == (T - 60_000, T)
    with pytest.raises(KafkaError):
        LogConfig.from_properties({"message.timestamp.after.max.ms": "-1"})
