"""Every metric a broker or the controller exports, computed from state it already holds.

Pure: a broker's metrics come from the body of its ReplicaStatus response
(the dict `watch` reads) plus each topic's min.insync.replicas; the
controller's from its partition and broker records; every `_total` from
`EventCounts`. Nothing here keeps numbers of its own, so a metric cannot
drift from what the logs and `watch` show. Names are Kafka's MBeans as the
Prometheus JMX exporter's usual Kafka rules spell them (lower case,
`kafka_<domain>_<type>_<name>`, `...PerSec` meters as `_total`); metrics
Kafka does not have are named `minibroker_*`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from minibroker.metadata import NO_LEADER, BrokerRecord, PartitionRecord
from minibroker.metrics.counts import EventCounts

Kind = Literal["gauge", "counter"]
Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric: its name (without `_total` for counters), type, help and samples.
    Invariant: every sample's labels have the same names, in the same order."""
    name: str
    kind: Kind
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((tuple(labels.items()), float(value)))


def _scalar(name: str, kind: Kind, help_: str, value: float) -> Family:
    f = Family(name, kind, help_)
    f.add(value)
    return f


def effective_min_isr(min_isr: int, replication_factor: int) -> int:
    """Kafka's Partition.effectiveMinIsr: min.insync.replicas capped at the replication factor."""
    return max(1, min(min_isr, replication_factor))


def broker_families(status: Mapping[str, Any], min_isr: Callable[[str], int],
                    counts: EventCounts) -> list[Family]:
    """A broker's metrics from its ReplicaStatus body (`ReplicaManager.replica_status(None)`)."""
    parts: list[Mapping[str, Any]] = list(status.get("partitions", ()))
    leaders = [p for p in parts if p.get("role") == "leader"]
    under = under_min = at_min = reassigning = 0
    ur = Family("kafka_cluster_partition_underreplicated", "gauge",
                "1 if this broker leads the partition and its ISR is smaller than its replica set")
    isr_count = Family("kafka_cluster_partition_insyncreplicascount", "gauge",
                       "ISR size of a partition this broker leads (0 elsewhere)")
    rep_count = Family("kafka_cluster_partition_replicascount", "gauge",
                       "Replica set size of a partition this broker leads (0 elsewhere)")
    umi = Family("kafka_cluster_partition_underminisr", "gauge",
                 "1 if this broker leads the partition and its ISR is below min.insync.replicas")
    ami = Family("kafka_cluster_partition_atminisr", "gauge",
                 "1 if this broker leads the partition and its ISR is exactly min.insync.replicas")
    leo = Family("kafka_log_log_logendoffset", "gauge", "Log end offset of this broker's replica")
    lso = Family("kafka_log_log_logstartoffset", "gauge", "Log start offset of this broker's replica")
    hw = Family("minibroker_partition_highwatermark", "gauge",
                "High watermark as this broker's replica knows it (the leader's is authoritative)")
    epoch = Family("minibroker_partition_leaderepoch", "gauge", "Leader epoch this broker's replica follows")
    lag = Family("minibroker_partition_replica_lag", "gauge",
                 "Leader LEO minus the replica's LEO as the leader last saw it (leader only; -1 = not fetched yet)")
    caught = Family("minibroker_partition_replica_caughtup", "gauge",
                    "1 if the leader counts the replica caught up (replica.lag.time.max.ms), leader only")
    fetch_lag = Family("kafka_server_fetcherlagmetrics_consumerlag", "gauge",
                       "Follower only: the leader's HW in its last fetch answer minus this replica's LEO")
    for p in parts:
        t, n = str(p["topic"]), str(p["partition"])
        leo.add(p.get("leo", 0), topic=t, partition=n)
        lso.add(p.get("log_start_offset", 0), topic=t, partition=n)
        hw.add(p.get("hw", 0), topic=t, partition=n)
        epoch.add(p.get("leader_epoch", -1), topic=t, partition=n)
        is_leader = p.get("role") == "leader"
        isr = list(p.get("isr", ())) if is_leader else []
        replicas = list(p.get("replicas", ())) if is_leader else []
        adding = list(p.get("adding_replicas", ())) if is_leader else []
        rf = len(replicas) - len(adding)          # Kafka's replicationFactor: the adding replicas do not count
        reassigning += int(is_leader and bool(adding or p.get("removing_replicas")))
        m = effective_min_isr(min_isr(t), len(replicas)) if is_leader else 0    # every replica, as Kafka's
        u = int(is_leader and len(isr) < rf)
        um = int(is_leader and len(isr) < m)
        am = int(is_leader and len(isr) == m)
        under, under_min, at_min = under + u, under_min + um, at_min + am
        ur.add(u, topic=t, partition=n)
        umi.add(um, topic=t, partition=n)
        ami.add(am, topic=t, partition=n)
        isr_count.add(len(isr), topic=t, partition=n)
        rep_count.add(rf, topic=t, partition=n)
        fs = p.get("fetch_state") or {}
        if not is_leader and fs.get("leader_hw", -1) >= 0:
            fetch_lag.add(max(0, fs["leader_hw"] - p.get("leo", 0)),
                          clientId=f"ReplicaFetcherThread-0-{fs.get('leader', p.get('leader'))}", topic=t, partition=n)
        leader_leo = p.get("leo", 0)
        for r in replicas:
            rid = str(r["broker_id"])
            rleo = r.get("leo")
            lag.add(-1 if rleo is None or rleo < 0 else max(0, leader_leo - rleo), topic=t, partition=n, replica=rid)
            caught.add(1 if r.get("caught_up") else 0, topic=t, partition=n, replica=rid)
    return [
        _scalar("kafka_server_replicamanager_underreplicatedpartitions", "gauge",
                "Partitions this broker leads whose ISR is smaller than the replica set", under),
        _scalar("kafka_server_replicamanager_underminisrpartitioncount", "gauge",
                "Partitions this broker leads whose ISR is below min.insync.replicas", under_min),
        _scalar("kafka_server_replicamanager_atminisrpartitioncount", "gauge",
                "Partitions this broker leads whose ISR is exactly min.insync.replicas", at_min),
        _scalar("kafka_server_replicamanager_leadercount", "gauge", "Partitions this broker leads", len(leaders)),
        _scalar("kafka_server_replicamanager_reassigningpartitions", "gauge",
                "Partitions this broker leads that are being reassigned", reassigning),
        _scalar("kafka_server_replicamanager_partitioncount", "gauge", "Partitions this broker hosts", len(parts)),
        _scalar("kafka_server_replicamanager_isrshrinks", "counter",
                "ISR shrinks applied by this broker as leader (its AlterPartition or the controller's change)",
                counts.isr_shrinks),
        _scalar("kafka_server_replicamanager_isrexpands", "counter",
                "ISR expansions applied by this broker as leader (its AlterPartition or the controller's change)",
                counts.isr_expands),
        *_throttle_families(status.get("throttles") or {}),
        ur, umi, ami, isr_count, rep_count, leo, lso, hw, epoch, lag, caught, fetch_lag,
        events_family(counts),
    ]


