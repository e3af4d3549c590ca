"""Plain value types the client library hands to its users."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:           # Kafka's TopicPartition.toString: orders-0
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """What an acknowledged produce tells about one record (offset -1 for acks=0)."""
    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One record as poll() returns it (Kafka's ConsumerRecord). A NamedTuple so the
    consumer's C decoder (minibroker.records.decode_into) builds it without a Python call;
    `leader_epoch` is the epoch stamped on its batch; `timestamp_type` Kafka's TimestampType id:
    0 CreateTime (the producer's), 1 LogAppendTime (the leader's, message.timestamp.type)."""
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()
    leader_epoch: int = -1
    timestamp_type: int = 0


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition as a Metadata response describes it."""
    topic: str
    partition: int
    error: int
    leader: int
    leader_epoch: int
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    elr: tuple[int, ...] | None = ()
    last_known_elr: tuple[int, ...] | None = ()
    offline_replicas: tuple[int, ...] = ()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class TopicMetadata:
    topic: str
    error: int
    topic_id: str | None
    configs: dict[str, str] = field(default_factory=dict)
    partitions: tuple[PartitionMetadata, ...] = ()
