"""Compressed batches across the two listeners: every Kafka client's
compressed batches read back by minibroker's own consumer, and minibroker's
compressed batches read back by every Kafka client (the broker stores and
serves them as they came)."""
from __future__ import annotations

import asyncio
import subprocess

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402

from kafkatests import KCAT, consume, create_topic  # noqa: E402
from minibroker.client import Consumer as MbConsumer  # noqa: E402
from minibroker.client import Producer as MbProducer  # noqa: E402
from minibroker.client import TopicPartition as MbTP  # noqa: E402
from minibroker.testing.wait import until, until_sync  # noqa: E402

pytestmark = pytest.mark.cluster
CODECS = ["gzip", "snappy", "lz4", "zstd"]
N = 500


def values(tag: str) -> list[bytes]:
    return [b"%s-%d-%s" % (tag.encode(), i, b"x" * (i % 50)) for i in range(N)]


async def mb_read(bs: str, topic: str, n: int) -> list[bytes]:
    got: dict[int, bytes] = {}
    async with MbConsumer(bs, {"auto.offset.reset": "earliest"}) as con:
        con.assign([MbTP(topic, 0)])

        async def more():
            for r in await con.poll(timeout_ms=300):
                got[r.offset] = r.value
            return len(got) >= n
        await until(more, f"{n} records through minibroker's consumer", timeout_s=60, interval_s=0)
    return [got[o] for o in sorted(got)]


async def mb_write(bs: str, topic: str, codec: str, vals: list[bytes]) -> None:
    async with MbProducer(bs, {"acks": "all", "compression.type": codec, "linger.ms": "20"}) as p:
        futs = [await p.send(topic, v) for v in vals]
        await p.flush()
        for f in futs:
            await f


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_compressed_batches_read_back_by_minibrokers_consumer(shared_cluster, codec):
    c = shared_cluster
    topic = f"cz-cf-{codec}"
    create_topic(c, topic)
    p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", "compression.type": codec,
                  "linger.ms": 20})
    for v in values(codec):
        p.produce(topic, v)
    assert p.flush(60) == 0
    assert asyncio.run(mb_read(c.bootstrap, topic, N)) == values(codec)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (Debian: apt-get install -y kcat)")
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_compressed_batches_read_back_by_minibrokers_consumer(shared_cluster, codec):
    c = shared_cluster
    topic = f"cz-kc-{codec}"
    create_topic(c, topic)
    vals = values(codec)
    r = subprocess.run([KCAT, "-b", c.kafka_bootstrap, "-P", "-t", topic, "-z", codec, "-X", "acks=all"],
                       input=b"\n".join(vals) + b"\n", capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert asyncio.run(mb_read(c.bootstrap, topic, N)) == vals


@pytest.mark.parametrize("codec", ["gzip"])        # kafka-python needs extra packages for snappy, lz4, zstd
def test_kafka_python_compressed_batches_read_back_by_minibrokers_consumer(shared_cluster, codec):
    from kafka import KafkaProducer
    c = shared_cluster
    topic = f"cz-kp-{codec}"
    create_topic(c, topic)
    p = KafkaProducer(bootstrap_servers=c.kafka_bootstrap, acks="all", compression_type=codec, linger_ms=20)
    for v in values(codec):
        p.send(topic, v)
    p.flush(60)
    p.close()
    assert asyncio.run(mb_read(c.bootstrap, topic, N)) == values(codec)


@pytest.mark.parametrize("codec", CODECS)
async def test_aiokafka_compressed_batches_read_back_by_minibrokers_consumer(shared_cluster, codec):
    from aiokafka import AIOKafkaProducer
    c = shared_cluster
    topic = f"cz-ak-{codec}"
    await asyncio.to_thread(create_topic, c, topic)
    p = AIOKafkaProducer(bootstrap_servers=c.kafka_bootstrap, acks="all", compression_type=codec, linger_ms=20)
    await p.start()
    try:
        for v in values(codec):
            await p.send(topic, v)
        await p.flush()
    finally:
        await p.stop()
    assert await mb_read(c.bootstrap, topic, N) == values(codec)


@pytest.mark.parametrize("codec", CODECS)
def test_minibrokers_compressed_batches_read_back_by_every_kafka_client(shared_cluster, codec):
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AkTP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP
    c = shared_cluster
    topic = f"cz-mb-{codec}"
    create_topic(c, topic)
    vals = values(codec)
    asyncio.run(mb_write(c.bootstrap, topic, codec, vals))
    assert [v for (_k, v, _p, _o) in consume(c.kafka_bootstrap, topic, 1, N)] == vals
    if KCAT is not None:
        r = subprocess.run([KCAT, "-b", c.kafka_bootstrap, "-C", "-t", topic, "-e", "-q", "-D", "\n"],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split(b"\n")[:N] == vals

    async def ak():
        con = AIOKafkaConsumer(bootstrap_servers=c.kafka_bootstrap, auto_offset_reset="earliest",
                               enable_auto_commit=False)
        await con.start()
        got: list[bytes] = []
        try:
            con.assign([AkTP(topic, 0)])

            async def more():
                for recs in (await con.getmany(timeout_ms=300)).values():
                    got.extend(r.value for r in recs)
                return len(got) >= N
            await until(more, f"{N} records through aiokafka", timeout_s=60, interval_s=0)
        finally:
            await con.stop()
        return got
    assert asyncio.run(ak()) == vals
    if codec == "gzip":
        kc = KafkaConsumer(bootstrap_servers=c.kafka_bootstrap, group_id=None, auto_offset_reset="earliest",
                           enable_auto_commit=False)
        kc.assign([KpTP(topic, 0)])
        got: list[bytes] = []

        def more():
            for recs in kc.poll(timeout_ms=300).values():
                got.extend(r.value for r in recs)
            return len(got) >= N
        try:
            until_sync(more, f"{N} records through kafka-python", timeout_s=60, interval_s=0)
        finally:
            kc.close()
        assert got == vals
