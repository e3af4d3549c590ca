"""confluent-kafka (librdkafka) against the Kafka listener: acks=all produce,
assign() consumption, admin, min.insync.replicas refusals, a leader killed
mid-stream."""
from __future__ import annotations

import asyncio
import threading
import time
import warnings

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: E402

from minibroker.client import Admin  # noqa: E402
from minibroker.testing.wait import until_sync  # noqa: E402
from kafkatests import consume, create_topic, wait_every_broker_listed, wait_for_topic  # noqa: E402

pytestmark = pytest.mark.cluster


def produce(bs: str, topic: str, n: int, conf: dict | None = None) -> tuple[list, list]:
    """Produce n keyed records; (acknowledged (key, value, partition, offset), errors)."""
    acked: list = []
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.key(), msg.value(), msg.partition(), msg.offset()))
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5, **(conf or {})})
    for i in range(n):
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return acked, errors


def test_acks_all_producer_and_assign_consumer_round_trip_100k_records_exactly(shared_cluster):
    c = shared_cluster
    create_topic(c, "cf-100k", partitions=3)
    acked, errors = produce(c.kafka_bootstrap, "cf-100k", 100_000)
    assert errors == []
    got = consume(c.kafka_bootstrap, "cf-100k", 3, 100_000)
    assert sorted(got) == sorted(acked)
    assert len(set(got)) == 100_000
    # Offsets per partition are dense from 0 (no gaps, no duplicates).
    for p in range(3):
        offs = sorted(o for (_k, _v, part, o) in got if part == p)
        assert offs == list(range(len(offs)))


