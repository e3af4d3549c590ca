"""Rules of the Kafka listener checked with exact requests (kafka-python's
message classes as the client): version floors, ApiVersions fallback,
replica fetches refused, acks=0 silence, ordered answers, whole batches
from mid-batch offsets, KIP-320 epochs, fencing."""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("kafka")
from kafka.protocol.consumer import (  # noqa: E402
    FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse  # noqa: E402
from kafka.protocol.producer import (  # noqa: E402
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from kafkatests import RawKafka, create_topic, metadata  # noqa: E402
from minibroker.errors import ErrorCode  # noqa: E402

pytestmark = pytest.mark.cluster


def batch(n: int, start: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000, key=b"k%d" % (start + i), value=b"v%d" % (start + i), headers=[])
    return bytes(b.build())


def leader_of(c, topic: str, partition: int = 0) -> tuple[int, int, str]:
    """(leader id, leader epoch, leader's Kafka address) from Metadata on the Kafka listener."""
    md = metadata(c.kafka_bootstrap.split(",")[0], topic)
    (t,) = md.topics
    p = next(p for p in t.partitions if p.partition_index == partition)
    b = next(b for b in md.brokers if b.node_id == p.leader_id)
    return p.leader_id, p.leader_epoch, f"{b.host}:{b.port}"


def produce_req(version: int, topic: str, records: bytes, acks: int = -1):
    R = ProduceRequest
    return R[version](transactional_id=None, acks=acks, timeout_ms=30_000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[R.TopicProduceData.PartitionProduceData(index=0,
                                                                                              records=records)])])


def fetch_req(topic: str, offset: int, *, version: int = 12, replica_id: int = -1, epoch: int = -1,
              max_wait_ms: int = 0, rack: str = ""):
    F = FetchRequest
    return F[version](replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                      isolation_level=0, session_id=0, session_epoch=-1, rack_id=rack, forgotten_topics_data=[],
                      topics=[F.FetchTopic(topic=topic, partitions=[F.FetchTopic.FetchPartition(
                          partition=0, current_leader_epoch=epoch, fetch_offset=offset, last_fetched_epoch=-1,
                          log_start_offset=-1, partition_max_bytes=1 << 20)])])


@pytest.fixture(scope="module")
def topic(shared_cluster):
    create_topic(shared_cluster, "wire", partitions=1)
    _leader, _epoch, addr = leader_of(shared_cluster, "wire")
    with RawKafka(addr) as k:
        k.send(produce_req(9, "wire", batch(5)))
        (t,) = k.recv(ProduceResponse, 9).responses
        assert t.partition_responses[0].error_code == 0
    return "wire"


def test_api_versions_advertises_produce_from_0_and_kafka_4_floors(shared_cluster):
    with RawKafka(shared_cluster.kafka_bootstrap.split(",")[0]) as k:
        k.send(ApiVersionsRequest[3](client_software_name="raw", client_software_version="1"))
        r = k.recv(ApiVersionsResponse, 3)
    assert r.error_code == 0
    ranges = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
    assert ranges[0][0] == 0 and ranges[1][0] == 4 and ranges[2][0] == 1 and ranges[3][0] == 0
    # The group APIs from the floors librdkafka 2.0.2's balanced consumer needs (kafka-wire.md §1.3).
    assert ranges[11] == (0, 9) and ranges[14][0] == 0 and ranges[12][0] == 0 and ranges[13][0] == 0
    assert ranges[8] == (2, 8) and ranges[9] == (1, 7) and ranges[10] == (0, 6)


def test_a_too_new_api_versions_gets_a_v0_error_body_with_our_ranges(shared_cluster):
    with socket.create_connection(tuple(shared_cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1))) as s:
        # ApiVersions v99: header v2 (client id int16-length, then an empty tag buffer), empty body.
        body = b"\x00\x12\x00\x63\x00\x00\x00\x07\x00\x03raw\x00\x00\x00"
        s.sendall(len(body).to_bytes(4, "big") + body)
        size = int.from_bytes(s.recv(4), "big")
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
    r = ApiVersionsResponse.decode(data, version=0, header=True)
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {a.api_key for a in r.api_keys} >= {0, 1, 2, 3, 18}


