"""Bad input against a live broker: each bad frame gets an error response or a
closed connection, and the broker keeps serving everyone else with nothing lost."""
import asyncio
import struct

import msgpack
import pytest

from minibroker.client import Admin, Consumer, Producer, TopicPartition
from minibroker.errors import ErrorCode
from minibroker.net.connection import Connection
from minibroker.protocol.api import LATEST_TIMESTAMP, ApiKey
from minibroker.records import build_batch
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster
TP = TopicPartition("bad", 0)
BAD_HEADER = msgpack.packb({"api": "produce", "id": 1, "v": 0})


@pytest.fixture(scope="module")
def topic(shared_cluster):
    async def setup():
        async with Admin(shared_cluster.bootstrap) as admin:
            await admin.create_topic("bad", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
        async with Producer(shared_cluster.bootstrap, {"acks": "all"}) as p:
            for i in range(10):
                await p.send_and_wait("bad", b"good-%d" % i)
    asyncio.run(setup())
    return shared_cluster


def leader_addr(c):
    spec = c.layout.broker(1)
    return spec.host, spec.port


async def raw_exchange(c, payload: bytes) -> bytes:
    r, w = await asyncio.open_connection(*leader_addr(c))
    w.write(payload)
    await w.drain()
    try:
        return await asyncio.wait_for(r.read(), 10)
    finally:
        w.close()


async def check_still_serving(c, n=10):
    got = {}
    async with Consumer(c.bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TP])
        async def enough():
            for rec in await con.poll(timeout_ms=200):
                got[rec.offset] = rec.value
            return len(got) >= n
        await wait_for(enough, timeout_s=30, interval_s=0, what="the acknowledged records")
    assert [got[i] for i in range(10)] == [b"good-%d" % i for i in range(10)]
    async with Admin(c.bootstrap) as admin:
        return (await admin.list_offsets({TP: LATEST_TIMESTAMP}))[TP].offset


@pytest.mark.parametrize("payload", [
    pytest.param(b"\x00\x00\x00\x05hello", id="garbage-bytes"),
    pytest.param(b"\x7f\xff\xff\xff" + b"x" * 64, id="huge-length-prefix"),
    pytest.param(struct.pack(">I", 4) + msgpack.packb([1, 2, 3]), id="non-map-frame"),
    pytest.param(struct.pack(">I", len(BAD_HEADER)) + BAD_HEADER, id="bad-header-types"),
])
async def test_malformed_frames_close_only_that_connection(topic, payload):
    assert await raw_exchange(topic, payload) == b""       # the broker closed it
    assert await check_still_serving(topic) == 10


async def request(c, api, body):
    conn = await Connection.open(*leader_addr(c))
    try:
        return await conn.request(api, body, timeout_ms=10_000)
    finally:
        conn.close()


async def test_wrong_field_types_get_invalid_request(topic):
    resp = await request(topic, ApiKey.PRODUCE, {"acks": "all", "topics": []})
    assert resp["error"] == ErrorCode.INVALID_REQUEST and "acks" in resp["message"]
    resp = await request(topic, ApiKey.FETCH, {"topics": [{"topic": "bad", "partitions": [{"partition": "0"}]}]})
    assert resp["error"] == ErrorCode.INVALID_REQUEST
    assert await check_still_serving(topic) == 10


async def test_unknown_api_key_is_unsupported_version(topic):
    resp = await request(topic, 4242, {})
    assert resp["error"] == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("offset", [-1, -(2 ** 40), 2 ** 62, 2 ** 63 - 1])
async def test_negative_or_absurd_fetch_offsets_are_out_of_range(topic, offset):
    resp = await request(topic, ApiKey.FETCH, {"max_wait_ms": 0, "topics": [
        {"topic": "bad", "partitions": [{"partition": 0, "fetch_offset": offset}]}]})
    (part,) = resp["topics"][0]["partitions"]
    assert part["error"] == ErrorCode.OFFSET_OUT_OF_RANGE and part["records"] == b""


async def test_produce_with_a_bad_crc_is_corrupt_message_and_appends_nothing(topic):
    batch = bytearray(build_batch([b"evil"]))
    batch[-1] ^= 0xFF                                         # flip a payload byte: the CRC no longer matches
    resp = await request(topic, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topics": [
        {"topic": "bad", "partitions": [{"partition": 0, "records": bytes(batch)}]}]})
    (part,) = resp["topics"][0]["partitions"]
    assert part["error"] == ErrorCode.CORRUPT_MESSAGE
    assert await check_still_serving(topic) == 10


async def test_produce_to_an_unknown_topic_and_bad_acks_are_refused_by_name(topic):
    batch = build_batch([b"x"])
    resp = await request(topic, ApiKey.PRODUCE, {"acks": -1, "topics": [
        {"topic": "nope", "partitions": [{"partition": 0, "records": batch}]}]})
    assert resp["topics"][0]["partitions"][0]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    resp = await request(topic, ApiKey.PRODUCE, {"acks": 2, "topics": [
        {"topic": "bad", "partitions": [{"partition": 0, "records": batch}]}]})
    assert resp["topics"][0]["partitions"][0]["error"] == ErrorCode.INVALID_REQUIRED_ACKS
    assert await check_still_serving(topic) == 10


async def leader_leo_hw(c):
    async with Admin(c.bootstrap) as admin:
        resp = await admin.replica_status(leader_addr(c), ["bad"])
    (p,) = resp["partitions"]
    return p["leo"], p["hw"]


async def test_a_77_byte_batch_claiming_2_pow_31_minus_1_records_is_refused_and_the_leo_does_not_move(topic):
    from minibroker.testing.batches import batch_of, raw_record
    n = 2**31 - 1
    batch = batch_of([raw_record(0, 0, None, b"x" * 9)], record_count=n, last_offset_delta=n - 1)
    assert len(batch) == 77
    before = await leader_leo_hw(topic)
    resp = await request(topic, ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 5000, "topics": [
        {"topic": "bad", "partitions": [{"partition": 0, "records": batch}]}]})
    (part,) = resp["topics"][0]["partitions"]
    assert part["error"] == ErrorCode.INVALID_RECORD and "records do not match the header" in part["message"]
    assert await leader_leo_hw(topic) == before == (10, 10)
    assert await check_still_serving(topic) == 10
