"""The controller's settings, read once from Kafka-named properties."""
from __future__ import annotations

from dataclasses import dataclass

from minibroker.config import Config
from minibroker.limits import max_message_bytes_limit


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    node_id: int = 0
    session_timeout_ms: int = 9000
    heartbeat_interval_ms: int = 2000
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    elr_enabled: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    unclean_leader_election_interval_ms: int = 300_000
    # Issue 10 limits. Kafka's controller refuses more than 10,000 partitions per
    # request (POLICY_VIOLATION); the per-broker cap keeps replicas x files per
    # replica within a broker's file-descriptor budget; the largest batch a
    # topic may accept leaves room for the fetch response around it in a frame.
    max_partitions_per_request: int = 10_000
    max_partitions_per_broker: int = 6_000
    max_message_bytes_limit: int = 104_857_600 - (1 << 20)

    @classmethod
    def from_config(cls, c: Config) -> ControllerSettings:
        return cls(
            node_id=c.get_int("node.id"),
            session_timeout_ms=c.get_int("broker.session.timeout.ms"),
            heartbeat_interval_ms=c.get_int("broker.heartbeat.interval.ms"),
            default_replication_factor=c.get_int("default.replication.factor"),
            num_partitions=c.get_int("num.partitions"),
            min_insync_replicas=c.get_int("min.insync.replicas"),
            unclean_leader_election_enable=c.get_bool("unclean.leader.election.enable"),
            elr_enabled=c.get_bool("eligible.leader.replicas.enable"),
            auto_leader_rebalance_enable=c.get_bool("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_ms=c.get_int("leader.imbalance.check.interval.seconds") * 1000,
            unclean_leader_election_interval_ms=c.get_int("unclean.leader.election.interval.ms"),
            max_partitions_per_request=c.get_int("minibroker.max.partitions.per.request"),
            max_partitions_per_broker=c.get_int("minibroker.max.partitions.per.broker"),
            max_message_bytes_limit=max_message_bytes_limit(c.get_int("socket.request.max.bytes")),
        )

