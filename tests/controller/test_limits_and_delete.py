"""CreateTopics limits (issue 10) and DeleteTopics in the controller core."""
from minibroker.errors import ErrorCode
from minibroker.metadata import RemoveTopicRecord

from .harness import Harness


def test_more_partitions_in_one_request_than_the_limit_is_a_policy_violation_naming_the_key():
    h = Harness(max_partitions_per_request=100)
    h.start(0, 1, 2)
    out = h.state.create_topics(h.now, [{"topic": "a", "num_partitions": 60, "replication_factor": 1},
                                        {"topic": "b", "num_partitions": 41, "replication_factor": 1}])
    assert [t["error"] for t in out.response["topics"]] == [ErrorCode.POLICY_VIOLATION] * 2
    assert "minibroker.max.partitions.per.request" in out.response["topics"][0]["message"]
    assert out.records == [] and "a" not in h.state.topics.topics


def test_a_huge_validate_only_request_is_refused_before_any_placement():
    h = Harness()
    h.start(0, 1, 2)
    out = h.state.create_topics(h.now, [{"topic": "a", "num_partitions": 4_000_000, "replication_factor": 3}],
                                validate_only=True)
    assert out.response["topics"][0]["error"] == ErrorCode.POLICY_VIOLATION


def test_replicas_beyond_the_per_broker_limit_are_a_policy_violation_counting_existing_topics():
    h = Harness(max_partitions_per_broker=10)
    h.start(0, 1, 2)
    assert h.create("a", partitions=8, rf=3).response["topics"][0]["error"] == 0
    out = h.create("b", partitions=3, rf=3)
    t = out.response["topics"][0]
    assert t["error"] == ErrorCode.POLICY_VIOLATION and "minibroker.max.partitions.per.broker" in t["message"]
    assert h.create("c", partitions=2, rf=3).response["topics"][0]["error"] == 0


def test_max_message_bytes_above_what_a_follower_can_fetch_is_an_invalid_config():
    h = Harness(max_message_bytes_limit=1000)
    h.start(0, 1, 2)
    t = h.create("a", partitions=1, rf=1, configs={"max.message.bytes": "1001"}).response["topics"][0]
    assert t["error"] == ErrorCode.INVALID_CONFIG and "socket.request.max.bytes" in t["message"]
    assert h.create("b", partitions=1, rf=1, configs={"max.message.bytes": "1000"}).response["topics"][0]["error"] == 0


def test_delete_topics_writes_one_remove_record_per_existing_topic_and_reports_unknown_ones():
    h = Harness()
    h.start(0, 1, 2)
    h.create("a", partitions=2, rf=3)
    out = h.state.delete_topics(h.now, ["a", "nope"])
    assert [(t["topic"], t["error"]) for t in out.response["topics"]] == [
        ("a", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert [rec for _, rec in out.records] == [RemoveTopicRecord("a")]
    assert [e.kind for e in out.events] == ["topic_deleted"]
    assert "a" not in h.state.topics.topics and all(getattr(rec, "topic", None) != "a" for _, rec in h.state.image())
    assert h.create("a", partitions=1, rf=1).response["topics"][0]["error"] == 0


def test_a_topic_named_twice_in_delete_topics_is_invalid_request_and_not_deleted():
    h = Harness()
    h.start(0, 1, 2)
    h.create("a", partitions=1, rf=1)
    out = h.state.delete_topics(h.now, ["a", "a"])
    assert [t["error"] for t in out.response["topics"]] == [ErrorCode.INVALID_REQUEST] * 2
    assert "a" in h.state.topics.topics
