"""The broker's copy of the cluster metadata, rebuilt from the controller's log.

Owns: the brokers, topics and partition registrations as of `offset` (the
next metadata log offset to fetch), and the rules for applying snapshots
and incremental records to them (Kafka I7: a partition record is applied
only if its partition epoch is not lower than the one held). Each apply
reports what changed so the data path can react.

Must not know: sockets, the controller connection, replicas or logs. It is
a pure value holder: the metadata follower loop feeds it records, request
handlers read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

from minibroker.config import DEFAULTS, Config, topic_config
from minibroker.metadata import (
    CLUSTER_DEFAULT, NO_LEADER, BrokerConfigRecord, BrokerRecord, MetadataRecord, PartitionRecord, RemoveTopicRecord,
    TopicRecord, from_wire,
)


class MetadataError(ValueError):
    """A metadata record the broker cannot apply (malformed or out of order)."""


@dataclass
class MetadataDelta:
    """What one apply changed. Partition and broker lists hold the new state,
    one entry per key, in the order first changed."""
    partitions: list[PartitionRecord] = field(default_factory=list)
    brokers: list[BrokerRecord] = field(default_factory=list)
    topics: list[TopicRecord] = field(default_factory=list)
    removed_topics: list[str] = field(default_factory=list)
    removed_partitions: list[PartitionRecord] = field(default_factory=list)
    broker_configs: list[int] = field(default_factory=list)                     # whose dynamic configs changed
    ignored_partitions: list[PartitionRecord] = field(default_factory=list)   # stale by I7
    snapshot: bool = False

    def __bool__(self) -> bool:
        return bool(self.partitions or self.brokers or self.topics or self.removed_topics or self.broker_configs)


class MetadataImage:
    """Invariant: `partitions` holds, per (topic, partition), the record with
    the highest partition epoch seen since the topic (by topic id) was created;
    `_by_topic` indexes exactly the keys of `partitions`."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config(DEFAULTS)
        self.offset = 0                                   # Invariant: next metadata log offset to fetch
        self.brokers: dict[int, BrokerRecord] = {}
        self.topics: dict[str, TopicRecord] = {}
        self.partitions: dict[tuple[str, int], PartitionRecord] = {}
        self._by_topic: dict[str, dict[int, PartitionRecord]] = {}
        # Dynamic broker configs by broker id (CLUSTER_DEFAULT: every broker), from the log.
        self.broker_configs: dict[int, dict[str, str]] = {}
        # Learned from the controller (DescribeCluster), not from the log.
        self.cluster_id = ""
        self.controller_id = -1

    # -- reads ---------------------------------------------------------------
    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        b = self.brokers.get(broker_id)
        if b is None:
            return None
        e = b.endpoint(listener)
        return (e.host, e.port) if e is not None else None

    def topic_config(self, topic: str, key: str) -> str:
        """The topic's override, else this broker's dynamic config, else the cluster's dynamic
        default, else this broker's property (Kafka's precedence)."""
        t = self.topics.get(topic)
        return topic_config(t.configs if t is not None else {}, self.effective_broker_config(), key)

    def effective_broker_config(self) -> Config:
        """This broker's properties under the dynamic configs from the metadata log."""
        try:
            me = int(self.config.get("node.id", "-1"))
        except ValueError:
            me = -1
        dyn = {**self.broker_configs.get(CLUSTER_DEFAULT, {}), **self.broker_configs.get(me, {})}
        return self.config.with_overrides(dyn) if dyn else self.config

    def topic_configs(self, topic: str) -> dict[str, str]:
        t = self.topics.get(topic)
        return dict(t.configs) if t is not None else {}

    def partitions_of(self, topic: str) -> list[PartitionRecord]:
        by = self._by_topic.get(topic)
        return [by[p] for p in sorted(by)] if by else []

    def partition(self, topic: str, partition: int) -> PartitionRecord | None:
        return self.partitions.get((topic, partition))

    def is_offline(self, topic: str, partition: int) -> bool:
        p = self.partitions.get((topic, partition))
        return p is not None and p.leader == NO_LEADER

    # -- writes --------------------------------------------------------------
    def apply_wire(self, records: list[dict[str, Any]], snapshot: list[dict[str, Any]] | None,
                   next_offset: int) -> MetadataDelta:
        """Triggered by each MetadataFetch response. Decodes everything before
        changing anything, so a malformed record leaves the image untouched."""
        try:
            snap = [from_wire(d)[1] for d in snapshot] if snapshot is not None else None
            recs = [from_wire(d) for d in records]
        except (ValueError, TypeError, AttributeError) as exc:
            raise MetadataError(str(exc)) from None
        return self.apply(recs, snap, next_offset)

    def apply(self, records: Iterable[tuple[int, MetadataRecord]], snapshot: list[MetadataRecord] | None,
              next_offset: int) -> MetadataDelta:
        """Apply an optional full snapshot, then records in log order; the
        image then stands at `next_offset`."""
        delta = MetadataDelta()
        changed_p: dict[tuple[str, int], PartitionRecord] = {}
        changed_b: dict[int, BrokerRecord] = {}
        changed_t: dict[str, TopicRecord] = {}
        if snapshot is not None:
            delta.snapshot = True
            self._load_snapshot(snapshot, delta, changed_p, changed_b, changed_t)
            floor = -1
        else:
            floor = self.offset
        for off, rec in records:
            if off < floor:
                continue                              # already applied (a resent batch)
            self._apply_one(rec, delta, changed_p, changed_b, changed_t)
        if next_offset < self.offset and snapshot is None:
            raise MetadataError(f"metadata log went backwards: next_offset {next_offset} < held {self.offset}")
        self.offset = next_offset
        delta.partitions = list(changed_p.values())
        delta.brokers = list(changed_b.values())
        delta.topics = list(changed_t.values())
        return delta

    def _load_snapshot(self, snapshot: list[MetadataRecord], delta: MetadataDelta,
                       changed_p: dict, changed_b: dict, changed_t: dict) -> None:
        new_brokers = {r.broker_id: r for r in snapshot if isinstance(r, BrokerRecord)}
        new_topics = {r.topic: r for r in snapshot if isinstance(r, TopicRecord)}
        for name, old in list(self.topics.items()):
            t = new_topics.get(name)
            if t is None or t.topic_id != old.topic_id:
                self._remove_topic(name, delta)
        self.brokers = {}
        for r in new_brokers.values():
            self._put_broker(r, changed_b)
        for r in new_topics.values():
            self._put_topic(r, changed_t)
        new_configs = {r.broker_id: dict(r.configs) for r in snapshot if isinstance(r, BrokerConfigRecord)}
        if new_configs != self.broker_configs:
            delta.broker_configs = sorted(set(new_configs) | set(self.broker_configs))
            self.broker_configs = new_configs
        for r in snapshot:
            if isinstance(r, PartitionRecord):
                self._put_partition(r, delta, changed_p)

    def _apply_one(self, rec: MetadataRecord, delta: MetadataDelta,
                   changed_p: dict, changed_b: dict, changed_t: dict) -> None:
        if isinstance(rec, PartitionRecord):
            self._put_partition(rec, delta, changed_p)
        elif isinstance(rec, BrokerRecord):
            self._put_broker(rec, changed_b)
        elif isinstance(rec, TopicRecord):
            old = self.topics.get(rec.topic)
            if old is not None and old.topic_id != rec.topic_id:
                self._remove_topic(rec.topic, delta)
                for k in [k for k in changed_p if k[0] == rec.topic]:
                    del changed_p[k]
            self._put_topic(rec, changed_t)
        elif isinstance(rec, BrokerConfigRecord):
            if self.broker_configs.get(rec.broker_id, {}) != rec.configs:
                if rec.configs:
                    self.broker_configs[rec.broker_id] = dict(rec.configs)
                else:
                    self.broker_configs.pop(rec.broker_id, None)
                if rec.broker_id not in delta.broker_configs:
                    delta.broker_configs.append(rec.broker_id)
        elif isinstance(rec, RemoveTopicRecord):
            self._remove_topic(rec.topic, delta)
            for k in [k for k in changed_p if k[0] == rec.topic]:
                del changed_p[k]
            changed_t.pop(rec.topic, None)
        else:  # pragma: no cover - from_wire only yields the four types
            raise MetadataError(f"unknown metadata record {rec!r}")

    def _put_partition(self, rec: PartitionRecord, delta: MetadataDelta, changed: dict) -> None:
        held = self.partitions.get(rec.key)
        if held is not None:
            if rec.partition_epoch < held.partition_epoch:      # I7: metadata wins only if not older
                delta.ignored_partitions.append(rec)
                return
            if rec == held:
                return
        self.partitions[rec.key] = rec
        self._by_topic.setdefault(rec.topic, {})[rec.partition] = rec
        changed[rec.key] = rec

    def _put_broker(self, rec: BrokerRecord, changed: dict) -> None:
        if self.brokers.get(rec.broker_id) != rec:
            changed[rec.broker_id] = rec
        self.brokers[rec.broker_id] = rec

    def _put_topic(self, rec: TopicRecord, changed: dict) -> None:
        if self.topics.get(rec.topic) != rec:
            changed[rec.topic] = rec
        self.topics[rec.topic] = rec

    def _remove_topic(self, topic: str, delta: MetadataDelta) -> None:
        self.topics.pop(topic, None)
        by = self._by_topic.pop(topic, {})
        for p in sorted(by):
            rec = self.partitions.pop((topic, p))
            delta.removed_partitions.append(rec)
        if topic not in delta.removed_topics:
            delta.removed_topics.append(topic)
