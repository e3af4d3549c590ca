"""Compressed batches on a real cluster: minibroker's producer compresses with
each of Kafka's codecs, the leader validates and stores the batch as it came,
followers replicate it byte for byte, and minibroker's consumer reads it back."""
import asyncio
import os
import time

import pytest

from minibroker.client import Admin, Consumer, Producer, TopicPartition
from minibroker.records import parse_header
from minibroker.testing.cluster import wait_for
from minibroker.testing.fixtures import shared_cluster  # noqa: F401
from minibroker.verify.replicas import read_partition

pytestmark = pytest.mark.cluster
CODECS = ["gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    async def setup():
        async with Admin(shared_cluster.bootstrap) as admin:
            for name in CODECS:
                await admin.create_topic(f"z-{name}", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
    asyncio.run(setup())
    return shared_cluster


Row = tuple[bytes, bytes, list[tuple[str, bytes]]]


def rows(n: int, width: int) -> list[Row]:
    return [(b"k%d" % i, b"value %d " % i * width, [("n", b"%d" % i)] if i % 3 else []) for i in range(n)]


async def send_all(bootstrap: str, topic: str, sent: list[Row], codec: str) -> int:
    """Produce `sent` in order, acks=all, batches compressed with `codec`, record i stamped with the
    returned time + i (ms: recent, so that no retention check takes them)."""
    base = int(time.time() * 1000)
    async with Producer(bootstrap, {"acks": "all", "compression.type": codec, "linger.ms": "20"}) as p:
        futs = [await p.send(topic, v, k, headers=h, timestamp_ms=base + i) for i, (k, v, h) in enumerate(sent)]
        await p.flush()
        offsets = [(await f).offset for f in futs]
    assert offsets == list(range(len(sent)))
    return base


async def read_all(bootstrap: str, topic: str, n: int) -> list[tuple[bytes, bytes, list, int]]:
    """(key, value, headers, timestamp) of offsets 0..n-1 of partition 0."""
    got = {}
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TopicPartition(topic, 0)])

        async def everything():
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = (r.key, r.value, list(r.headers), r.timestamp)
            return len(got) >= n
        await wait_for(everything, timeout_s=30, interval_s=0, what="every record")
    return [got[i] for i in range(n)]


async def stored_codecs(cluster, topic: str, n: int) -> set[int]:
    """The codec ids of partition 0's batches, once every replica holds all n records byte for byte alike."""
    async def replicated():
        lay = cluster.layout
        files = [read_partition(os.path.join(lay.node_dir(lay.broker(b).name), "data", f"{topic}-0"))
                 for b in (1, 2, 3)]
        return all(sum(x[1] - x[0] + 1 for x in f) == n for f in files) and files
    files = await wait_for(replicated, timeout_s=30, what="every replica to hold every batch")
    assert files[0] == files[1] == files[2]
    return {parse_header(b[3]).attributes & 7 for b in files[0]}


@pytest.mark.parametrize("name", CODECS)
async def test_each_codec_round_trips_through_the_cluster_as_the_producer_compressed_it(cluster, name):
    topic = f"z-{name}"
    sent = rows(2000, 30)
    await send_all(cluster.bootstrap, topic, sent, name)
    assert [(k, v, h) for k, v, h, _ts in await read_all(cluster.bootstrap, topic, len(sent))] == sent
    assert await stored_codecs(cluster, topic, len(sent)) == {CODECS.index(name) + 1}


@pytest.mark.parametrize("topic_codec, producer_codec", [("zstd", "none"), ("uncompressed", "lz4"), ("gzip", "snappy")])
async def test_a_topics_compression_type_is_the_codec_every_replica_stores(shared_cluster, topic_codec, producer_codec):
    """compression.type on the topic: the leader rebuilds each batch in that codec (Kafka's LogValidator),
    the followers copy the leader's bytes, and the consumer reads the records as they were sent."""
    topic = f"ct-{topic_codec}-{producer_codec}"
    async with Admin(shared_cluster.bootstrap) as admin:
        await admin.create_topic(topic, assignments=[[1, 2, 3]],
                                 configs={"min.insync.replicas": "2", "compression.type": topic_codec})
    sent = rows(1500, 20)
    base = await send_all(shared_cluster.bootstrap, topic, sent, producer_codec)
    assert await read_all(shared_cluster.bootstrap, topic, len(sent)) == [
        (k, v, h, base + i) for i, (k, v, h) in enumerate(sent)]
    want = 0 if topic_codec == "uncompressed" else CODECS.index(topic_codec) + 1
    assert await stored_codecs(shared_cluster, topic, len(sent)) == {want}
