"""The controller core's IncrementalAlterConfigs and CreatePartitions (kafka-configs, kafka-topics --alter)."""
from minibroker.controller.state import ControllerState
from minibroker.dynamic_config import ResourceType
from minibroker.errors import ErrorCode
from minibroker.metadata import CLUSTER_DEFAULT, BrokerConfigRecord, PartitionRecord, TopicRecord

from .harness import Harness


def alter(h, rtype, name, sets=None, deletes=(), validate_only=False):
    ops = [{"name": k, "op": 0, "value": v} for k, v in (sets or {}).items()] + [{"name": k, "op": 1} for k in deletes]
    out = h.state.incremental_alter_configs(h.now, [{"resource_type": int(rtype), "resource_name": name,
                                                     "configs": ops}], validate_only)
    h.log.append(out)
    return out


def test_setting_a_topic_config_writes_a_new_topic_record_with_the_same_id():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]])
    before = h.state.topics.topics["t"]
    out = alter(h, ResourceType.TOPIC, "t", {"min.insync.replicas": "2"})
    assert out.response["results"][0]["error"] == 0
    ((off, rec),) = out.records
    assert isinstance(rec, TopicRecord) and rec.topic_id == before.topic_id
    assert rec.configs == {"min.insync.replicas": "2"} and out.response["metadata_offset"] == off
    assert h.state.effective_min_isr("t", 3) == 2
    assert [e.kind for e in out.events] == ["config_changed"]
    out = alter(h, ResourceType.TOPIC, "t", deletes=["min.insync.replicas"])
    assert h.state.topics.topics["t"].configs == {} and h.state.effective_min_isr("t", 3) == 1


def test_a_cluster_default_broker_config_applies_to_topics_without_their_own():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]])
    h.create("own", [[1, 2, 3]], configs={"min.insync.replicas": "1"})
    out = alter(h, ResourceType.BROKER, "", {"min.insync.replicas": "3"})
    ((_, rec),) = out.records
    assert rec == BrokerConfigRecord(CLUSTER_DEFAULT, {"min.insync.replicas": "3"})
    assert h.state.effective_min_isr("t", 3) == 3 and h.state.effective_min_isr("own", 3) == 1


def test_the_broker_defaults_of_topic_configs_are_dynamic_and_checked_as_their_topic_configs():
    """Kafka's DynamicLogConfig: log.retention.ms, compression.type, log.message.timestamp.type, ... may be
    set for the cluster (--entity-default) or one broker, and deleted again; a bad value is refused naming
    the broker config."""
    h = Harness()
    h.start(1, 2, 3)
    sets = {"log.retention.ms": "60000", "compression.type": "zstd", "log.message.timestamp.type": "LogAppendTime"}
    out = alter(h, ResourceType.BROKER, "", sets)
    assert out.response["results"][0]["error"] == 0
    assert [rec for _, rec in out.records] == [BrokerConfigRecord(CLUSTER_DEFAULT, sets)]
    out = alter(h, ResourceType.BROKER, "", {"log.retention.ms": "-2"})
    assert out.response["results"][0]["message"] == \
        "Invalid value -2 for configuration log.retention.ms: Value must be at least -1"
    out = alter(h, ResourceType.BROKER, "", deletes=["compression.type", "log.message.timestamp.type"])
    assert [rec for _, rec in out.records] == [BrokerConfigRecord(CLUSTER_DEFAULT, {"log.retention.ms": "60000"})]


def test_bad_config_alterations_are_refused_and_write_nothing():
    h = Harness()
    h.start(1)
    h.create("t", [[1]])
    cases = [
        (ResourceType.TOPIC, "nope", {"min.insync.replicas": "2"}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (ResourceType.TOPIC, "t", {"min.insync.replicas": "zero"}, ErrorCode.INVALID_CONFIG),
        (ResourceType.TOPIC, "t", {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        (ResourceType.BROKER, "1", {"broker.rack": "x"}, ErrorCode.INVALID_REQUEST),
        (ResourceType.BROKER, "1", {"min.insync.replicas": "0"}, ErrorCode.INVALID_CONFIG),
        (ResourceType.BROKER, "one", {"min.insync.replicas": "2"}, ErrorCode.INVALID_REQUEST),
        (ResourceType.BROKER, "", {"log.retention.ms": "-2"}, ErrorCode.INVALID_CONFIG),
        (ResourceType.BROKER, "", {"compression.type": "brotli"}, ErrorCode.INVALID_CONFIG),
        (ResourceType.BROKER, "", {"log.retention.check.interval.ms": "1000"}, ErrorCode.INVALID_REQUEST),
    ]
    for rtype, name, sets, code in cases:
        out = alter(h, rtype, name, sets)
        assert out.response["results"][0]["error"] == code, (name, sets, out.response)
        assert out.records == []


def test_validate_only_checks_without_writing():
    h = Harness()
    h.start(1)
    h.create("t", [[1]])
    out = alter(h, ResourceType.TOPIC, "t", {"min.insync.replicas": "1"}, validate_only=True)
    assert out.response["results"][0]["error"] == 0 and out.records == []


def test_create_partitions_adds_placed_partitions_led_by_their_first_replica():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]])
    out = h.state.create_partitions(h.now, [{"topic": "t", "count": 3}])
    assert out.response["results"] == [{"topic": "t", "error": 0, "message": ""}]
    recs = [r for _, r in out.records]
    assert isinstance(recs[0], TopicRecord) and recs[0].num_partitions == 3
    parts = [r for r in recs if isinstance(r, PartitionRecord)]
    assert [p.partition for p in parts] == [1, 2]
    for p in parts:
        assert len(p.replicas) == 3 and p.leader == p.replicas[0] and p.isr == p.replicas
    assert sorted(h.state.topics.partitions["t"]) == [0, 1, 2]