def test_admin_client_creates_and_describes_topics_and_configs(shared_cluster):
    c = shared_cluster
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
    from confluent_kafka.admin import NewTopic
    fs = admin.create_topics([NewTopic("cf-admin", 4, 3, config={"min.insync.replicas": "2"})])
    fs["cf-admin"].result(timeout=60)
    wait_for_topic(c, "cf-admin", 4)             # CreateTopics answers before every broker has the topic
    dup = admin.create_topics([NewTopic("cf-admin", 4, 3)])
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        dup["cf-admin"].result(timeout=60)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    md = admin.list_topics("cf-admin", timeout=30)
    t = md.topics["cf-admin"]
    assert sorted(t.partitions) == [0, 1, 2, 3]
    assert all(sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] for p in t.partitions.values())
    assert sorted(md.brokers) == [1, 2, 3]
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == set(c.kafka_bootstrap.split(","))
    res = ConfigResource(ConfigResource.Type.TOPIC, "cf-admin")
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["min.insync.replicas"].value == "2"
    assert not configs["min.insync.replicas"].is_default
    assert configs["retention.ms"].value == "604800000"
    cluster = admin.describe_cluster().result(timeout=30)
    assert sorted(n.id for n in cluster.nodes) == [1, 2, 3]
    topics = admin.describe_topics(confluent_kafka.TopicCollection(["cf-admin"]))
    assert len(topics["cf-admin"].result(timeout=30).partitions) == 4
    # Each partition is led by its preferred replica already: Kafka's ELECTION_NOT_NEEDED.
    elected = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED,
                                  [TopicPartition("cf-admin", 0)]).result(timeout=30)
    (err,) = elected.values()
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, NewPartitions
    admin.create_partitions([NewPartitions("cf-admin", 6)])["cf-admin"].result(timeout=60)
    md = admin.list_topics("cf-admin", timeout=30)
    assert sorted(md.topics["cf-admin"].partitions) == [0, 1, 2, 3, 4, 5]
    change = ConfigResource(ConfigResource.Type.TOPIC, "cf-admin", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(timeout=30)
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    # A LIST config takes APPEND and SUBTRACT (the replication throttles' replica lists, KIP-73).
    key = "leader.replication.throttled.replicas"
    for op, value in ((AlterConfigOpType.APPEND, "0:1,1:2"), (AlterConfigOpType.APPEND, "1:2,2:3"),
                      (AlterConfigOpType.SUBTRACT, "0:1")):
        change = ConfigResource(ConfigResource.Type.TOPIC, "cf-admin", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        admin.incremental_alter_configs([change])[change].result(timeout=30)
    assert admin.describe_configs([res])[res].result(timeout=30)[key].value == "1:2,2:3"
    change = ConfigResource(ConfigResource.Type.TOPIC, "cf-admin", incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        admin.incremental_alter_configs([change])[change].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    admin.delete_topics(["cf-admin"], operation_timeout=30)["cf-admin"].result(timeout=60)
    assert "cf-admin" not in admin.list_topics(timeout=30).topics


def test_acks_all_refused_with_not_enough_replicas_below_min_isr_and_leader_leo_unchanged(shared_cluster):
    c = shared_cluster
    create_topic(c, "cf-minisr", partitions=1, configs={"min.insync.replicas": "3"})
    acked, errors = produce(c.kafka_bootstrap, "cf-minisr", 10)
    assert errors == [] and len(acked) == 10
    md = AdminClient({"bootstrap.servers": c.kafka_bootstrap}).list_topics("cf-minisr", timeout=30)
    leader = md.topics["cf-minisr"].partitions[0].leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    c.pause(follower)
    try:
        def isr_shrunk():
            m = AdminClient({"bootstrap.servers": c.kafka_bootstrap}).list_topics("cf-minisr", timeout=10)
            return follower not in m.topics["cf-minisr"].partitions[0].isrs
        until_sync(isr_shrunk, "the paused follower leaving the ISR", timeout_s=60)
        leo_before = leader_leo(c, leader, "cf-minisr")
        _acked, errs = produce(c.kafka_bootstrap, "cf-minisr", 1, {"retries": 0, "message.timeout.ms": 20_000})
        assert [e.code() for e in errs] == [KafkaError.NOT_ENOUGH_REPLICAS]
        assert leader_leo(c, leader, "cf-minisr") == leo_before == 10
    finally:
        c.resume(follower)
        wait_every_broker_listed(c)         # the pause may have fenced it: leave the shared cluster whole


def leader_leo(c, leader: int, topic: str) -> int:
    async def go():
        spec = c.layout.broker(leader)
        async with Admin(c.bootstrap) as admin:
            resp = await admin.replica_status((spec.host, spec.port), [topic])
        (p,) = resp["partitions"]
        assert p["role"] == "leader"
        return p["leo"]
    return asyncio.run(go())


def test_every_acknowledged_record_survives_a_leader_kill_mid_stream(shared_cluster):
    c = shared_cluster
    create_topic(c, "cf-kill", partitions=1, configs={"min.insync.replicas": "2"})
    md = AdminClient({"bootstrap.servers": c.kafka_bootstrap}).list_topics("cf-kill", timeout=30)
    leader = md.topics["cf-kill"].partitions[0].leader
    acked: list = []
    errors: list = []
    stop = threading.Event()

    def run():
        def report(err, msg):
            (errors if err is not None else acked).append(msg.value() if err is None else err)
        p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", "linger.ms": 2,
                      "message.timeout.ms": 60_000, "retry.backoff.ms": 100})
        i = 0
        while not stop.is_set():
            p.produce("cf-kill", value=b"m-%d" % i, on_delivery=report)
            i += 1
            p.poll(0.002)
        p.flush(90)
    t = threading.Thread(target=run)
    t.start()
    try:
        until_sync(lambda: len(acked) >= 500, "500 acknowledged records before the kill", timeout_s=60)
        c.kill(leader)
        at_kill = len(acked)
        until_sync(lambda: len(acked) >= at_kill + 500, "500 more acknowledged records after the kill",
                   timeout_s=90)
    finally:
        stop.set()
        t.join(120)
    try:
        got = consume(c.kafka_bootstrap, "cf-kill", 1, len(set(acked)))
        values = {v for (_k, v, _p, _o) in got}
        assert set(acked) <= values
    finally:
        c.start_broker(leader)
        c.wait_running_sync(60)


def test_a_producer_to_an_unknown_topic_creates_it_as_kafka_does_by_default(shared_cluster):
    """auto.create.topics.enable=true (Kafka's default): num.partitions, default.replication.factor."""
    c = shared_cluster
    acked, errors = produce(c.kafka_bootstrap, "cf-auto", 3)
    assert errors == [] and len(acked) == 3
    md = AdminClient({"bootstrap.servers": c.kafka_bootstrap}).list_topics("cf-auto", timeout=30)
    assert len(md.topics["cf-auto"].partitions) == 1
    assert consume(c.kafka_bootstrap, "cf-auto", 1, 3) == acked


def test_a_producer_to_an_invalid_topic_name_gets_topic_exception(shared_cluster):
    _acked, errors = produce(shared_cluster.kafka_bootstrap, "bad name!", 1, {"message.timeout.ms": 10_000})
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]


