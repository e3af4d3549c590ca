from minibroker.client.describe import describe_from_metadata


def meta(partitions, brokers=(1, 2, 3), configs=None, topic_id=None):
    t = {"topic": "orders", "error": 0, "configs": configs or {}, "partitions": partitions}
    if topic_id:
        t["topic_id"] = topic_id
    return {"brokers": [{"node_id": b, "host": "h", "port": 1, "rack": None} for b in brokers], "topics": [t]}


def part(p, leader, isr, replicas=(1, 2, 3), elr=(), lke=()):
    return {"partition": p, "error": 0, "leader": leader, "leader_epoch": 2, "partition_epoch": 4,
            "replicas": list(replicas), "isr": list(isr), "elr": list(elr), "last_known_elr": list(lke)}


def test_partitions_are_sorted_and_leader_minus_one_is_none():
    (td,) = describe_from_metadata(meta([part(1, -1, []), part(0, 1, [1, 2, 3])]))
    assert [p.partition for p in td.partitions] == [0, 1]
    assert td.partitions[1].leader is None
    assert td.replication_factor == 3


def test_under_replicated_means_isr_smaller_than_replicas():
    (td,) = describe_from_metadata(meta([part(0, 1, [1, 2, 3]), part(1, 1, [1, 2])]))
    assert [p.under_replicated for p in td.partitions] == [False, True]


def test_under_min_isr_uses_the_configured_value_and_counts_leaderless():
    (td,) = describe_from_metadata(meta([part(0, 1, [1, 2]), part(1, 1, [1]), part(2, -1, [1, 2, 3])],
                                        configs={"min.insync.replicas": "2"}))
    assert td.min_isr == 2
    assert [p.under_min_isr(td.min_isr) for p in td.partitions] == [False, True, True]
    assert [p.at_min_isr(td.min_isr) for p in td.partitions] == [True, False, False]


def test_min_isr_defaults_to_kafkas_default_without_an_override():
    (td,) = describe_from_metadata(meta([part(0, 1, [1])]))
    assert td.min_isr == 1


def test_unavailable_means_no_leader_or_a_leader_that_is_not_live():
    (td,) = describe_from_metadata(meta([part(0, 3, [3]), part(1, -1, []), part(2, 1, [1])], brokers=(1, 2)))
    assert [p.unavailable for p in td.partitions] == [True, True, False]


def test_missing_elr_fields_stay_none_for_na():
    p = part(0, 1, [1])
    p["elr"] = None
    (td,) = describe_from_metadata(meta([p]))
    assert td.partitions[0].elr is None


def test_topic_id_is_kept_when_the_broker_sends_one():
    (td,) = describe_from_metadata(meta([part(0, 1, [1])], topic_id="AAAAAAAAAAAAAAAAAAAAAA"))
    assert td.topic_id == "AAAAAAAAAAAAAAAAAAAAAA"


def test_unknown_topics_are_left_out():
    r = meta([])
    r["topics"][0]["error"] = 3
    assert describe_from_metadata(r) == []
