"""The direct Produce decoder and response encoder against kafka-python's generated ones: the same header and fields for
every request kafka-python encodes, and None (the generated decoder decides) for anything else."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("kafka")
from kafka.protocol.producer import ProduceRequest  # noqa: E402

from minibroker.kafka import codec  # noqa: E402
from minibroker.kafka.produce_codec import (  # noqa: E402
    VERSIONS, ProducePartition, decode_produce, encode_produce_response,
)

R = ProduceRequest
names = st.text(min_size=0, max_size=12)
records = st.one_of(st.none(), st.binary(max_size=300))
partitions = st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), records), max_size=4)
topics = st.lists(st.tuples(names, partitions), max_size=3)


def frame(version: int, client_id: str | None, txn: str | None, acks: int, timeout: int,
          data: list[tuple[str, list[tuple[int, bytes | None]]]]) -> bytes:
    req = R[version](transactional_id=txn, acks=acks, timeout_ms=timeout, topic_data=[
        R.TopicProduceData(name=name, partition_data=[R.TopicProduceData.PartitionProduceData(index=i, records=r)
                                                      for i, r in parts])
        for name, parts in data])
    req.with_header(correlation_id=7, client_id=client_id)
    return bytes(req.encode(header=True))


def generic(version: int, buf: bytes) -> tuple:
    header, body = codec.decode_request(codec.Api.PRODUCE, version, buf)
    return header, (body.transactional_id, body.acks, body.timeout_ms,
                    [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in body.topic_data])


def fast(version: int, buf: bytes) -> tuple | None:
    out = decode_produce(version, buf)
    if out is None:
        return None
    header, body = out
    return header, (body.transactional_id, body.acks, body.timeout_ms,
                    [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in body.topic_data])


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), client_id=st.one_of(st.none(), names),
       txn=st.one_of(st.none(), names), acks=st.sampled_from([-1, 0, 1, 2]),
       timeout=st.integers(-2**31, 2**31 - 1), data=topics)
def test_every_request_kafka_python_encodes_decodes_to_the_same_fields(version, client_id, txn, acks, timeout, data):
    buf = frame(version, client_id, txn, acks, timeout, data)
    assert fast(version, buf) == generic(version, buf)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), data=topics, cut=st.integers(0, 10_000), extra=st.binary(max_size=3))
def test_a_truncated_or_padded_frame_is_left_to_the_generated_decoder(version, data, cut, extra):
    buf = frame(version, "c", None, -1, 30_000, data)
    cut = cut % len(buf)
    assert decode_produce(version, buf[:cut]) is None
    if extra:
        assert decode_produce(version, buf + extra) is None


def test_a_tagged_field_a_null_array_or_another_version_is_left_to_the_generated_decoder():
    v9 = frame(9, "c", None, -1, 30_000, [("t", [(0, b"x")])])
    assert decode_produce(9, v9) is not None
    assert decode_produce(8, v9) is None                       # the header names v9
    assert decode_produce(10, v9) is None                      # not served
    assert decode_produce(9, v9[:-1] + b"\x01") is None        # top-level tagged fields
    v3 = frame(3, "c", None, -1, 30_000, [])
    null_topics = v3[:-4] + b"\xff\xff\xff\xff"
    assert decode_produce(3, null_topics) is None


def test_records_come_back_as_the_bytes_sent():
    _h, body = decode_produce(9, frame(9, None, "txn", 1, 5, [("a", [(3, b"abc"), (4, None)])]))
    assert body.topic_data[0].partition_data == [ProducePartition(3, b"abc"), ProducePartition(4, None)]
    assert (body.transactional_id, body.acks, body.timeout_ms) == ("txn", 1, 5)


i64 = st.integers(-2**63, 2**63 - 1)
partition_answers = st.fixed_dictionaries({
    "index": st.integers(-2**31, 2**31 - 1), "error_code": st.integers(-2**15, 2**15 - 1), "base_offset": i64,
    "log_append_time_ms": i64, "log_start_offset": i64, "record_errors": st.just([]),
    "error_message": st.one_of(st.none(), names)})
answers = st.fixed_dictionaries({
    "throttle_time_ms": st.integers(0, 2**31 - 1),
    "responses": st.lists(st.fixed_dictionaries({"name": names, "partition_responses": st.lists(partition_answers,
                                                                                               max_size=3)}),
                          max_size=3)})


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), cid=st.integers(-2**31, 2**31 - 1), body=answers)
def test_every_answer_encodes_to_the_generated_encoders_bytes(version, cid, body):
    assert encode_produce_response(version, cid, body) == codec.encode_response(codec.Api.PRODUCE, version, cid, body)


def test_an_answer_with_record_errors_is_left_to_the_generated_encoder():
    body = {"throttle_time_ms": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 87, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
         "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}], "error_message": "bad"}]}]}
    assert encode_produce_response(9, 1, body) is None
    assert encode_produce_response(10, 1, {"throttle_time_ms": 0, "responses": []}) is None
