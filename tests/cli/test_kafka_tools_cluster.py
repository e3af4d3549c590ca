"""Kafka's tools against a real cluster (`cluster up --random-ports --fast --brokers 4 --racks a,b`
with min.insync.replicas=2 at broker level). Each test makes its own topics and restores any
broker it stops, so the tests do not depend on each other's order."""
import functools
import json
import re

import pytest
from cli_process import cli_cluster, ok, run

from minibroker.testing import wait
from minibroker.testing.cluster import LocalCluster

pytestmark = pytest.mark.cluster

until = functools.partial(wait.until_sync, timeout_s=30, interval_s=0.1)


def isr_text(env, topic, partition=0):
    out = ok(run(env, "topics", "describe", "--topic", topic))
    m = re.search(rf"\tPartition: {partition}\t.*\tIsr: ([\d,]*)\t", out)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with cli_cluster(str(tmp_path_factory.mktemp("tools") / "home"), "--random-ports", "--fast", "--brokers", "4",
                     "--racks", "a,b", "--set", "min.insync.replicas=2") as e:
        yield e


@pytest.fixture
def restore(env):
    """Brokers a test killed are restarted (until RUNNING) after it."""
    killed: list[int] = []
    yield killed
    for b in killed:
        run(env, "cluster", "restart", str(b))


def kill(env, restore, b):
    ok(run(env, "cluster", "kill", str(b)))
    restore.append(b)


def test_racks_are_cycled_over_the_brokers(env):
    assert "racks:      1=a, 2=b, 3=a, 4=b" in env["_UP_OUTPUT"]
    c = LocalCluster.load(env["MINIBROKER_HOME"])
    assert [c.layout.broker_config(b)["broker.rack"] for b in c.broker_ids] == ["a", "b", "a", "b"]


def test_a_rejoining_follower_is_appended_to_the_isr(env, restore):
    ok(run(env, "topics", "create", "--topic", "rejoin", "--replica-assignment", "1:2:3"))
    assert isr_text(env, "rejoin") == "1,2,3"
    kill(env, restore, 2)
    until(lambda: isr_text(env, "rejoin") == "1,3", what="broker 2 out of the ISR")
    ok(run(env, "cluster", "restart", "2"))
    restore.clear()
    until(lambda: isr_text(env, "rejoin") == "1,3,2", what="broker 2 back, last in the ISR")


def test_configs_lists_broker_level_values_and_the_min_isr_filters_use_them(env):
    ok(run(env, "topics", "create", "--topic", "lonely", "--replica-assignment", "4"))
    ok(run(env, "topics", "create", "--topic", "pair", "--replica-assignment", "1:2",
           "--config", "retention.ms=86400000"))
    out = ok(run(env, "topics", "describe", "--topic", "pair"))
    assert re.search(r"\tConfigs: min.insync.replicas=2,retention.ms=86400000$", out.splitlines()[0]), out
    under = ok(run(env, "topics", "describe", "--under-min-isr-partitions"))
    assert "\tTopic: lonely\tPartition: 0\t" in under and "Topic: pair\t" not in under
    at = ok(run(env, "topics", "describe", "--at-min-isr-partitions"))
    assert "\tTopic: pair\tPartition: 0\t" in at and "Topic: lonely\t" not in at
    overrides = ok(run(env, "topics", "describe", "--topics-with-overrides"))
    assert all(line.startswith("Topic: ") for line in overrides.splitlines())     # topic lines only
    assert "Topic: pair\t" in overrides


def test_configs_describe_and_alter_a_topic_and_a_broker_as_kafka_configs(env):
    ok(run(env, "topics", "create", "--topic", "cfg", "--replica-assignment", "1:2:3"))
    assert ok(run(env, "configs", "--alter", "--entity-type", "topics", "--entity-name", "cfg",
                  "--add-config", "min.insync.replicas=3,retention.ms=60000")) == \
        "Completed updating config for topic cfg.\n"
    out = ok(run(env, "configs", "--describe", "--topic", "cfg"))
    assert out.splitlines() == [
        "Dynamic configs for topic cfg are:",
        "  min.insync.replicas=3 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:min.insync.replicas=3, "
        "STATIC_BROKER_CONFIG:min.insync.replicas=2, DEFAULT_CONFIG:min.insync.replicas=1}",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000, "
        "DEFAULT_CONFIG:log.retention.ms=604800000}"]
    ok(run(env, "configs", "--alter", "--topic", "cfg", "--delete-config", "retention.ms"))
    assert "retention.ms" not in ok(run(env, "configs", "--describe", "--topic", "cfg"))
    assert ok(run(env, "configs", "--alter", "--broker", "3", "--add-config", "min.insync.replicas=1")) == \
        "Completed updating config for broker 3.\n"
    out = ok(run(env, "configs", "--describe", "--broker", "3"))
    assert out.splitlines()[0] == "Dynamic configs for broker 3 are:"
    assert "  min.insync.replicas=1 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:min.insync.replicas=1, " \
           "STATIC_BROKER_CONFIG:min.insync.replicas=2, DEFAULT_CONFIG:min.insync.replicas=1}" in out
    ok(run(env, "configs", "--alter", "--broker", "3", "--delete-config", "min.insync.replicas"))
    r = run(env, "configs", "--alter", "--broker", "3", "--add-config", "broker.rack=z")
    assert r.returncode == 1 and b"Cannot update these configs dynamically: broker.rack" in r.stderr


