"""The idempotent producer on the Kafka listener (KIP-98 without
transactions): kafka-python 3.x with its defaults (enable_idempotence=True,
acks=all) produces, its batches are stored with their producer id, and the
broker's sequence rules answer exact requests: a resent batch gets its
original offset and is not stored again, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER,
an older epoch INVALID_PRODUCER_EPOCH."""
from __future__ import annotations

import pytest

pytest.importorskip("kafka")
from kafka import KafkaProducer  # noqa: E402
from kafka.protocol.consumer import FetchResponse, ListOffsetsRequest, ListOffsetsResponse  # noqa: E402
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceResponse  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from kafkatests import RawKafka, create_topic  # noqa: E402
from test_wire_rules import fetch_req, leader_of, produce_req  # noqa: E402
from minibroker.errors import ErrorCode  # noqa: E402
from minibroker.records import iter_batch_headers, iter_records  # noqa: E402

pytestmark = pytest.mark.cluster


def idem_batch(pid: int, epoch: int, seq: int, n: int, tag: str = "v") -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000, key=None, value=f"{tag}{seq + i}".encode(), headers=[])
    return bytes(b.build())


def init_pid(k: RawKafka) -> tuple[int, int]:
    k.send(InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60_000,
                                    producer_id=-1, producer_epoch=-1))
    r = k.recv(InitProducerIdResponse, 4)
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def produce(k: RawKafka, topic: str, records: bytes) -> tuple[int, int]:
    k.send(produce_req(9, topic, records))
    p = k.recv(ProduceResponse, 9).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def log_end(k: RawKafka, topic: str) -> int:
    L = ListOffsetsRequest
    k.send(L[7](replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
        L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
    return k.recv(ListOffsetsResponse, 7).topics[0].partitions[0].offset


def read_all(k: RawKafka, topic: str) -> bytes:
    k.send(fetch_req(topic, 0))
    return k.recv(FetchResponse, 12).responses[0].partitions[0].records


def test_kafka_python_with_its_defaults_produces_idempotent_batches_stored_once(shared_cluster):
    create_topic(shared_cluster, "idem-kp", partitions=1)
    p = KafkaProducer(bootstrap_servers=shared_cluster.kafka_bootstrap)
    assert p.config["enable_idempotence"]
    futures = [p.send("idem-kp", value=b"r%d" % i) for i in range(2000)]
    p.flush(60)
    offsets = sorted(f.get(10).offset for f in futures)
    p.close()
    assert offsets == list(range(2000))
    _leader, _epoch, addr = leader_of(shared_cluster, "idem-kp")
    with RawKafka(addr) as k:
        data = b""
        while len(list(iter_records(data))) < 2000:
            data = read_all(k, "idem-kp")
    headers = list(iter_batch_headers(data))
    assert headers and all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
    assert len({h.producer_id for h in headers}) == 1
    assert [r.value for r in iter_records(data)] == [b"r%d" % i for i in range(2000)]


def test_a_resent_batch_gets_its_original_offset_and_is_not_stored_again(shared_cluster):
    create_topic(shared_cluster, "idem-dup", partitions=1)
    _leader, _epoch, addr = leader_of(shared_cluster, "idem-dup")
    with RawKafka(addr) as k:
        pid, epoch = init_pid(k)
        assert produce(k, "idem-dup", idem_batch(pid, epoch, 0, 3)) == (0, 0)
        assert produce(k, "idem-dup", idem_batch(pid, epoch, 3, 2)) == (0, 3)
        assert produce(k, "idem-dup", idem_batch(pid, epoch, 0, 3)) == (0, 0)
        assert log_end(k, "idem-dup") == 5


def test_a_sequence_gap_and_an_older_epoch_are_refused(shared_cluster):
    create_topic(shared_cluster, "idem-gap", partitions=1)
    _leader, _epoch, addr = leader_of(shared_cluster, "idem-gap")
    with RawKafka(addr) as k:
        pid, _ = init_pid(k)
        assert produce(k, "idem-gap", idem_batch(pid, 1, 0, 1))[0] == 0
        assert produce(k, "idem-gap", idem_batch(pid, 1, 5, 1))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(k, "idem-gap", idem_batch(pid, 0, 1, 1))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert log_end(k, "idem-gap") == 1
