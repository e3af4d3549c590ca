"""Requests pipelined on one connection are handled in the order they arrived, as Kafka's
SocketServer processes one connection's requests in order: a produce request big enough to
be decoded off the loop must not be overtaken by a small one sent after it (which broke the
idempotent producer's sequences under load: OUT_OF_ORDER_SEQUENCE_NUMBER)."""
import asyncio

import pytest

from minibroker.client import Admin
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.protocol.framing import CHUNK_BYTES
from minibroker.records import build_batch
from minibroker.testing.fixtures import shared_cluster  # noqa: F401

pytestmark = pytest.mark.cluster


def produce_body(topic: str, batch: bytes) -> dict:
    return {"acks": 1, "timeout_ms": 10_000, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "records": batch}]}]}


async def test_a_large_produce_is_not_overtaken_by_a_small_one_sent_after_it(shared_cluster):
    async with Admin(shared_cluster.bootstrap) as admin:
        await admin.create_topic("pipelined", assignments=[[1, 2, 3]])
    spec = shared_cluster.layout.broker(1)
    big = build_batch([b"x" * 1000] * (2 * CHUNK_BYTES // 1000), timestamp_ms=1)
    small = build_batch([b"small"], timestamp_ms=1)
    assert len(big) > CHUNK_BYTES > len(small)
    conn = await Connection.open(spec.host, spec.port)
    try:
        for _ in range(5):
            first = asyncio.ensure_future(conn.request(ApiKey.PRODUCE, produce_body("pipelined", big)))
            second = asyncio.ensure_future(conn.request(ApiKey.PRODUCE, produce_body("pipelined", small)))
            a, b = await asyncio.gather(first, second)
            pa, pb = a["topics"][0]["partitions"][0], b["topics"][0]["partitions"][0]
            assert pa["error"] == 0 and pb["error"] == 0, (pa, pb)
            assert pa["base_offset"] < pb["base_offset"], "the small request was appended before the large one"
    finally:
        conn.close()


async def test_a_compressed_produce_is_not_overtaken_by_a_plain_one_sent_after_it(shared_cluster):
    from minibroker import codec
    async with Admin(shared_cluster.bootstrap) as admin:
        await admin.create_topic("pipelined-gzip", assignments=[[1, 2, 3]])
    spec = shared_cluster.layout.broker(1)
    gz = build_batch([b"compressed"] * 10, timestamp_ms=1, compression=codec.GZIP)
    plain = build_batch([b"plain"], timestamp_ms=1)
    conn = await Connection.open(spec.host, spec.port)
    try:
        for _ in range(5):
            first = asyncio.ensure_future(conn.request(ApiKey.PRODUCE, produce_body("pipelined-gzip", gz)))
            second = asyncio.ensure_future(conn.request(ApiKey.PRODUCE, produce_body("pipelined-gzip", plain)))
            a, b = await asyncio.gather(first, second)
            pa, pb = a["topics"][0]["partitions"][0], b["topics"][0]["partitions"][0]
            assert pa["error"] == 0 and pb["error"] == 0, (pa, pb)
            assert pa["base_offset"] < pb["base_offset"], "the plain request was appended before the compressed one"
    finally:
        conn.close()
