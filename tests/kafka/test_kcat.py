"""kcat (Debian's, on librdkafka 2.0.2: the old exact-version feature checks)
against the Kafka listener."""
from __future__ import annotations

import re
import subprocess

import pytest

from kafkatests import KCAT, create_topic, needs_kcat

pytestmark = [pytest.mark.cluster, needs_kcat]


def kcat(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    assert KCAT is not None
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def test_kcat_lists_brokers_topics_leaders_and_isrs(shared_cluster):
    c = shared_cluster
    create_topic(c, "kc-list", partitions=2)
    r = kcat("-b", c.kafka_bootstrap, "-L", "-t", "kc-list")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert " 3 brokers:" in out
    for b in c.layout.brokers:
        assert f"broker {b.node_id} at {b.kafka_address}" in out
    assert 'topic "kc-list" with 2 partitions:' in out
    parts = re.findall(r"partition (\d+), leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)", out)
    assert [p[0] for p in parts] == ["0", "1"]
    for _p, leader, replicas, isrs in parts:
        assert sorted(replicas.split(",")) == ["1", "2", "3"] == sorted(isrs.split(","))
        assert leader in replicas.split(",")


def test_kcat_acks_all_produce_and_consume_round_trip_10k_keyed_records_exactly(shared_cluster):
    c = shared_cluster
    create_topic(c, "kc-rt", partitions=3)
    lines = [f"key-{i}:value-{i}" for i in range(10_000)]
    r = kcat("-b", c.kafka_bootstrap, "-P", "-t", "kc-rt", "-K:", "-X", "acks=all", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    r = kcat("-b", c.kafka_bootstrap, "-C", "-t", "kc-rt", "-e", "-q", "-f", "%k:%s\n")
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    assert sorted(got) == sorted(lines)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kcat_reads_minibrokers_compressed_batches_exactly(shared_cluster, codec):
    import asyncio

    from minibroker.client import Producer
    c = shared_cluster
    topic = f"kc-mb-{codec}"
    create_topic(c, topic)
    values = [b"%s-%d" % (codec.encode(), i) for i in range(300)]

    async def write():
        async with Producer(c.bootstrap, {"acks": "all", "compression.type": codec, "linger.ms": "20"}) as p:
            futs = [await p.send(topic, v) for v in values]
            await p.flush()
            for f in futs:
                await f
    asyncio.run(write())
    r = kcat("-b", c.kafka_bootstrap, "-C", "-t", topic, "-e", "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [v.decode() for v in values]
