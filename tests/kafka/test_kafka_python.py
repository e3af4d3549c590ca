"""kafka-python 3.x (idempotent by default; negotiates flexible versions) against the Kafka listener."""
from __future__ import annotations

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic  # noqa: E402

from minibroker.testing.wait import until_sync  # noqa: E402
from kafkatests import wait_for_topic  # noqa: E402


pytestmark = pytest.mark.cluster
N = 100_000


def test_kafka_python_admin_creates_and_describes_topics(shared_cluster):
    admin = KafkaAdminClient(bootstrap_servers=shared_cluster.kafka_bootstrap)
    try:
        admin.create_topics([NewTopic("kp-admin", 2, 3, topic_configs={"retention.ms": "3600000"})])
        wait_for_topic(shared_cluster, "kp-admin", 2)   # CreateTopics answers before every broker has the topic
        (desc,) = admin.describe_topics(["kp-admin"])
        assert desc["name"] == "kp-admin" and desc["error_code"] == 0
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1]
        assert all(sorted(p["replica_nodes"]) == [1, 2, 3] == sorted(p["isr_nodes"]) for p in desc["partitions"])
        cfg = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-admin")])
        entry = cfg["topic"]["kp-admin"]["retention.ms"]
        assert entry["value"] == "3600000" and entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        cluster = admin.describe_cluster()
        assert {f"{b['host']}:{b['port']}" for b in cluster["brokers"]} == set(
            shared_cluster.kafka_bootstrap.split(","))
    finally:
        admin.close()


def test_kafka_python_admin_reassigns_a_partition_and_the_records_follow(shared_cluster):
    """KIP-455 through kafka-python's admin: RF 2 on brokers 1,2 moved to 3,1 (then back, cancelled
    nowhere: nothing is in progress); the records are all readable from the new replica set."""
    bs = shared_cluster.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([NewTopic("kp-move", replica_assignments={0: [1, 2]})])
        wait_for_topic(shared_cluster, "kp-move", 1)
        producer = KafkaProducer(bootstrap_servers=bs, acks="all")
        for i in range(20):
            producer.send("kp-move", b"r%d" % i, partition=0)
        producer.flush()
        producer.close()
        tp = TopicPartition("kp-move", 0)
        assert admin.alter_partition_reassignments({tp: [3, 1]}) == {tp: None}

        def moved() -> bool:
            (desc,) = admin.describe_topics(["kp-move"])
            (part,) = desc["partitions"]
            return not admin.list_partition_reassignments([tp]) and part["replica_nodes"] == [3, 1]
        until_sync(moved, "kp-move-0 reassigned to brokers 3,1", timeout_s=60, interval_s=0.2)
        assert admin.alter_partition_reassignments({tp: None}) == {tp: kafka.errors.NoReassignmentInProgressError}
        consumer = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest", consumer_timeout_ms=5000)
        consumer.assign([tp])
        got: list[bytes] = []
        until_sync(lambda: got.extend(r.value for rs in consumer.poll(timeout_ms=500).values() for r in rs)
                   or len(got) >= 20, "the 20 records from the new replicas", timeout_s=60)
        consumer.close()
        assert got == [b"r%d" % i for i in range(20)]
    finally:
        admin.close()


def test_kafka_python_admin_describes_each_brokers_log_dir(shared_cluster):
    bs = shared_cluster.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        admin.create_topics([NewTopic("kp-dirs", replica_assignments={0: [2, 3]})])
        wait_for_topic(shared_cluster, "kp-dirs", 1)
        by_broker = {r["broker"]: r["log_dirs"] for r in admin.describe_log_dirs(["kp-dirs"])}
        assert sorted(by_broker) == [1, 2, 3]
        for b, dirs in by_broker.items():
            (d,) = dirs
            assert d["error_code"] == 0 and d["log_dir"].endswith("data") and d["total_bytes"] >= d["usable_bytes"] > 0
            names = [(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]]
            assert names == ([("kp-dirs", 0)] if b in (2, 3) else []), (b, d)
    finally:
        admin.close()


def test_kafka_python_idempotent_producer_and_assigned_consumer_round_trip_100k_records(shared_cluster):
    bs = shared_cluster.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic("kp-100k", 2, 3)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5, batch_size=256 * 1024)
    futures = [p.send("kp-100k", key=b"k%d" % i, value=b"v%d" % i) for i in range(N)]
    p.flush(120)
    acked = {(f.get(10).partition, f.get(10).offset) for f in futures}
    p.close()
    assert len(acked) == N
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, group_id=None, auto_offset_reset="earliest")
    c.assign([TopicPartition("kp-100k", 0), TopicPartition("kp-100k", 1)])
    got = {}

    def more():
        for tp, recs in c.poll(timeout_ms=500, max_records=50_000).items():
            for r in recs:
                got[(tp.partition, r.offset)] = (r.key, r.value)
        return len(got) >= N
    try:
        until_sync(more, f"{N} records", timeout_s=180, interval_s=0)
    finally:
        c.close()
    assert set(got) == acked
    assert sorted(v for _k, v in got.values()) == sorted(b"v%d" % i for i in range(N))


def test_kafka_python_subscribe_without_a_group_reads_every_partition(shared_cluster):
    bs = shared_cluster.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs)
    admin.create_topics([NewTopic("kp-sub", 3, 3)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bs, acks="all")
    for i in range(300):
        p.send("kp-sub", value=b"s%d" % i)
    p.flush(60)
    p.close()
    c = KafkaConsumer("kp-sub", bootstrap_servers=bs, group_id=None, auto_offset_reset="earliest")
    got = set()

    def more():
        for recs in c.poll(timeout_ms=500).values():
            got.update(r.value for r in recs)
        return len(got) >= 300
    try:
        until_sync(more, "300 records through subscribe()", timeout_s=60, interval_s=0)
    finally:
        c.close()
    assert got == {b"s%d" % i for i in range(300)}
