"""Metrics against a real cluster: Kafka's names, and values that follow an ISR
shrink (the leader cut off from one follower) and a broker kill."""
import asyncio
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from minibroker.client import Admin, Producer
from minibroker.testing.fixtures import cluster, cluster_factory  # noqa: F401
from minibroker.testing.wait import until

pytestmark = pytest.mark.cluster


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of one /metrics page, by (sample name, sorted labels)."""
    text = await asyncio.to_thread(_get, url)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def urls(c) -> dict[str, str]:
    return dict(c.layout.metrics_urls())


ORDERS0 = (("partition", "0"), ("topic", "orders"))
R3 = (("partition", "0"), ("replica", "3"), ("topic", "orders"))


async def test_leader_metrics_count_an_isr_shrink_and_show_the_lagging_follower(cluster):
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("orders", assignments=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
    async with Producer(cluster.bootstrap, {"acks": "all"}) as p:
        for i in range(3):
            await p.send_and_wait("orders", b"before-%d" % i, partition=0)
    leader = urls(cluster)["broker-1"]
    before = await scrape(leader)
    assert before[("kafka_server_replicamanager_leadercount", ())] == 1
    assert before[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert before[("kafka_server_replicamanager_isrshrinks_total", ())] == 0

    cluster.block(1, 3)
    cluster.block(3, 1)
    async with Producer(cluster.bootstrap, {"acks": "1"}) as p:
        for i in range(5):
            await p.send_and_wait("orders", b"after-%d" % i, partition=0)

    async def shrunk():
        m = await scrape(leader)
        return m if m[("kafka_server_replicamanager_isrshrinks_total", ())] >= 1 else None
    m = await until(shrunk, "broker 1 to count the ISR shrink", timeout_s=30)
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 1
    assert m[("kafka_server_replicamanager_atminisrpartitioncount", ())] == 1
    assert m[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 0
    assert m[("kafka_server_replicamanager_partitioncount", ())] == 1
    assert m[("kafka_server_replicamanager_isrexpands_total", ())] == 0
    assert m[("kafka_cluster_partition_underreplicated", ORDERS0)] == 1
    assert m[("kafka_cluster_partition_insyncreplicascount", ORDERS0)] == 2
    assert m[("kafka_cluster_partition_replicascount", ORDERS0)] == 3
    assert m[("kafka_log_log_logendoffset", ORDERS0)] == 8
    lag3 = m[("minibroker_partition_replica_lag", R3)]
    assert lag3 == 5
    assert m[("minibroker_partition_replica_caughtup", R3)] == 0

    # The same numbers as ReplicaStatus, which `watch` shows.
    async with Admin(cluster.bootstrap) as admin:
        st = await admin.replica_status(cluster.layout.broker(1).address, ["orders"])
    (p0,) = st["partitions"]
    assert p0["isr"] == [1, 2]
    assert m[("minibroker_partition_highwatermark", ORDERS0)] == p0["hw"]

    # Kafka's follower-side view: broker 2 fetched up to the leader's HW.
    fetcher = (("clientId", "ReplicaFetcherThread-0-1"), ("partition", "0"), ("topic", "orders"))

    async def follower_caught_up():
        m2 = await scrape(urls(cluster)["broker-2"])
        return m2 if m2.get(("kafka_log_log_logendoffset", ORDERS0)) == 8 \
            and m2.get(("kafka_server_fetcherlagmetrics_consumerlag", fetcher)) == 0 else None
    m2 = await until(follower_caught_up, "broker 2 to fetch up to the leader's HW", timeout_s=30)
    assert m2[("kafka_server_replicamanager_leadercount", ())] == 0
    assert m2[("kafka_cluster_partition_insyncreplicascount", ORDERS0)] == 0     # followers report 0, as Kafka

    cluster.unblock(1, 3)
    cluster.unblock(3, 1)

    async def expanded():
        m = await scrape(leader)
        return m if m[("kafka_server_replicamanager_isrexpands_total", ())] >= 1 else None
    m = await until(expanded, "broker 1 to count the ISR expansion", timeout_s=30)
    assert m[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert m[("minibroker_partition_replica_lag", R3)] == 0


async def test_controller_metrics_count_fenced_brokers_and_offline_partitions(cluster):
    ctl = urls(cluster)["controller"]
    m = await scrape(ctl)
    assert m[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_fencedbrokercount", ())] == 0
    assert m[("kafka_controller_kafkacontroller_activebrokercount", ())] == 3
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topic("solo", assignments=[[2]])
    m = await scrape(ctl)
    assert m[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
    assert m[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == 1
    cluster.kill(2)

    async def fenced():
        m = await scrape(ctl)
        return m if m[("kafka_controller_kafkacontroller_fencedbrokercount", ())] == 1 else None
    m = await until(fenced, "the controller to fence broker 2", timeout_s=30)
    assert m[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 1
    assert m[("kafka_controller_kafkacontroller_activebrokercount", ())] == 2
    assert m[("minibroker_events_total", (("kind", "fenced"),))] == 1


def test_cluster_layout_gives_every_process_a_metrics_url(tmp_path):
    from minibroker.testing.cluster import LocalCluster
    c = LocalCluster.create(str(tmp_path / "c"), free_ports=True)
    names = [n for n, _ in c.layout.metrics_urls()]
    assert names == ["controller", "broker-1", "broker-2", "broker-3"]
    again = LocalCluster.load(str(tmp_path / "c"))
    assert again.layout.metrics_urls() == c.layout.metrics_urls()
    for b in c.layout.brokers:
        assert c.layout.broker_config(b.node_id)["metrics.listener"] == f"{b.metrics[0]}:{b.metrics[1]}"