def test_min_isr_altered_at_runtime_takes_effect_on_the_leader_at_once(env, restore):
    ok(run(env, "topics", "create", "--topic", "strict", "--replica-assignment", "1:2:3"))
    kill(env, restore, 3)
    until(lambda: isr_text(env, "strict") == "1,2", what="broker 3 out of the ISR")
    ok(run(env, "produce", "--topic", "strict", input=b"two-of-two\n"))        # ISR 2 >= min ISR 2
    ok(run(env, "configs", "--alter", "--topic", "strict", "--add-config", "min.insync.replicas=3"))
    r = run(env, "produce", "--topic", "strict", "--message-send-max-retries", "0", input=b"refused\n")
    assert r.returncode == 1 and b"NOT_ENOUGH_REPLICAS" in r.stderr, r.stderr
    ok(run(env, "configs", "--alter", "--topic", "strict", "--delete-config", "min.insync.replicas"))
    ok(run(env, "produce", "--topic", "strict", "--message-send-max-retries", "0", input=b"accepted\n"))


def test_topics_alter_adds_partitions_through_the_controller(env):
    ok(run(env, "topics", "create", "--topic", "grow", "--partitions", "1", "--replication-factor", "2"))
    assert ok(run(env, "topics", "alter", "--topic", "grow", "--partitions", "3")) == ""
    lines = ok(run(env, "topics", "describe", "--topic", "grow")).splitlines()
    assert "\tPartitionCount: 3\t" in lines[0] and len(lines) == 4
    ok(run(env, "produce", "--topic", "grow", "--partition", "2", input=b"in-the-new-partition\n"))
    assert ok(run(env, "offsets", "--topic", "grow")) == "grow:0:0\ngrow:1:0\ngrow:2:1\n"
    r = run(env, "topics", "alter", "--topic", "grow", "--partitions", "2")
    assert r.returncode == 1 and b"currently has 3 partition(s); 2 would not be an increase" in r.stderr


def test_offsets_prints_healthy_partitions_and_a_skip_line_for_an_offline_one(env, restore):
    ok(run(env, "topics", "create", "--topic", "gone", "--replica-assignment", "4"))
    ok(run(env, "topics", "create", "--topic", "here", "--replica-assignment", "1:2,2:1"))
    ok(run(env, "produce", "--topic", "here", "--partition", "1", input=b"x\ny\n"))
    kill(env, restore, 4)
    until(lambda: "Leader: none" in ok(run(env, "topics", "describe", "--topic", "gone")), what="gone-0 offline")
    r = run(env, "offsets", "--topic", "gone|here")
    assert ok(r) == "here:0:0\nhere:1:2\n"
    assert r.stderr.decode().startswith("Skip getting offsets for topic-partition gone:0 due to error: "
                                        "LEADER_NOT_AVAILABLE"), r.stderr


def test_offsets_by_time_max_timestamp_and_topic_partitions(env):
    ok(run(env, "topics", "create", "--topic", "timed", "--replica-assignment", "1:2:3"))
    ok(run(env, "produce", "--topic", "timed", input=b"a\n"))
    ok(run(env, "produce", "--topic", "timed", input=b"b\n"))
    assert ok(run(env, "offsets", "--topic", "timed", "--time", "0")) == "timed:0:0\n"
    assert ok(run(env, "offsets", "--topic", "timed", "--time", "-3")) == "timed:0:1\n"
    assert ok(run(env, "offsets", "--topic", "timed", "--time", "99999999999999")) == ""   # nothing that late
    assert ok(run(env, "offsets", "--topic-partitions", "timed:0")) == "timed:0:2\n"


