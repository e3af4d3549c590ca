"""The metrics are pure functions of ReplicaStatus, the controller's records and the event counts."""
from prometheus_client.parser import text_string_to_metric_families

from minibroker.events import Event
from minibroker.metadata import BrokerRecord, PartitionRecord
from minibroker.metrics.counts import EventCounts
from minibroker.metrics.families import broker_families, controller_families
from minibroker.metrics.server import render


def status(isr, replicas_leo, leo=100):
    return {"node_id": 1, "partitions": [
        {"topic": "t", "partition": 0, "role": "leader", "leader_epoch": 3, "leo": leo, "hw": 90,
         "log_start_offset": 0, "isr": isr,
         "replicas": [{"broker_id": b, "leo": x, "caught_up": b in isr} for b, x in replicas_leo]},
        {"topic": "t", "partition": 1, "role": "follower", "leader": 2, "leader_epoch": 2, "leo": 7, "hw": 7,
         "log_start_offset": 0, "isr": [2, 1], "replicas": [], "fetch_state": {"leader": 2, "leader_hw": 10}}]}


def samples(families):
    text = render(lambda: families).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_a_leader_below_min_isr_counts_as_under_replicated_and_under_min_isr():
    m = samples(broker_families(status([1], [(1, 100), (2, 40), (3, -1)]), lambda t: 2, EventCounts()))
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1
    assert m[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 1
    assert m[("kafka_server_replicamanager_atminisrpartitioncount", ())] == 0
    assert m[("kafka_server_replicamanager_leadercount", ())] == 1
    assert m[("kafka_server_replicamanager_partitioncount", ())] == 2
    assert m[("minibroker_partition_replica_lag", (("partition", "0"), ("replica", "2"), ("topic", "t")))] == 60
    assert m[("minibroker_partition_replica_lag", (("partition", "0"), ("replica", "3"), ("topic", "t")))] == -1
    assert m[("kafka_log_log_logendoffset", (("partition", "1"), ("topic", "t")))] == 7
    fetcher = (("clientId", "ReplicaFetcherThread-0-2"), ("partition", "1"), ("topic", "t"))
    assert m[("kafka_server_fetcherlagmetrics_consumerlag", fetcher)] == 3     # leader HW 10 - LEO 7


def test_min_isr_is_capped_at_the_replication_factor_as_kafka_does():
    m = samples(broker_families(status([1, 2, 3], [(1, 100), (2, 100), (3, 100)]), lambda t: 5, EventCounts()))
    assert m[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 0
    assert m[("kafka_server_replicamanager_atminisrpartitioncount", ())] == 1


def test_a_reassignment_counts_and_its_adding_replica_is_not_part_of_the_replication_factor():
    """Kafka's OngoingReassignmentState: replicationFactor = replicas - adding; ReassigningPartitions counts it."""
    st = status([1, 2], [(1, 100), (2, 100), (3, 10)])
    st["partitions"][0].update(adding_replicas=[3], removing_replicas=[1])
    m = samples(broker_families(st, lambda t: 2, EventCounts()))
    assert m[("kafka_server_replicamanager_reassigningpartitions", ())] == 1
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert m[("kafka_cluster_partition_replicascount", (("partition", "0"), ("topic", "t")))] == 2
    plain = samples(broker_families(status([1, 2], [(1, 100), (2, 100), (3, 10)]), lambda t: 2, EventCounts()))
    assert plain[("kafka_server_replicamanager_reassigningpartitions", ())] == 0
    assert plain[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1


def test_isr_counters_follow_the_events_the_leader_applied():
    c = EventCounts()
    c.observe(Event("isr_shrink", 1, "t-0", [1, 2, 3], [1, 2]))
    c.observe(Event("isr_metadata", 2, "t-0", [1, 2], [1]))          # the controller's change
    c.observe(Event("isr_expand", 3, "t-0", [1], [1, 3]))
    c.observe(Event("isr_metadata", 4, "t-0", [1, 3], [1, 3]))       # an echo: no change
    c.observe(Event("hw_move", 5, "t-0", 1, 2))
    m = samples(broker_families({"partitions": []}, lambda t: 1, c))
    assert m[("kafka_server_replicamanager_isrshrinks_total", ())] == 2
    assert m[("kafka_server_replicamanager_isrexpands_total", ())] == 1
    assert m[("minibroker_events_total", (("kind", "hw_move"),))] == 1


def test_controller_counts_offline_partitions_and_fenced_brokers():
    parts = [PartitionRecord("t", 0, (1, 2), (1,), 1, 0, 0), PartitionRecord("t", 1, (2, 1), (), -1, 1, 1),
             PartitionRecord("t", 2, (2, 1), (1,), 1, 1, 1)]
    brokers = [BrokerRecord(1, 0, None, (), fenced=False, in_controlled_shutdown=False),
               BrokerRecord(2, 1, None, (), fenced=True, in_controlled_shutdown=False)]
    m = samples(controller_families(parts, brokers, 1, EventCounts()))
    assert m[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_fencedbrokercount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_preferredreplicaimbalancecount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == 3