def test_produce_below_kafka_4_floor_v3_closes_the_connection(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(produce_req(2, topic, batch(1)))
        assert k.closed_by_peer()


def test_acks_0_produce_gets_no_response_and_the_next_request_is_answered_in_order(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(produce_req(9, topic, batch(2), acks=0))
        cid_lo = k.send(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        cid_md = k.send(MetadataRequest[1](topics=None))
        lo = k.recv(ListOffsetsResponse, 7)
        md = k.recv(MetadataResponse, 1)
    assert lo.header.correlation_id == cid_lo and md.header.correlation_id == cid_md
    assert lo.topics[0].partitions[0].error_code == 0


def test_fetch_with_a_replica_id_is_refused_on_the_kafka_listener(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(fetch_req(topic, 0, replica_id=2))
        r = k.recv(FetchResponse, 12)
    assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert r.responses[0].partitions[0].records == b""


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(fetch_req(topic, 3))
        p = k.recv(FetchResponse, 12).responses[0].partitions[0]
    assert p.error_code == 0
    assert int.from_bytes(p.records[:8], "big") == 0          # the batch starting at offset 0
    assert int.from_bytes(p.records[57:61], "big") == 5        # all five records of it


def test_fetch_at_the_high_watermark_answers_empty_non_null_records(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        hw = k.recv(ListOffsetsResponse, 7).topics[0].partitions[0].offset
        k.send(fetch_req(topic, hw, version=4))
        p = k.recv(FetchResponse, 4).responses[0].partitions[0]
    assert p.error_code == 0 and p.high_watermark == hw
    assert p.records == b""


def test_a_stale_leader_epoch_is_fenced_and_an_unknown_one_reported(shared_cluster, topic):
    _l, epoch, addr = leader_of(shared_cluster, topic)
    with RawKafka(addr) as k:
        k.send(fetch_req(topic, 0, epoch=epoch + 1))
        assert k.recv(FetchResponse, 12).responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        if epoch > 0:
            k.send(fetch_req(topic, 0, epoch=epoch - 1))
            assert k.recv(FetchResponse, 12).responses[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_offset_for_leader_epoch_gives_the_end_of_the_current_epoch_from_the_leader(shared_cluster, topic):
    _l, epoch, addr = leader_of(shared_cluster, topic)
    OE = OffsetForLeaderEpochRequest
    with RawKafka(addr) as k:
        k.send(OE[4](replica_id=-1, topics=[OE.OffsetForLeaderTopic(topic=topic, partitions=[
            OE.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch,
                                                            leader_epoch=epoch)])]))
        p = k.recv(OffsetForLeaderEpochResponse, 4).topics[0].partitions[0]
        k.send(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
        hw = k.recv(ListOffsetsResponse, 7).topics[0].partitions[0].offset
    assert p.error_code == 0 and p.leader_epoch == epoch and p.end_offset >= hw >= 5


def test_offset_for_leader_epoch_on_a_follower_is_not_leader(shared_cluster, topic):
    leader, epoch, _addr = leader_of(shared_cluster, topic)
    follower = next(b for b in shared_cluster.layout.brokers if b.node_id != leader)
    OE = OffsetForLeaderEpochRequest
    with RawKafka(follower.kafka_address) as k:
        k.send(OE[3](replica_id=-1, topics=[OE.OffsetForLeaderTopic(topic=topic, partitions=[
            OE.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch,
                                                            leader_epoch=epoch)])]))
        p = k.recv(OffsetForLeaderEpochResponse, 3).topics[0].partitions[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_init_producer_id_hands_out_distinct_ids_and_refuses_transactions(shared_cluster):
    with RawKafka(shared_cluster.kafka_bootstrap.split(",")[0]) as k:
        ids = set()
        for _ in range(3):
            k.send(InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60_000,
                                            producer_id=-1, producer_epoch=-1))
            r = k.recv(InitProducerIdResponse, 4)
            assert r.error_code == 0 and r.producer_id >= 0 and r.producer_epoch == 0
            ids.add(r.producer_id)
        k.send(InitProducerIdRequest[4](transactional_id="tx", transaction_timeout_ms=60_000,
                                        producer_id=-1, producer_epoch=-1))
        assert k.recv(InitProducerIdResponse, 4).error_code != 0
    assert len(ids) == 3


def test_a_consumer_in_a_followers_rack_is_redirected_to_it_and_served_there(shared_cluster, topic):
    """KIP-392: Fetch v11+ with rack_id; the leader names the same-rack ISR follower."""
    leader, epoch, addr = leader_of(shared_cluster, topic)
    follower = next(b for b in shared_cluster.layout.brokers if b.node_id != leader)
    with RawKafka(addr) as k:
        k.send(fetch_req(topic, 0, epoch=epoch, rack=follower.rack))
        p = k.recv(FetchResponse, 12).responses[0].partitions[0]
    assert p.error_code == 0 and p.preferred_read_replica == follower.node_id and p.records == b""
    with RawKafka(follower.kafka_address) as k:
        k.send(fetch_req(topic, 0, epoch=epoch, rack=follower.rack, max_wait_ms=5000))
        p = k.recv(FetchResponse, 12).responses[0].partitions[0]
    assert p.error_code == 0 and p.preferred_read_replica == -1
    assert int.from_bytes(p.records[:8], "big") == 0


def test_a_connection_idle_for_connections_max_idle_ms_is_closed():
    """Kafka's selector closes connections without traffic for connections.max.idle.ms."""
    import asyncio

    from minibroker.kafka.server import serve_kafka

    async def go():
        conns: set = set()

        async def handler(conn, frame):
            return None
        srv = await serve_kafka(handler, "127.0.0.1", 0, "KAFKA", 1 << 20, conns, idle_ms=200)
        host, port = srv.sockets[0].getsockname()[:2]
        try:
            reader, writer = await asyncio.open_connection(host, port)
            assert await asyncio.wait_for(reader.read(1), 10) == b""     # EOF: the broker closed it
            writer.close()
        finally:
            srv.close()
    asyncio.run(go())


def test_produce_v3_plus_with_two_batches_in_a_partition_is_invalid_record_and_appends_nothing(shared_cluster, topic):
    _l, _e, addr = leader_of(shared_cluster, topic)
    latest = ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
    with RawKafka(addr) as k:
        k.send(latest)
        before = k.recv(ListOffsetsResponse, 7).topics[0].partitions[0].offset
        k.send(produce_req(9, topic, batch(2) + batch(2)))
        p = k.recv(ProduceResponse, 9).responses[0].partition_responses[0]
        k.send(latest)
        after = k.recv(ListOffsetsResponse, 7).topics[0].partitions[0].offset
    assert p.error_code == ErrorCode.INVALID_RECORD and "exactly one record batch" in p.error_message
    assert after == before


def test_a_batch_timestamped_beyond_after_max_ms_is_invalid_timestamp_with_a_record_error_each(shared_cluster, topic):
    """KIP-937 with Kafka 4.0's default message.timestamp.after.max.ms (one hour, KIP-1030): the partition
    answers INVALID_TIMESTAMP, Kafka's error message, and a RecordError per record outside the window."""
    import time
    _l, _e, addr = leader_of(shared_cluster, topic)
    future = int(time.time() * 1000) + 2 * 3_600_000
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=future - 3 * 3_600_000, key=None, value=b"an hour ago", headers=[])
    b.append(1, timestamp=future, key=None, value=b"two hours ahead", headers=[])
    with RawKafka(addr) as k:
        k.send(produce_req(9, topic, bytes(b.build())))
        (t,) = k.recv(ProduceResponse, 9).responses
    (p,) = t.partition_responses
    assert (p.error_code, p.base_offset) == (ErrorCode.INVALID_TIMESTAMP, -1)
    assert p.error_message == "One or more records have been rejected due to invalid timestamp"
    [(index, why)] = [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
    assert index == 1 and why.startswith(f"Timestamp {future} of message with offset 1 is out of range. "
                                         "The timestamp should be within [")


def test_a_retried_idempotent_batch_gets_its_first_offset_and_stored_max_timestamp(shared_cluster, topic):
    """The same idempotent batch produced twice: the second answer carries the first append's base offset and,
    as Kafka's does (UnifiedLog sets a duplicate's logAppendTime from its BatchMetadata), the batch's max
    timestamp as stored, on a CreateTime topic too; nothing is appended twice."""
    import time
    _l, _e, addr = leader_of(shared_cluster, topic)
    now = int(time.time() * 1000)
    with RawKafka(addr) as k:
        k.send(InitProducerIdRequest[4](transactional_id=None, transaction_timeout_ms=60_000,
                                        producer_id=-1, producer_epoch=-1))
        ids = k.recv(InitProducerIdResponse, 4)
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                      producer_id=ids.producer_id, producer_epoch=ids.producer_epoch,
                                      base_sequence=0, batch_size=1 << 20)
        b.append(0, timestamp=now - 5, key=None, value=b"once", headers=[])
        b.append(1, timestamp=now, key=None, value=b"only once", headers=[])
        records = bytes(b.build())
        answers = []
        for _ in range(2):
            k.send(produce_req(9, topic, records))
            answers.append(k.recv(ProduceResponse, 9).responses[0].partition_responses[0])
        k.send(produce_req(9, topic, batch(1)))
        after = k.recv(ProduceResponse, 9).responses[0].partition_responses[0]
    first, again = answers
    assert (first.error_code, first.log_append_time_ms) == (0, -1)          # CreateTime: no append time
    assert (again.error_code, again.base_offset, again.log_append_time_ms) == (0, first.base_offset, now)
    assert after.base_offset == first.base_offset + 2
