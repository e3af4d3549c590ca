from minibroker.cli.consume import RecordFormat, format_record
from minibroker.cli.format import (describe_lines, election_lines, offsets_lines, partition_line,
                                   produce_error_line, topic_line)
from minibroker.cli.watch import event_text, table_text
from minibroker.client.describe import PartitionDescription, TopicDescription
from minibroker.client.observe import EventLine, PartitionView, ReplicaView
from minibroker.client.types import ConsumerRecord, TopicPartition
from minibroker.errors import ErrorCode, KafkaError


def pd(p, leader, isr, replicas=(1, 2, 3), live=True, elr=(), lke=()):
    return PartitionDescription("orders", p, leader, 0, tuple(replicas), tuple(isr), elr, lke, leader_live=live)


TD = TopicDescription("orders", None, {"min.insync.replicas": "2"}, (
    pd(0, 1, (1, 2, 3)), pd(1, 2, (2, 3)), pd(2, None, (3,)), pd(3, 3, (3, 1), live=False)))


def test_topic_line_matches_kafka_topic_command():
    assert topic_line(TD) == ("Topic: orders\tPartitionCount: 4\tReplicationFactor: 3\t"
                              "Configs: min.insync.replicas=2")


def test_topic_line_shows_the_topic_id_when_known():
    td = TopicDescription("orders", "7GcFQw0zT2y9o1b0Vq3a1A", {}, (pd(0, 1, (1,)),))
    assert topic_line(td).startswith("Topic: orders\tTopicId: 7GcFQw0zT2y9o1b0Vq3a1A\tPartitionCount: 1")
    assert topic_line(td).endswith("Configs: ")


def test_partition_line_matches_kafka_topic_command():
    assert partition_line(TD.partitions[0]) == (
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: \tLastKnownElr: ")


def test_partition_line_prints_none_for_no_leader_and_na_for_missing_elr():
    line = partition_line(PartitionDescription("orders", 2, None, 4, (1, 2), (), None, None))
    assert "\tLeader: none\t" in line and line.endswith("\tElr: N/A\tLastKnownElr: N/A")


def test_leader_epoch_is_printed_after_leader_on_request():
    assert "\tLeader: 1\tLeaderEpoch: 0\tReplicas: " in partition_line(TD.partitions[0], leader_epoch=True)


def test_describe_without_filters_prints_topic_then_partitions():
    lines = describe_lines([TD])
    assert lines[0].startswith("Topic: orders") and len(lines) == 5


def test_filters_print_only_matching_partitions_without_topic_line():
    def parts(**kw):
        return [line.split("\t")[2] for line in describe_lines([TD], **kw)]
    assert parts(under_replicated=True) == ["Partition: 1", "Partition: 2", "Partition: 3"]
    assert parts(under_min_isr=True) == ["Partition: 2"]
    assert parts(at_min_isr=True) == ["Partition: 1", "Partition: 3"]
    assert parts(unavailable=True) == ["Partition: 2", "Partition: 3"]


def test_offsets_lines_are_topic_partition_offset():
    assert offsets_lines("orders", {1: 5, 0: 8}) == ["orders:0:8", "orders:1:5"]


def test_election_report_as_kafka_leader_election_command():
    res = {TopicPartition("orders", 0): None, TopicPartition("orders", 2): None,
           TopicPartition("orders", 1): KafkaError(ErrorCode.ELECTION_NOT_NEEDED, ""),
           TopicPartition("t", 0): KafkaError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "broker 2 is fenced")}
    lines, failed = election_lines("preferred", res)
    assert lines == [
        "Successfully completed leader election (PREFERRED) for partitions orders-0, orders-2",
        "Valid replica already elected for partitions orders-1",
        "Error completing leader election (PREFERRED) for partition: t-0: "
        "PREFERRED_LEADER_NOT_AVAILABLE: broker 2 is fenced",
    ]
    assert failed == 1


def test_produce_error_line_names_the_error_code():
    line = produce_error_line("orders", None, b"hello", KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr 1 < 2"))
    assert line == ("ERROR Error when sending message to topic orders with key: null, value: 5 bytes "
                    "with error: NOT_ENOUGH_REPLICAS: isr 1 < 2")


REC = ConsumerRecord("orders", 1, 42, 1700000000000, b"k", b"v", (("h", b"x"),))


def test_consumer_prints_the_value_alone_by_default():
    assert format_record(REC, {}) == b"v\n"


def test_consumer_print_properties_follow_kafkas_default_formatter_order():
    props = {"print.timestamp": "true", "print.partition": "true", "print.offset": "true",
             "print.headers": "true", "print.key": "true"}
    assert format_record(REC, props) == b"CreateTime:1700000000000\tPartition:1\tOffset:42\th:x\tk\tv\n"
    appended = REC._replace(timestamp_type=1)                     # a LogAppendTime topic's record, as Kafka prints it
    assert format_record(appended, {"print.timestamp": "true"}) == b"LogAppendTime:1700000000000\tv\n"


def test_consumer_prints_null_for_missing_key():
    rec = ConsumerRecord("orders", 0, 0, 0, None, b"v")
    assert format_record(rec, {"print.key": "true", "key.separator": ":"}) == b"null:v\n"


def test_a_polls_lines_are_each_records_line_in_order():
    recs = [REC, ConsumerRecord("orders", 0, 7, 5, None, None), ConsumerRecord("orders", 2, 8, 6, b"k2", b"v2")]
    for props in ({}, {"print.value": "TRUE"}, {"print.key": "true", "key.separator": ":"},
                  {"print.offset": "true", "print.value": "false"},
                  {"print.headers": "true", "print.partition": "true"}):
        fmt = RecordFormat(props)
        assert fmt.lines(recs) == b"".join(format_record(r, props) for r in recs)
        assert fmt.lines([]) == b""
    assert RecordFormat({}).lines(recs) == b"v\nnull\nv2\n"


def test_watch_table_marks_out_of_isr_replicas_and_offline_partitions():
    views = [PartitionView("orders", 0, 1, 3, (1, 2), (), 110, 0,
                           (ReplicaView(1, 120, 0, True), ReplicaView(2, 110, 10, True),
                            ReplicaView(3, 40, 80, False))),
             PartitionView("orders", 1, None, 4, (2,), (), None, None, (ReplicaView(2, None, None, True),), "offline")]
    lines = table_text(views)
    assert lines[0].split() [:6] == ["PARTITION", "LEADER", "EPOCH", "ISR", "ELR", "HW"]
    assert lines[1].split() == ["orders-0", "1", "3", "1,2", "-", "110", "1:120/0", "2:110/10", "3:40/80*"]
    assert lines[2].split() == ["orders-1", "none", "4", "2", "-", "?", "2:?/?", "(offline)"]


def test_watch_event_line_shows_source_partition_change_and_reason():
    line = event_text(EventLine("controller", {"kind": "isr_shrink", "time_ms": 0, "partition": "orders-0",
                                               "before": [1, 2, 3], "after": [1, 2], "reason": "broker 3 fenced"}))
    assert line.endswith("[controller] orders-0 isr_shrink [1,2,3] -> [1,2]: broker 3 fenced")
