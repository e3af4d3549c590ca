"""Pure formats and option parsing of Kafka's tools: kafka-configs, kafka-get-offsets,
kafka-leader-election's JSON file, kafka-broker-api-versions."""
import pytest

from minibroker.cli.configs import parse_add_config
from minibroker.cli.format import api_versions_lines, config_describe_lines, offset_skip_line, partitions_from_json
from minibroker.cli.offset_spec import SpecError, parse_time, select_partitions
from minibroker.client.types import TopicPartition as TP
from minibroker.dynamic_config import ConfigSource, broker_config_error, topic_entries
from minibroker.errors import ErrorCode, KafkaError
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

TOPICS = {"orders": [0, 1, 2, 10, 11], "orders-eu": [0], "audit": [0, 1]}


def test_offsets_selects_every_topic_sorted_as_text_then_partitions_by_number():
    assert select_partitions(TOPICS) == [TP("audit", 0), TP("audit", 1), TP("orders", 0), TP("orders", 1),
                                         TP("orders", 2), TP("orders", 10), TP("orders", 11), TP("orders-eu", 0)]


def test_offsets_topic_is_a_regular_expression_matching_the_whole_name():
    assert {tp.topic for tp in select_partitions(TOPICS, topic="orders.*")} == {"orders", "orders-eu"}
    assert {tp.topic for tp in select_partitions(TOPICS, topic="orders")} == {"orders"}
    assert select_partitions(TOPICS, topic="orders", partitions="11,0") == [TP("orders", 0), TP("orders", 11)]


def test_offsets_topic_partitions_patterns_take_numbers_and_half_open_ranges():
    got = select_partitions(TOPICS, topic_partitions="orders:1-11,audit:1,:0-")
    assert got == [TP("audit", 0), TP("audit", 1), TP("orders", 0), TP("orders", 1), TP("orders", 2),
                   TP("orders", 10), TP("orders", 11), TP("orders-eu", 0)]
    assert select_partitions(TOPICS, topic_partitions="orders:-2") == [TP("orders", 0), TP("orders", 1)]
    assert select_partitions(TOPICS, topic_partitions="orders:2-11") == [TP("orders", 2), TP("orders", 10)]


def test_offsets_refuses_filters_that_match_nothing_or_conflict():
    with pytest.raises(SpecError, match="Could not match any topic-partitions"):
        select_partitions(TOPICS, topic="nope")
    with pytest.raises(SpecError, match="cannot be used with"):
        select_partitions(TOPICS, topic="orders", topic_partitions="orders:0")
    with pytest.raises(SpecError, match="only be used with --topic"):
        select_partitions(TOPICS, partitions="0")
    with pytest.raises(SpecError, match="not a valid regular expression"):
        select_partitions(TOPICS, topic="(")


def test_offsets_time_takes_kafkas_numbers_names_and_timestamps():
    assert [parse_time(t) for t in ("-1", "latest", "-2", "earliest", "-3", "max-timestamp", "-4")] == [
        LATEST_TIMESTAMP, LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, MAX_TIMESTAMP,
        EARLIEST_TIMESTAMP]
    assert parse_time("1700000000000") == 1700000000000
    for bad in ("-9", "soon"):
        with pytest.raises(SpecError):
            parse_time(bad)


def test_offset_skip_line_is_get_offset_shells():
    err = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "orders-1: no leader (partition offline)")
    assert offset_skip_line(TP("orders", 1), err) == ("Skip getting offsets for topic-partition orders:1 due to "
                                                      "error: LEADER_NOT_AVAILABLE: orders-1: no leader "
                                                      "(partition offline)")


