"""The idempotent producer on the Kafka listener (KIP-98 without
transactions): kafka-python 3.x with its defaults (enable_idempotence=True,
acks=all) produces, its batches are stored with their producer id, and the
broker's sequence rules answer exact requests: a resent batch gets its
original offset and is not stored again, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER,
an older epoch INVALID_PRODUCER_EPOCH."""
from __future__ import annotations

import time

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
        # now, not a fixed date: a producer whose last batch is over producer.id.expiration.ms (a day) old
        # expires at the broker's next check, as in Kafka
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=f"{tag}{seq + i}".encode(), headers=[])
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


def test_an_idle_producer_expires_after_producer_id_expiration_ms_as_altered_by_a_kafka_admin(cluster_factory):
    """P-EXPIRE on real processes: with Kafka's default (one day) a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; once
    confluent-kafka's AdminClient sets the cluster-wide producer.id.expiration.ms (dynamic, as in Kafka) the
    producer's state expires at the next check and its next batch is accepted at any sequence (KIP-360).
    (Set on the leader: librdkafka refuses the empty name of the cluster-wide default; Kafka allows a
    cluster-wide config per broker too.)"""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)

    from minibroker.testing.wait import until_sync
    c = cluster_factory(overrides={"producer.id.expiration.check.interval.ms": "200"}, proxied=False)
    create_topic(c, "idem-expire", partitions=1)
    leader, _epoch, addr = leader_of(c, "idem-expire")

    def batch(pid: int, epoch: int, seq: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
        b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"s%d" % seq, headers=[])
        return bytes(b.build())
    with RawKafka(addr) as k:
        pid, epoch = init_pid(k)
        assert produce(k, "idem-expire", batch(pid, epoch, 0)) == (0, 0)
        assert produce(k, "idem-expire", batch(pid, epoch, 9))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
        on_leader = ConfigResource(ResourceType.BROKER, str(leader), incremental_configs=[ConfigEntry(
            "producer.id.expiration.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([on_leader]).values():
            f.result(timeout=30)
        answers: list[tuple[int, int]] = []

        def accepted() -> bool:
            answers.append(produce(k, "idem-expire", batch(pid, epoch, 9)))
            return answers[-1][0] == 0
        until_sync(accepted, "the producer's state to expire on the leader", timeout_s=30)
        assert {code for code, _ in answers[:-1]} <= {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER}
        assert answers[-1] == (0, 1) and log_end(k, "idem-expire") == 2        # nothing else was written
