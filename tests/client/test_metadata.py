from minibroker.client.metadata import MetadataCache
from minibroker.client.types import TopicPartition
from minibroker.errors import ErrorCode

TP0 = TopicPartition("orders", 0)


def resp(leader=1, epoch=0, error=0, topic_error=0, brokers=(1, 2, 3), parts=1):
    return {
        "brokers": [{"node_id": b, "host": f"127.0.0.{b}", "port": 9092, "rack": f"zone-{b}"} for b in brokers],
        "cluster_id": "c", "controller_id": 0,
        "topics": [{"topic": "orders", "error": topic_error, "configs": {"min.insync.replicas": "2"},
                    "partitions": [] if topic_error else [
                        {"partition": p, "error": error, "leader": leader, "leader_epoch": epoch,
                         "partition_epoch": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "elr": [],
                         "last_known_elr": [], "offline_replicas": []} for p in range(parts)]}],
    }


def test_leader_lookup_after_update():
    c = MetadataCache()
    c.want(["orders"])
    changed = c.update(resp(leader=2), now_ms=1000)
    assert changed == [TP0]
    assert c.leader_id(TP0) == 2
    assert c.leader(TP0).host == "127.0.0.2"
    assert c.partition_count("orders") == 1


def test_stale_response_with_lower_leader_epoch_is_ignored():
    c = MetadataCache()
    c.update(resp(leader=2, epoch=5), 1000)
    c.update(resp(leader=1, epoch=4), 2000)
    assert c.leader_id(TP0) == 2
    assert c.leader_epoch(TP0) == 5


def test_newer_leader_epoch_replaces_the_entry():
    c = MetadataCache()
    c.update(resp(leader=2, epoch=5), 1000)
    assert c.update(resp(leader=3, epoch=6), 2000) == [TP0]
    assert c.leader_id(TP0) == 3


def test_leader_not_in_broker_list_counts_as_unknown():
    c = MetadataCache()
    c.update(resp(leader=3, brokers=(1, 2)), 1000)
    assert c.leader_id(TP0) is None


def test_offline_partition_asks_for_another_refresh():
    c = MetadataCache(refresh_backoff_ms=100)
    c.update(resp(leader=-1, error=ErrorCode.LEADER_NOT_AVAILABLE), 1000)
    assert c.update_requested
    assert c.time_to_next_update(1050) == 50
    assert c.time_to_next_update(1100) == 0


def test_refresh_due_after_max_age_when_nothing_asked():
    c = MetadataCache(metadata_max_age_ms=300_000, refresh_backoff_ms=100)
    c.update(resp(), 1000)
    assert not c.update_requested
    assert c.time_to_next_update(1000) == 300_000
    assert c.time_to_next_update(301_000) == 0


def test_request_update_is_paced_by_retry_backoff():
    c = MetadataCache(refresh_backoff_ms=100)
    c.update(resp(), 1000)
    c.request_update()
    assert c.time_to_next_update(1040) == 60
    c.failed_update(1100)
    assert c.update_requested
    assert c.time_to_next_update(1150) == 50


def test_first_refresh_is_due_at_once():
    assert MetadataCache().time_to_next_update(0) == 0


def test_wanting_a_new_topic_asks_for_a_refresh():
    c = MetadataCache()
    c.update(resp(), 1000)
    assert not c.update_requested
    assert c.want(["payments"]) is True
    assert c.update_requested
    assert c.want(["payments"]) is False
    assert c.request_topics() == ["payments"]


def test_all_topics_cache_asks_for_every_topic():
    assert MetadataCache(all_topics=True).request_topics() is None


def test_unknown_topic_drops_its_partitions():
    c = MetadataCache()
    c.update(resp(), 1000)
    c.update(resp(topic_error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), 2000)
    assert c.partition_count("orders") is None
    assert c.leader_id(TP0) is None
    assert c.topic_error("orders") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_leader_hint_from_a_response_applies_only_when_newer():
    c = MetadataCache()
    c.update(resp(leader=1, epoch=3), 1000)
    assert c.update_leader(TP0, 2, 3) is False
    assert c.update_leader(TP0, 2, 4) is True
    assert c.leader_id(TP0) == 2 and c.leader_epoch(TP0) == 4


def test_available_partitions_lists_those_with_a_live_leader():
    c = MetadataCache()
    r = resp(parts=3)
    r["topics"][0]["partitions"][1]["leader"] = -1
    c.update(r, 1000)
    assert c.available_partitions("orders") == [0, 2]
