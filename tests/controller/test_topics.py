import pytest

from minibroker.controller.topics import TopicTable, topic_config_error, topic_name_error
from minibroker.metadata import TopicRecord


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * 249, "_", "-"])
def test_legal_topic_names(name):
    assert topic_name_error(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_illegal_topic_names(name):
    assert topic_name_error(name)


def test_accepted_topic_configs_with_their_types():
    assert topic_config_error({"min.insync.replicas": "2", "unclean.leader.election.enable": "TRUE",
                               "retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": "1048576",
                               "segment.ms": "60000", "max.message.bytes": "1000000", "flush.messages": "1",
                               "flush.ms": "0", "index.interval.bytes": "4096"}) is None
    for value in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"):
        assert topic_config_error({"compression.type": value}) is None
    assert topic_config_error({"cleanup.policy": "delete"}) is None          # Kafka's default, often set explicitly
    for value in ("CreateTime", "LogAppendTime"):
        assert topic_config_error({"message.timestamp.type": value}) is None


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact", ""])
def test_cleanup_policy_other_than_delete_is_refused_saying_why(policy):
    assert topic_config_error({"cleanup.policy": policy}) == (
        f"Invalid value {policy} for configuration cleanup.policy: minibroker serves only delete "
        "(it has no log cleaner, so compact is not supported)")


def test_compression_type_names_kafkas_choices_when_refused():
    assert topic_config_error({"compression.type": "LZ4"}) == (
        "Invalid value LZ4 for configuration compression.type: String must be one of: "
        "uncompressed, zstd, lz4, snappy, gzip, producer")
    assert topic_config_error({"message.timestamp.type": "logappendtime"}) == (
        "Invalid value logappendtime for configuration message.timestamp.type: String must be one of: "
        "CreateTime, LogAppendTime")


@pytest.mark.parametrize("configs", [
    {"cleanup.policy": "compact"}, {"min.insync.replicas": "0"}, {"min.insync.replicas": "1.5"},
    {"segment.bytes": "13"}, {"segment.bytes": str(2 ** 31)}, {"retention.ms": "-2"},
    {"unclean.leader.election.enable": "1"}, {"flush.messages": "0"}])
def test_unknown_or_ill_typed_topic_configs_are_refused(configs):
    assert topic_config_error(configs)


def test_names_colliding_on_dot_and_underscore_are_detected():
    t = TopicTable()
    t.apply(TopicRecord("a.b", "id", 1))
    assert t.colliding_topic("a_b") == "a.b"
    assert t.colliding_topic("a.b") is None and t.colliding_topic("ab") is None