def test_create_partitions_takes_manual_assignments_and_refuses_a_decrease():
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2]])
    out = h.state.create_partitions(h.now, [{"topic": "t", "count": 2, "assignments": [[3, 1]]}])
    assert out.response["results"][0]["error"] == 0 and h.state.topics.get("t", 1).replicas == (3, 1)
    for body, code in [({"topic": "t", "count": 1}, ErrorCode.INVALID_PARTITIONS),
                       ({"topic": "t", "count": 2}, ErrorCode.INVALID_PARTITIONS),
                       ({"topic": "t", "count": 3, "assignments": [[1]]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                       ({"topic": "t", "count": 3, "assignments": [[1, 9]]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                       ({"topic": "nope", "count": 3}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]:
        out = h.state.create_partitions(h.now, [body])
        assert out.response["results"][0]["error"] == code, body
        assert out.records == []


def test_replay_rebuilds_dynamic_configs_and_grown_topics():
    h = Harness()
    h.start(1, 2)
    h.create("t", [[1, 2]])
    alter(h, ResourceType.BROKER, "", {"min.insync.replicas": "2"})
    alter(h, ResourceType.BROKER, "2", {"unclean.leader.election.enable": "true"})
    h.state.create_partitions(h.now, [{"topic": "t", "count": 2}])
    fresh = ControllerState(h.state.settings)
    for off, rec in h.state.image():
        fresh.replay(off, rec)
    assert fresh.broker_configs == h.state.broker_configs == {
        CLUSTER_DEFAULT: {"min.insync.replicas": "2"}, 2: {"unclean.leader.election.enable": "true"}}
    assert fresh.topics.topics["t"].num_partitions == 2 and sorted(fresh.topics.partitions["t"]) == [0, 1]


def _ops(h, rtype, name, *ops):
    configs = [dict(zip(("op", "name", "value"), o, strict=False)) for o in ops]     # (op, name[, value])
    out = h.state.incremental_alter_configs(h.now, [{"resource_type": int(rtype), "resource_name": name,
                                                     "configs": configs}])
    h.log.append(out)
    return out.response["results"][0]


def test_append_and_subtract_edit_a_list_config_as_kafka_does():
    """Kafka's ConfigurationControlManager: APPEND (2) adds each comma-separated value the list lacks,
    SUBTRACT (3) takes each out, starting from the override or the default; only LIST configs take
    them, and the result is checked as a SET of it would be (RQ1: the throttled-replicas lists)."""
    h = Harness()
    h.start(1, 2, 3)
    h.create("t", [[1, 2, 3]])
    key = "leader.replication.throttled.replicas"
    assert _ops(h, ResourceType.TOPIC, "t", (2, key, "0:1,0:2"))["error"] == 0
    assert h.state.topics.topics["t"].configs[key] == "0:1,0:2"
    assert _ops(h, ResourceType.TOPIC, "t", (2, key, "0:2,0:3"))["error"] == 0
    assert h.state.topics.topics["t"].configs[key] == "0:1,0:2,0:3"
    assert _ops(h, ResourceType.TOPIC, "t", (3, key, "0:1,0:9"))["error"] == 0
    assert h.state.topics.topics["t"].configs[key] == "0:2,0:3"
    refused = _ops(h, ResourceType.TOPIC, "t", (2, key, "bad"))
    assert refused["error"] == ErrorCode.INVALID_CONFIG and "must be the literal '*'" in refused["message"]
    assert h.state.topics.topics["t"].configs[key] == "0:2,0:3"
    listless = _ops(h, ResourceType.TOPIC, "t", (2, "min.insync.replicas", "2"))
    assert (listless["error"], listless["message"]) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key min.insync.replicas because its type is not LIST.")
    rate = _ops(h, ResourceType.BROKER, "1", (3, "leader.replication.throttled.rate", "5"))
    assert rate["message"] == "Can't SUBTRACT to key leader.replication.throttled.rate because its type is not LIST."
    # A default holds the starting list: cleanup.policy is "delete", so appending it again changes nothing.
    assert _ops(h, ResourceType.TOPIC, "t", (2, "cleanup.policy", "delete"))["error"] == 0
    assert h.state.topics.topics["t"].configs["cleanup.policy"] == "delete"
    assert _ops(h, ResourceType.TOPIC, "t", (2, key))["error"] == ErrorCode.INVALID_REQUEST
