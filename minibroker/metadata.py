"""Metadata records: the controller's log entries, as both sides hold them.

The controller appends these to its metadata log; brokers replay them into
their metadata image. Plain values only (they travel as msgpack maps via
`to_wire` / `from_wire`). A `PartitionRecord` always carries the whole
partition state; receivers apply it only if its `partition_epoch` is not
lower than the one they hold (Kafka I7).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

NO_LEADER = -1
RECOVERED = 0
RECOVERING = 1


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerRecord:
    broker_id: int
    broker_epoch: int
    rack: str | None
    listeners: tuple[Endpoint, ...]
    fenced: bool = True
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.listeners:
            if e.name == listener:
                return e
        return None


@dataclass(frozen=True)
class TopicRecord:
    topic: str
    topic_id: str
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionRecord:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    reason: str = ""
    # Invariant: during a reassignment (KIP-455), the replicas being added (in the target, not yet in
    # the ISR) and removed (not in the target); `replicas` is then the target followed by the removed
    # ones. Both empty otherwise.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes (the replicas, when none is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoveTopicRecord:
    topic: str


CLUSTER_DEFAULT = -1      # BrokerConfigRecord.broker_id for the cluster-wide default (kafka-configs --entity-default)


@dataclass(frozen=True)
class BrokerConfigRecord:
    """The dynamic configs of one broker (or, with broker_id CLUSTER_DEFAULT, of every
    broker), whole: KRaft's ConfigRecords for one BROKER resource, folded into one record."""
    broker_id: int
    configs: dict[str, str] = field(default_factory=dict)


_TYPES: dict[str, type] = {
    "broker": BrokerRecord,
    "topic": TopicRecord,
    "partition": PartitionRecord,
    "remove_topic": RemoveTopicRecord,
    "broker_config": BrokerConfigRecord,
}
_NAMES = {v: k for k, v in _TYPES.items()}

MetadataRecord = BrokerRecord | TopicRecord | PartitionRecord | RemoveTopicRecord | BrokerConfigRecord


def to_wire(rec: MetadataRecord, offset: int) -> dict[str, Any]:
    d = asdict(rec)
    for k in ("adding_replicas", "removing_replicas"):
        if k in d and not d[k]:
            del d[k]                    # only during a reassignment: the records of every other partition unchanged
    for k, v in d.items():
        if isinstance(v, tuple):
            d[k] = list(v)
    d["type"] = _NAMES[type(rec)]
    d["offset"] = offset
    return d


def from_wire(d: dict[str, Any]) -> tuple[int, MetadataRecord]:
    """Decode one record; raises ValueError on anything malformed."""
    try:
        cls = _TYPES[d["type"]]
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if cls is BrokerRecord:
            kw["listeners"] = tuple(Endpoint(**e) for e in kw["listeners"])
        for k in ("replicas", "isr", "elr", "last_known_elr", "adding_replicas", "removing_replicas"):
            if k in kw:
                kw[k] = tuple(kw[k])
        if cls is TopicRecord or cls is BrokerConfigRecord:
            kw["configs"] = {str(k): str(v) for k, v in (kw.get("configs") or {}).items()}
        return int(d["offset"]), cls(**kw)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed metadata record {d!r}: {exc}") from None