def test_producer_parse_key_and_consumer_key_separator_keep_kafkas_meaning(env):
    ok(run(env, "topics", "create", "--topic", "keyed", "--replica-assignment", "1:2:3"))
    ok(run(env, "produce", "--topic", "keyed", "--property", "parse.key=true", "--property", "key.separator=:",
           input=b"k1:v1\nk2:v:2\n"))
    out = ok(run(env, "consume", "--topic", "keyed", "--from-beginning", "--property", "print.key=true",
                 "--property", "key.separator= | "))
    assert out == "k1 | v1\nk2 | v:2\n"


def test_leader_election_reads_kafkas_json_file(env, tmp_path):
    ok(run(env, "topics", "create", "--topic", "elect", "--replica-assignment", "1:2:3"))
    f = tmp_path / "partitions.json"
    f.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 0}]}))
    out = ok(run(env, "leader-election", "--election-type", "preferred", "--path-to-json-file", str(f)))
    assert out == "Valid replica already elected for partitions elect-0\n"


def test_broker_api_versions_lists_every_live_broker_in_kafkas_format(env):
    out = ok(run(env, "broker-api-versions"))
    heads = re.findall(r"^(\S+) \(id: (\d) rack: (\w)\) -> \($", out, re.M)
    assert [(i, r) for _, i, r in heads] == [("1", "a"), ("2", "b"), ("3", "a"), ("4", "b")]
    assert "\tProduce(0): 0 to 0 [usable: 0],\n" in out and "\tDescribeConfigs(32): " in out


def test_a_dead_bootstrap_fails_at_once_with_connection_refused(env):
    r = run(env, "topics", "list", "--bootstrap-server", "127.0.0.1:1")
    assert r.returncode == 1
    assert b"cannot connect to any bootstrap server (127.0.0.1:1: Connection refused)" in r.stderr, r.stderr


def test_produce_to_an_unknown_topic_says_unknown_topic_or_partition(env):
    r = run(env, "produce", "--topic", "no-such-topic", input=b"x\n")
    assert r.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION: Topic no-such-topic not present in metadata" in r.stderr


def test_metadata_quorum_describes_the_single_controller_and_its_observers(env):
    out = ok(run(env, "metadata-quorum", "describe", "--status"))
    fields = dict(line.split(":", 1) for line in out.splitlines())
    assert fields["LeaderId"].strip() == "0" and int(fields["LeaderEpoch"]) >= 1
    assert int(fields["HighWatermark"]) > 0
    assert fields["CurrentVoters"].strip() == "[0]" and fields["CurrentObservers"].strip() == "[1,2,3,4]"
    rows = [line.split() for line in ok(run(env, "metadata-quorum", "describe", "--replication")).splitlines()]
    assert rows[0][0] == "NodeId" and rows[1][0] == "0" and rows[1][-1] == "Leader"
    assert sorted(r[0] for r in rows[2:]) == ["1", "2", "3", "4"] and {r[-1] for r in rows[2:]} == {"Observer"}


def test_delete_records_prints_kafkas_lines_and_the_log_start_moves(env, tmp_path):
    """kafka-delete-records' --offset-json-file and output; offsets then start at the low watermark."""
    ok(run(env, "topics", "create", "--topic", "del-rec", "--partitions", "2", "--replication-factor", "3"))
    ok(run(env, "produce", "--topic", "del-rec", "--property", "parse.key=true", "--property", "key.separator=:",
           input=b"".join(b"k%d:v%d\n" % (i, i) for i in range(20))))
    spec = tmp_path / "offsets.json"
    spec.write_text('{"partitions": [{"topic": "del-rec", "partition": 0, "offset": -1},'
                    ' {"topic": "del-rec", "partition": 1, "offset": 1000}], "version": 1}')
    out = ok(run(env, "delete-records", "--offset-json-file", str(spec))).splitlines()
    assert out[:2] == ["Executing records delete operation", "Records delete operation completed:"]
    hw0 = int(ok(run(env, "offsets", "--topic", "del-rec", "--partitions", "0")).split(":")[-1])
    assert out[2] == f"partition: del-rec-0\tlow_watermark: {hw0}"
    assert out[3] == ("partition: del-rec-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
                      "The requested offset is not within the range of offsets maintained by the server.")
    earliest = ok(run(env, "offsets", "--topic", "del-rec", "--time", "earliest")).split()
    assert earliest == [f"del-rec:0:{hw0}", "del-rec:1:0"]
    spec.write_text('{"partitions": [{"topic": "del-rec", "partition": 0, "offset": 1},'
                    ' {"topic": "del-rec", "partition": 0, "offset": 2}]}')
    dup = run(env, "delete-records", "--offset-json-file", str(spec))
    assert dup.returncode == 1 and b"duplicate topic partitions: del-rec-0" in dup.stderr
