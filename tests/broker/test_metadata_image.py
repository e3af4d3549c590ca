import pytest

from minibroker.broker.metadata_image import MetadataError, MetadataImage
from minibroker.config import DEFAULTS, Config
from minibroker.metadata import BrokerRecord, Endpoint, PartitionRecord, RemoveTopicRecord, TopicRecord, to_wire


def broker(bid, epoch=10, fenced=False, **kw):
    return BrokerRecord(bid, epoch, None, (Endpoint("INTERNAL", f"10.0.0.{bid}", 9092),
                                           Endpoint("EXTERNAL", "localhost", 19090 + bid)), fenced=fenced, **kw)


def part(topic="t", p=0, leader=1, le=0, pe=0, isr=(1, 2, 3), replicas=(1, 2, 3), reason=""):
    return PartitionRecord(topic, p, tuple(replicas), tuple(isr), leader, le, pe, reason=reason)


def topic(name="t", n=1, tid="id-t", configs=None):
    return TopicRecord(name, tid, n, configs or {})


def wire(*recs, start=0):
    return [to_wire(r, start + i) for i, r in enumerate(recs)]


def test_records_apply_in_order_and_offset_moves_to_next_offset():
    img = MetadataImage()
    d = img.apply_wire(wire(broker(1), topic(), part()), None, 3)
    assert img.offset == 3
    assert img.partitions[("t", 0)].leader == 1
    assert [p.key for p in d.partitions] == [("t", 0)]
    assert [b.broker_id for b in d.brokers] == [1]
    assert [t.topic for t in d.topics] == ["t"]


def test_partition_record_with_lower_partition_epoch_is_ignored():
    img = MetadataImage()
    img.apply_wire(wire(topic(), part(pe=5, isr=(1, 2))), None, 2)
    d = img.apply_wire(wire(part(pe=4, isr=(1,)), start=2), None, 3)
    assert img.partitions[("t", 0)].isr == (1, 2)
    assert d.partitions == [] and [p.partition_epoch for p in d.ignored_partitions] == [4]


def test_partition_record_with_equal_partition_epoch_is_applied():
    img = MetadataImage()
    img.apply_wire(wire(topic(), part(pe=5, isr=(1, 2))), None, 2)
    d = img.apply_wire(wire(part(pe=5, isr=(1, 2, 3)), start=2), None, 3)
    assert img.partitions[("t", 0)].isr == (1, 2, 3)
    assert [p.isr for p in d.partitions] == [(1, 2, 3)]


def test_identical_record_is_not_reported_as_a_change():
    img = MetadataImage()
    img.apply_wire(wire(broker(1), topic(), part()), None, 3)
    d = img.apply_wire(wire(broker(1), part(), start=3), None, 5)
    assert not d and d.partitions == [] and d.brokers == []


def test_several_records_for_one_partition_report_only_the_latest():
    img = MetadataImage()
    d = img.apply_wire(wire(topic(), part(pe=0), part(pe=1, isr=(1, 2)), part(pe=2, isr=(1,))), None, 4)
    assert [(p.partition_epoch, p.isr) for p in d.partitions] == [(2, (1,))]


def test_snapshot_replaces_the_image_then_records_follow():
    img = MetadataImage()
    img.apply_wire(wire(broker(1), broker(2), topic("old", tid="o"), part("old")), None, 4)
    snap = wire(broker(1, epoch=20), topic(), part(pe=3), start=100)
    d = img.apply_wire(wire(part(pe=4, leader=2, le=1), start=103), snap, 104)
    assert img.offset == 104
    assert set(img.topics) == {"t"} and set(img.brokers) == {1}
    assert img.partitions == {("t", 0): part(pe=4, leader=2, le=1)}
    assert d.snapshot and d.removed_topics == ["old"]
    assert [p.key for p in d.removed_partitions] == [("old", 0)]
    assert [(p.key, p.partition_epoch) for p in d.partitions] == [(("t", 0), 4)]
    assert [b.broker_epoch for b in d.brokers] == [20]


def test_snapshot_keeps_a_partition_held_at_a_higher_partition_epoch():
    img = MetadataImage()
    img.apply_wire(wire(topic(), part(pe=7, isr=(1, 2))), None, 2)
    d = img.apply_wire([], wire(topic(), part(pe=6, isr=(1,))), 9)
    assert img.partitions[("t", 0)].partition_epoch == 7
    assert d.partitions == [] and len(d.ignored_partitions) == 1


def test_recreated_topic_starts_over_at_partition_epoch_zero():
    img = MetadataImage()
    img.apply_wire(wire(topic(tid="a"), part(pe=9)), None, 2)
    img.apply_wire(wire(RemoveTopicRecord("t"), start=2), None, 3)
    assert "t" not in img.topics and img.partitions_of("t") == []
    d = img.apply_wire(wire(topic(tid="b"), part(pe=0, leader=2), start=3), None, 5)
    assert img.partitions[("t", 0)].leader == 2 and [p.partition_epoch for p in d.partitions] == [0]


