"""Compressed batches on a real cluster: minibroker's producer compresses with
each of Kafka's codecs, the leader validates and stores the batch as it came,
followers replicate it byte for byte, and minibroker's consumer reads it back."""
import asyncio
import os

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


@pytest.mark.parametrize("name", CODECS)
async def test_each_codec_round_trips_through_the_cluster_as_the_producer_compressed_it(cluster, name):
    topic = f"z-{name}"
    sent = [(b"k%d" % i, b"value %d " % i * 30, [("n", b"%d" % i)] if i % 3 else []) for i in range(2000)]
    async with Producer(cluster.bootstrap, {"acks": "all", "compression.type": name, "linger.ms": "20"}) as p:
        futs = [await p.send(topic, v, k, headers=h) for k, v, h in sent]
        await p.flush()
        offsets = [(await f).offset for f in futs]
    assert offsets == list(range(len(sent)))
    got = {}
    async with Consumer(cluster.bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TopicPartition(topic, 0)])

        async def everything():
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = (r.key, r.value, list(r.headers))
            return len(got) >= len(sent)
        await wait_for(everything, timeout_s=30, interval_s=0, what="every record")
    assert [got[i] for i in range(len(sent))] == sent

    async def replicated():
        lay = cluster.layout
        files = [read_partition(os.path.join(lay.node_dir(lay.broker(b).name), "data", f"{topic}-0"))
                 for b in (1, 2, 3)]
        return all(sum(x[1] - x[0] + 1 for x in f) == len(sent) for f in files) and files
    files = await wait_for(replicated, timeout_s=30, what="every replica to hold every batch")
    assert files[0] == files[1] == files[2]
    codec_ids = {parse_header(b[3]).attributes & 7 for b in files[0]}
    assert codec_ids == {CODECS.index(name) + 1}


@pytest.mark.parametrize("topic_codec, producer_codec", [("zstd", "none"), ("uncompressed", "lz4"), ("gzip", "snappy")])
async def test_a_topics_compression_type_is_the_codec_every_replica_stores(shared_cluster, topic_codec, producer_codec):
    """compression.type on the topic: the leader rebuilds each batch in that codec (Kafka's LogValidator),
    the followers copy the leader's bytes, and the consumer reads the records as they were sent."""
    topic = f"ct-{topic_codec}-{producer_codec}"
    async with Admin(shared_cluster.bootstrap) as admin:
        await admin.create_topic(topic, assignments=[[1, 2, 3]],
                                 configs={"min.insync.replicas": "2", "compression.type": topic_codec})
    sent = [(b"k%d" % i, b"value %d " % i * 20, [("n", b"%d" % i)] if i % 3 else []) for i in range(1500)]
    async with Producer(shared_cluster.bootstrap, {"acks": "all", "compression.type": producer_codec,
                                                   "linger.ms": "20"}) as p:
        futs = [await p.send(topic, v, k, headers=h, timestamp_ms=1_000_000 + i) for i, (k, v, h) in enumerate(sent)]
        await p.flush()
        offsets = [(await f).offset for f in futs]
    assert offsets == list(range(len(sent)))
    got = {}
    async with Consumer(shared_cluster.bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TopicPartition(topic, 0)])

        async def everything():
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = (r.key, r.value, list(r.headers), r.timestamp)
            return len(got) >= len(sent)
        await wait_for(everything, timeout_s=30, interval_s=0, what="every record")
    assert [got[i] for i in range(len(sent))] == [(k, v, h, 1_000_000 + i) for i, (k, v, h) in enumerate(sent)]

    async def replicated():
        lay = shared_cluster.layout
        files = [read_partition(os.path.join(lay.node_dir(lay.broker(b).name), "data", f"{topic}-0"))
                 for b in (1, 2, 3)]
        return all(sum(x[1] - x[0] + 1 for x in f) == len(sent) for f in files) and files
    files = await wait_for(replicated, timeout_s=30, what="every replica to hold every batch")
    assert files[0] == files[1] == files[2]
    want = 0 if topic_codec == "uncompressed" else CODECS.index(topic_codec) + 1
    assert {parse_header(b[3]).attributes & 7 for b in files[0]} == {want}