def test_offsets_for_times_finds_the_record_inside_a_batch_and_a_commit_to_an_unknown_topic_is_refused(
        shared_cluster):
    """Both as librdkafka's own tests 0054 and 0030 expect of Kafka: the first record at or after the
    time, even in the middle of a batch; a commit naming a topic that does not exist fails with
    UNKNOWN_TOPIC_OR_PART and commits nothing."""
    c = shared_cluster
    create_topic(c, "cf-times", partitions=1)
    p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all", "linger.ms": 200})
    for ts in (1234, 999_999_999_999, 5_000):                    # one batch: linger.ms holds them together
        p.produce("cf-times", value=b"v%d" % ts, partition=0, timestamp=ts)
    assert p.flush(60) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": "cf-times-g"})
    try:
        found = consumer.offsets_for_times([TopicPartition("cf-times", 0, 999_999_999_999)], timeout=30)
        assert [(tp.offset, tp.error) for tp in found] == [(1, None)]
        found = consumer.offsets_for_times([TopicPartition("cf-times", 0, 1235)], timeout=30)
        assert found[0].offset == 1
        found = consumer.offsets_for_times([TopicPartition("cf-times", 0, 2_000)], timeout=30)
        assert found[0].offset == 1                             # the first at or after it, not the closest (2)
        with pytest.raises(confluent_kafka.KafkaException) as ei:
            consumer.commit(offsets=[TopicPartition("cf-no-such-topic", 0, 5), TopicPartition("cf-times", 0, 2)],
                            asynchronous=False)
        assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        committed = consumer.committed([TopicPartition("cf-times", 0)], timeout=30)
        assert committed[0].offset == 2
    finally:
        consumer.close()


def test_the_legacy_alter_configs_replaces_a_topics_overrides(shared_cluster):
    """AdminClient.alter_configs is AlterConfigs (API 33), deprecated but served by Kafka 4: the given
    configs become the topic's whole set of overrides (min.insync.replicas, set at creation, is reset)."""
    c = shared_cluster
    from confluent_kafka.admin import NewTopic
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
    admin.create_topics([NewTopic("cf-legacy", 1, 3, config={"min.insync.replicas": "2"})])["cf-legacy"].result(60)
    wait_for_topic(c, "cf-legacy", 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy", set_config={"compression.type": "zstd"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        admin.alter_configs([res])[res].result(timeout=30)

    def overrides() -> dict[str, str]:
        got = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy")])
        return {k: e.value for k, e in next(iter(got.values())).result(timeout=30).items() if not e.is_default}
    until_sync(lambda: overrides() == {"compression.type": "zstd"}, what="the overrides to be the altered set only",
               timeout_s=30)
    bad = ConfigResource(ConfigResource.Type.TOPIC, "cf-legacy", set_config={"compression.type": "brotli"})
    with warnings.catch_warnings(), pytest.raises(confluent_kafka.KafkaException) as ei:
        warnings.simplefilter("ignore", DeprecationWarning)
        admin.alter_configs([bad])[bad].result(timeout=30)
    assert ei.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert overrides() == {"compression.type": "zstd"}


def test_a_log_append_time_topic_gives_librdkafka_the_leaders_time(shared_cluster):
    """message.timestamp.type=LogAppendTime (librdkafka's 0052 creates such a topic with Kafka's CLI): the
    delivery report and the consumed message both carry TIMESTAMP_LOG_APPEND_TIME and the leader's time,
    whatever CreateTime the producer gave."""
    c = shared_cluster
    create_topic(c, "cf-append-time", partitions=1, configs={"message.timestamp.type": "LogAppendTime"})
    reports: list = []
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all"})
    p.produce("cf-append-time", value=b"v", partition=0, timestamp=1234,
              on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
    assert p.flush(60) == 0
    after = int(time.time() * 1000)
    [(err, (kind, ts))] = reports
    assert err is None and kind == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    consumer = confluent_kafka.Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": "cf-append-time-g",
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("cf-append-time", 0, 0)])
        msg = until_sync(lambda: consumer.poll(1.0), what="the record", timeout_s=30)
        assert msg.error() is None and msg.timestamp() == (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, ts)
    finally:
        consumer.close()