def test_configs_describe_lines_are_kafka_configs_with_synonyms_most_specific_first():
    entries = topic_entries({"min.insync.replicas": "2"}, {}, {"min.insync.replicas": "3"},
                            {"min.insync.replicas": "1", "log.retention.ms": "1000"})
    lines = config_describe_lines("topics", "orders", entries, only=ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert lines == ["Dynamic configs for topic orders are:",
                     "  min.insync.replicas=2 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:min.insync.replicas=2, "
                     "DYNAMIC_DEFAULT_BROKER_CONFIG:min.insync.replicas=3, DEFAULT_CONFIG:min.insync.replicas=1}"]
    every = {e.name: e for e in entries}
    assert every["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG and not every["retention.ms"].is_default
    assert every["segment.bytes"].is_default
    assert config_describe_lines("brokers", "", [], only=ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) == [
        "Default configs for brokers in the cluster are:"]


def test_only_runtime_broker_configs_may_be_altered():
    assert broker_config_error({"min.insync.replicas": "2"}) is None
    assert "Cannot update these configs dynamically: broker.rack" in broker_config_error({"broker.rack": "a"})
    assert "at least 1" in broker_config_error({"min.insync.replicas": "0"})


def test_add_config_splits_on_commas_outside_brackets():
    assert parse_add_config("min.insync.replicas=2, retention.ms=1000") == {"min.insync.replicas": "2",
                                                                           "retention.ms": "1000"}
    assert parse_add_config("k=[a,b],x=1") == {"k": "a,b", "x": "1"}


def test_leader_election_json_file_is_kafkas_and_refuses_duplicates():
    assert partitions_from_json('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "b", "partition": 0}]}'
                                ) == [TP("a", 1), TP("b", 0)]
    for bad, why in [("[]", "expected"), ("{", "not valid JSON"),
                     ('{"partitions": [{"topic": "a", "partition": "1"}]}', "integer partition"),
                     ('{"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]}',
                      "duplicate partitions: a-1")]:
        with pytest.raises(ValueError, match=why):
            partitions_from_json(bad)


def test_broker_api_versions_lines_are_kafka_broker_api_versions():
    lines = api_versions_lines("127.0.0.1:9092", 1, "zone-a", [{"api": 18, "min_v": 0, "max_v": 0},
                                                             {"api": 0, "min_v": 0, "max_v": 0}])
    assert lines == ["127.0.0.1:9092 (id: 1 rack: zone-a) -> (", "\tProduce(0): 0 to 0 [usable: 0],",
                     "\tApiVersions(18): 0 to 0 [usable: 0]", ")"]
    assert api_versions_lines("h:1", 2, None, [])[0] == "h:1 (id: 2 rack: null) -> ("


def test_metadata_quorum_status_and_replication_are_kafka_metadata_quorums():
    from minibroker.cli.quorum import replication_lines, status_lines
    q = {"cluster_id": "abc", "leader_id": 0, "leader_epoch": 3, "high_watermark": 47,
         "voters": [{"replica_id": 0, "log_end_offset": 47, "last_fetch_timestamp": 100,
                     "last_caught_up_timestamp": 100}],
         "observers": [{"replica_id": 1, "log_end_offset": 47, "last_fetch_timestamp": 90,
                        "last_caught_up_timestamp": 90},
                       {"replica_id": 2, "log_end_offset": 40, "last_fetch_timestamp": 80,
                        "last_caught_up_timestamp": -1}]}
    assert status_lines(q) == ["ClusterId:              abc", "LeaderId:               0",
                               "LeaderEpoch:            3", "HighWatermark:          47",
                               "MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0",
                               "CurrentVoters:          [0]", "CurrentObservers:       [1,2]"]
    rows = [line.split() for line in replication_lines(q)]
    assert rows == [["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
                    ["0", "47", "0", "100", "100", "Leader"], ["1", "47", "0", "90", "90", "Observer"],
                    ["2", "40", "7", "80", "-1", "Observer"]]


def test_printed_hints_carry_the_data_dir_unless_it_is_the_default(monkeypatch, tmp_path):
    from minibroker.cli.cluster import hint
    monkeypatch.setenv("MINIBROKER_HOME", str(tmp_path / "default"))
    assert hint("cluster down", str(tmp_path / "default")) == "minibroker cluster down"
    assert hint("cluster heal", str(tmp_path / "other")) == f"minibroker cluster heal --data-dir {tmp_path / 'other'}"