def test_topic_with_a_new_topic_id_in_a_snapshot_replaces_the_old_partitions():
    img = MetadataImage()
    img.apply_wire(wire(topic(tid="a"), part(pe=9)), None, 2)
    d = img.apply_wire([], wire(topic(tid="b"), part(pe=0, leader=3)), 10)
    assert img.partitions[("t", 0)].leader == 3
    assert d.removed_topics == ["t"] and [p.partition_epoch for p in d.partitions] == [0]


def test_remove_topic_reports_its_partitions():
    img = MetadataImage()
    img.apply_wire(wire(topic(n=2), part(p=0), part(p=1)), None, 3)
    d = img.apply_wire(wire(RemoveTopicRecord("t"), start=3), None, 4)
    assert d.removed_topics == ["t"] and [p.partition for p in d.removed_partitions] == [0, 1]
    assert img.partitions == {}


def test_records_below_the_held_offset_are_skipped():
    img = MetadataImage()
    img.apply_wire(wire(topic(), part(pe=1, isr=(1,))), None, 2)
    d = img.apply_wire(wire(topic(), part(pe=1, isr=(1, 2))), None, 2)
    assert img.partitions[("t", 0)].isr == (1,) and not d


def test_malformed_record_leaves_the_image_untouched():
    img = MetadataImage()
    img.apply_wire(wire(topic(), part()), None, 2)
    bad = wire(part(pe=1, isr=(1,)), start=2) + [{"type": "partition", "offset": 3, "topic": "t"}]
    with pytest.raises(MetadataError):
        img.apply_wire(bad, None, 4)
    assert img.offset == 2 and img.partitions[("t", 0)].isr == (1, 2, 3)
    with pytest.raises(MetadataError):
        img.apply_wire([{"type": "nonsense", "offset": 2}], None, 3)


def test_offset_going_backwards_without_a_snapshot_is_an_error():
    img = MetadataImage()
    img.apply_wire(wire(topic()), None, 5)
    with pytest.raises(MetadataError):
        img.apply_wire([], None, 3)


def test_endpoint_lookup_is_by_listener_name():
    img = MetadataImage()
    img.apply_wire(wire(broker(2)), None, 1)
    assert img.endpoint(2, "INTERNAL") == ("10.0.0.2", 9092)
    assert img.endpoint(2, "EXTERNAL") == ("localhost", 19092)
    assert img.endpoint(2, "OTHER") is None and img.endpoint(7, "INTERNAL") is None


def test_topic_config_is_the_override_else_the_broker_default():
    img = MetadataImage(Config({**DEFAULTS, "min.insync.replicas": "2"}))
    img.apply_wire(wire(topic(configs={"retention.ms": "1000"})), None, 1)
    assert img.topic_config("t", "retention.ms") == "1000"
    assert img.topic_config("t", "min.insync.replicas") == "2"
    assert img.topic_config("t", "segment.bytes") == DEFAULTS["log.segment.bytes"]
    assert img.topic_config("unknown", "min.insync.replicas") == "2"


def test_partitions_of_lists_a_topic_in_partition_order():
    img = MetadataImage()
    img.apply_wire(wire(topic(n=3), part(p=2), part(p=0), part(p=1), topic("u", tid="u"), part("u")), None, 6)
    assert [p.partition for p in img.partitions_of("t")] == [0, 1, 2]
    assert img.partitions_of("nope") == []


def test_broker_changes_are_reported_once_with_the_latest_state():
    img = MetadataImage()
    img.apply_wire(wire(broker(1)), None, 1)
    d = img.apply_wire(wire(broker(1, fenced=True), broker(1, fenced=True, epoch=11), start=1), None, 3)
    assert [(b.broker_id, b.broker_epoch, b.fenced) for b in d.brokers] == [(1, 11, True)]


def test_dynamic_broker_configs_override_properties_own_broker_over_cluster_default():
    from minibroker.metadata import CLUSTER_DEFAULT, BrokerConfigRecord
    img = MetadataImage(Config({**DEFAULTS, "node.id": "2", "min.insync.replicas": "1"}))
    img.apply_wire(wire(topic(), topic("own", tid="id-own", configs={"min.insync.replicas": "1"})), None, 2)
    d = img.apply_wire(wire(BrokerConfigRecord(CLUSTER_DEFAULT, {"min.insync.replicas": "2"}), start=2), None, 3)
    assert d.broker_configs == [CLUSTER_DEFAULT] and img.topic_config("t", "min.insync.replicas") == "2"
    img.apply_wire(wire(BrokerConfigRecord(2, {"min.insync.replicas": "3"}),
                        BrokerConfigRecord(1, {"min.insync.replicas": "9"}), start=3), None, 5)
    assert img.topic_config("t", "min.insync.replicas") == "3"
    assert img.topic_config("own", "min.insync.replicas") == "1"
    d = img.apply_wire(wire(BrokerConfigRecord(2, {}), start=5), None, 6)
    assert d.broker_configs == [2] and img.topic_config("t", "min.insync.replicas") == "2"
