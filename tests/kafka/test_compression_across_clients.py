"""Compressed batches across clients (issue 11): each Kafka client compresses
with each codec it has, through the Kafka listener; the batches are stored as
they came (the same codec on disk, on every replica) and minibroker's own
consumer reads them back exactly. And the reverse: minibroker's producer
compresses, each Kafka client reads."""
from __future__ import annotations

import asyncio
import os

import pytest

from minibroker.client import Consumer, Producer, TopicPartition
from minibroker.records import parse_header
from minibroker.testing.wait import until
from minibroker.verify.replicas import read_partition

from kafkatests import consume as confluent_consume, create_topic

pytestmark = pytest.mark.cluster
CODECS = ["gzip", "snappy", "lz4", "zstd"]
N = 500


def records(tag: str) -> list[tuple[bytes, bytes]]:
    return [(b"%s-k%d" % (tag.encode(), i), b"%s value %d " % (tag.encode(), i) * 8) for i in range(N)]


def stored_codecs(c, topic: str) -> set[int]:
    lay = c.layout
    files = [read_partition(os.path.join(lay.node_dir(lay.broker(b).name), "data", f"{topic}-0")) for b in (1, 2, 3)]
    assert files[0] and files[0] == files[1] == files[2]
    return {parse_header(b[3]).attributes & 7 for b in files[0]}


async def read_with_minibroker(c, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    got: dict[int, tuple[bytes | None, bytes | None]] = {}
    async with Consumer(c.bootstrap, {"auto.offset.reset": "earliest"}) as con:
        con.assign([TopicPartition(topic, 0)])

        async def everything() -> bool:
            for r in await con.poll(timeout_ms=200):
                got[r.offset] = (r.key, r.value)
            return len(got) >= N
        await until(everything, f"{N} records of {topic}", timeout_s=60)
    return [got[i] for i in range(N)]


def produce_confluent(c, topic: str, name: str, sent) -> None:
    from confluent_kafka import Producer as CProducer
    p = CProducer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", "compression.type": name,
                   "linger.ms": 20})
    errors: list = []
    for k, v in sent:
        p.produce(topic, v, k, partition=0, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(60) == 0 and not errors, errors


def produce_kafka_python(c, topic: str, name: str, sent) -> None:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=c.kafka_bootstrap, acks="all", compression_type=name, linger_ms=20)
    try:
        futs = [p.send(topic, value=v, key=k, partition=0) for k, v in sent]
        p.flush(60)
        assert [f.get(60).offset for f in futs] == list(range(N))
    finally:
        p.close(10)


def produce_aiokafka(c, topic: str, name: str, sent) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=c.kafka_bootstrap, acks="all", compression_type=name, linger_ms=20)
        await p.start()
        try:
            futs = [await p.send(topic, value=v, key=k, partition=0) for k, v in sent]
            assert [(await f).offset for f in futs] == list(range(N))
        finally:
            await p.stop()
    asyncio.run(run())


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python, "aiokafka": produce_aiokafka}


def kafka_python_has(name: str) -> bool:
    from kafka import codec
    return bool(getattr(codec, f"has_{name}")())


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("client", list(PRODUCERS))
def test_a_kafka_clients_compressed_batches_are_stored_as_they_came_and_minibroker_reads_them(shared_cluster,
                                                                                             client, name):
    if client == "kafka-python" and not kafka_python_has(name):
        pytest.skip(f"kafka-python has no {name} codec here (it needs python-snappy / lz4 / zstandard)")
    topic = f"zin-{client}-{name}"
    create_topic(shared_cluster, topic)
    sent = records(topic)
    PRODUCERS[client](shared_cluster, topic, name, sent)
    assert asyncio.run(read_with_minibroker(shared_cluster, topic)) == sent
    assert stored_codecs(shared_cluster, topic) == {CODECS.index(name) + 1}


def read_confluent(c, topic: str) -> list:
    return [(k, v) for k, v, _p, _o in sorted(confluent_consume(c.kafka_bootstrap, topic, 1, N), key=lambda m: m[3])]


def read_kafka_python(c, topic: str) -> list:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    con = KafkaConsumer(bootstrap_servers=c.kafka_bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    con.assign([KTP(topic, 0)])
    got: dict[int, tuple] = {}
    try:
        for _ in range(200):
            for msgs in con.poll(timeout_ms=500).values():
                got.update({m.offset: (m.key, m.value) for m in msgs})
            if len(got) >= N:
                break
    finally:
        con.close()
    return [got[i] for i in range(len(got))]


def read_aiokafka(c, topic: str) -> list:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> list:
        con = AIOKafkaConsumer(bootstrap_servers=c.kafka_bootstrap, enable_auto_commit=False,
                               auto_offset_reset="earliest")
        await con.start()
        got: dict[int, tuple] = {}
        try:
            con.assign([ATP(topic, 0)])
            while len(got) < N:
                for msgs in (await con.getmany(timeout_ms=500)).values():
                    got.update({m.offset: (m.key, m.value) for m in msgs})
        finally:
            await con.stop()
        return [got[i] for i in range(len(got))]
    return asyncio.run(asyncio.wait_for(run(), 120))


READERS = {"confluent": read_confluent, "kafka-python": read_kafka_python, "aiokafka": read_aiokafka}


@pytest.mark.parametrize("name", CODECS)
def test_minibrokers_compressed_batches_are_read_by_every_kafka_client(shared_cluster, name):
    topic = f"zout-{name}"
    create_topic(shared_cluster, topic)
    sent = records(topic)

    async def produce() -> None:
        async with Producer(shared_cluster.bootstrap, {"acks": "all", "compression.type": name,
                                                       "linger.ms": "20"}) as p:
            for k, v in sent:
                await p.send(topic, v, k, partition=0)
            await p.flush()
    asyncio.run(produce())
    assert stored_codecs(shared_cluster, topic) == {CODECS.index(name) + 1}
    for client, read in READERS.items():
        if client == "kafka-python" and not kafka_python_has(name):
            continue
        assert read(shared_cluster, topic) == sent, client


@pytest.mark.parametrize("name", CODECS)
def test_kcats_compressed_batches_are_stored_as_they_came_and_minibroker_reads_them(shared_cluster, name):
    import subprocess

    from kafkatests import KCAT
    if KCAT is None:
        pytest.skip("kcat is not installed (Debian: apt-get install -y kcat)")
    topic = f"zin-kcat-{name}"
    create_topic(shared_cluster, topic)
    sent = records(topic)
    lines = "".join(f"{k.decode()}:{v.decode()}\n" for k, v in sent)
    r = subprocess.run([KCAT, "-b", shared_cluster.kafka_bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", name,
                        "-X", "acks=all"], input=lines, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert asyncio.run(read_with_minibroker(shared_cluster, topic)) == sent
    assert stored_codecs(shared_cluster, topic) == {CODECS.index(name) + 1}