def test_librdkafka_gets_invalid_timestamp_for_a_record_beyond_after_max_ms(shared_cluster):
    """Kafka 4.0 refuses a CreateTime more than message.timestamp.after.max.ms (one hour) ahead of the
    broker's clock: librdkafka's delivery report carries INVALID_TIMESTAMP, not retried, and a record
    sent now after it is delivered."""
    c = shared_cluster
    create_topic(c, "cf-future", partitions=1)
    reports: list = []
    p = Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all"})
    now = int(time.time() * 1000)
    p.produce("cf-future", value=b"ahead", partition=0, timestamp=now + 2 * 3_600_000,
              on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(60) == 0
    p.produce("cf-future", value=b"now", partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(60) == 0
    [refused, delivered] = reports
    assert refused is not None and refused.code() == KafkaError.INVALID_TIMESTAMP and not refused.retriable()
    assert delivered is None


def test_delete_records_moves_the_log_start_on_every_replica_and_a_consumer_starts_there(shared_cluster):
    """AdminClient.delete_records (kafka-delete-records): the leader moves the log start offset, the answer's
    low watermark comes once every replica's log start reached it (Kafka's DelayedDeleteRecords), a consumer
    from the beginning starts there, and an offset above the high watermark is OFFSET_OUT_OF_RANGE."""
    from minibroker.client.types import TopicPartition as MbTP
    c = shared_cluster
    create_topic(c, "cf-delete-records", partitions=1)
    acked, errors = produce(c.kafka_bootstrap, "cf-delete-records", 10)
    assert len(acked) == 10 and not errors
    admin = AdminClient({"bootstrap.servers": c.kafka_bootstrap})
    tp = TopicPartition("cf-delete-records", 0, 6)
    (fut,) = admin.delete_records([tp], operation_timeout=30).values()
    assert fut.result(timeout=60).low_watermark == 6
    (beyond,) = admin.delete_records([TopicPartition("cf-delete-records", 0, 11)], operation_timeout=30).values()
    with pytest.raises(confluent_kafka.KafkaException) as exc:
        beyond.result(timeout=60)
    assert exc.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    records = consume(c.kafka_bootstrap, "cf-delete-records", 1, 4)
    assert [r[3] for r in records] == [6, 7, 8, 9]

    async def starts() -> list[int]:
        async with Admin(c.bootstrap) as a:
            return [p["log_start_offset"] for b in c.broker_ids
                    for p in (await a.replica_status(c.broker_address(b), ["cf-delete-records"]))["partitions"]]
    assert asyncio.run(starts()) == [6, 6, 6]
    assert asyncio.run(_earliest(c.bootstrap, MbTP("cf-delete-records", 0))) == 6


async def _earliest(bootstrap: str, tp) -> int:
    async with Admin(bootstrap) as a:
        return (await a.list_offsets({tp: -2}))[tp].offset
