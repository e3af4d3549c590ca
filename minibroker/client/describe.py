"""Topic and partition descriptions as kafka-topics --describe reports them.

Pure: built from a Metadata response. The filter predicates follow Kafka's
TopicCommand.PartitionDescription exactly:
  under-replicated   |ISR| < replication factor
  under-min-isr      no leader, or |ISR| < the *configured* min.insync.replicas
  at-min-isr         |ISR| == the configured min.insync.replicas
  unavailable        no leader, or the leader is not a live broker
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MIN_ISR = 1      # Kafka's broker default, used when the topic has no override


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False
    broker_epoch: int = -1


@dataclass(frozen=True)
class PartitionDescription:
    topic: str
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None = ()
    last_known_elr: tuple[int, ...] | None = ()
    leader_live: bool = True
    error: int = 0
    partition_epoch: int = -1
    offline_replicas: tuple[int, ...] = ()

    @property
    def under_replicated(self) -> bool:
        return len(self.replicas) - len(self.isr) > 0

    def under_min_isr(self, min_isr: int) -> bool:
        return self.leader is None or len(self.isr) < min_isr

    def at_min_isr(self, min_isr: int) -> bool:
        return len(self.isr) == min_isr

    @property
    def unavailable(self) -> bool:
        return self.leader is None or not self.leader_live


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str | None
    configs: dict[str, str] = field(default_factory=dict)
    partitions: tuple[PartitionDescription, ...] = ()

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0

    @property
    def min_isr(self) -> int:
        try:
            return int(self.configs.get("min.insync.replicas", DEFAULT_MIN_ISR))
        except ValueError:
            return DEFAULT_MIN_ISR


def describe_from_metadata(resp: dict[str, Any]) -> list[TopicDescription]:
    """Every topic of a Metadata response that exists, sorted by name."""
    live = {b["node_id"] for b in resp.get("brokers", ())}
    out: list[TopicDescription] = []
    for t in resp.get("topics") or ():
        if t.get("error") and not t.get("partitions"):
            continue
        parts = []
        for p in sorted(t.get("partitions", ()), key=lambda p: p["partition"]):
            leader = p.get("leader", -1)
            elr, lke = p.get("elr", ()), p.get("last_known_elr", ())
            parts.append(PartitionDescription(
                topic=t["topic"], partition=p["partition"], leader=None if leader < 0 else leader,
                leader_epoch=p.get("leader_epoch", -1), replicas=tuple(p.get("replicas", ())),
                isr=tuple(p.get("isr", ())), elr=None if elr is None else tuple(elr),
                last_known_elr=None if lke is None else tuple(lke), leader_live=leader in live,
                error=p.get("error", 0), partition_epoch=p.get("partition_epoch", -1),
                offline_replicas=tuple(p.get("offline_replicas", ()) or ())))
        out.append(TopicDescription(t["topic"], t.get("topic_id") or None, dict(t.get("configs") or {}),
                                    tuple(parts)))
    return sorted(out, key=lambda td: td.name)
