"""The controller's settings, read once from Kafka-named properties."""
from __future__ import annotations

from dataclasses import dataclass

from minibroker.config import Config


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
        )