def _throttle_families(throttles: Mapping[str, Any]) -> list[Family]:
    """Kafka's LeaderReplication / FollowerReplication byte-rate (RQ3: the throttled partitions' bytes)
    and the bound each is held to (no sample without one)."""
    out = []
    for side, title in (("leader", "Leader"), ("follower", "Follower")):
        q = throttles.get(side) or {}
        out.append(_scalar(f"kafka_server_{side}replication_byte_rate", "gauge",
                           f"{title}-side bytes/s of the partitions throttled on this broker "
                           f"({side}.replication.throttled.replicas)", q.get("byte_rate", 0.0)))
        bound = Family(f"minibroker_{side}_replication_throttled_rate", "gauge",
                       f"{side}.replication.throttled.rate in force on this broker, bytes/s (absent: none)")
        if q.get("bound") is not None:
            bound.add(q["bound"])
        out.append(bound)
    return out


def controller_families(partitions: Iterable[PartitionRecord], brokers: Iterable[BrokerRecord],
                        topic_count: int, counts: EventCounts) -> list[Family]:
    """The active controller's metrics from its records (Kafka's QuorumControllerMetrics)."""
    parts = list(partitions)
    bs = list(brokers)
    offline = sum(1 for p in parts if p.leader == NO_LEADER)
    imbalance = sum(1 for p in parts if p.replicas and p.leader not in (NO_LEADER, p.replicas[0]))
    fenced = sum(1 for b in bs if b.fenced)
    return [
        _scalar("kafka_controller_kafkacontroller_activecontrollercount", "gauge",
                "1 on the active controller (minibroker has one controller)", 1),
        _scalar("kafka_controller_kafkacontroller_offlinepartitionscount", "gauge",
                "Partitions without a leader", offline),
        _scalar("kafka_controller_kafkacontroller_preferredreplicaimbalancecount", "gauge",
                "Partitions with a leader that is not the first (preferred) replica", imbalance),
        _scalar("kafka_controller_kafkacontroller_fencedbrokercount", "gauge", "Registered brokers that are fenced",
                fenced),
        _scalar("kafka_controller_kafkacontroller_activebrokercount", "gauge", "Registered brokers that are unfenced",
                len(bs) - fenced),
        _scalar("kafka_controller_kafkacontroller_globaltopiccount", "gauge", "Topics", topic_count),
        _scalar("kafka_controller_kafkacontroller_globalpartitioncount", "gauge", "Partitions", len(parts)),
        events_family(counts),
    ]


def events_family(counts: EventCounts) -> Family:
    f = Family("minibroker_events", "counter", "Structured events this process emitted, by kind")
    for kind in sorted(counts.by_kind):
        f.add(counts.by_kind[kind], kind=kind)
    return f
