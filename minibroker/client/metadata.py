"""The client's metadata cache: which broker leads which partition.

Owns: the broker list, each wanted topic's partitions (leader, leader
epoch, replicas, ISR), when the next refresh is due and whether one was
asked for. Pure: callers pass `now_ms` and feed it Metadata responses; it
never opens a socket or reads a clock. Must not know how requests travel.

Kafka's rules kept here: a partition's cached entry is replaced only by one
with an equal or higher leader epoch (KIP-320, stale brokers must not move a
client backwards); errors of the InvalidMetadata family ask for a refresh;
refreshes are paced by `retry.backoff.ms` and forced by `metadata.max.age.ms`.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Iterable

from minibroker.errors import ErrorCode
from minibroker.client.types import BrokerNode, PartitionMetadata, TopicMetadata, TopicPartition


def _retriable(code: int) -> bool:
    return code in ErrorCode._value2member_map_ and ErrorCode(code).retriable


def parse_partition(topic: str, p: dict[str, Any]) -> PartitionMetadata:
    def ids(key: str) -> tuple[int, ...] | None:
        v = p.get(key, ())
        return None if v is None else tuple(v)
    return PartitionMetadata(
        topic=topic, partition=p["partition"], error=p.get("error", 0),
        leader=p.get("leader", -1), leader_epoch=p.get("leader_epoch", -1),
        partition_epoch=p.get("partition_epoch", -1),
        replicas=tuple(p.get("replicas", ())), isr=tuple(p.get("isr", ())),
        elr=ids("elr"), last_known_elr=ids("last_known_elr"),
        offline_replicas=tuple(p.get("offline_replicas", ()) or ()))


def parse_topic(t: dict[str, Any]) -> TopicMetadata:
    parts = tuple(sorted((parse_partition(t["topic"], p) for p in t.get("partitions", ())),
                         key=lambda pm: pm.partition))
    return TopicMetadata(topic=t["topic"], error=t.get("error", 0), topic_id=t.get("topic_id") or None,
                         configs=dict(t.get("configs") or {}), partitions=parts)


class MetadataCache:
    """Invariants: `partitions[tp].leader_epoch` never decreases while the
    topic id stays the same; `_need_update` is True from `request_update`
    until the next successful `update`."""

    def __init__(self, *, metadata_max_age_ms: int = 300_000, refresh_backoff_ms: int = 100,
                 all_topics: bool = False) -> None:
        self.max_age_ms = metadata_max_age_ms
        self.refresh_backoff_ms = refresh_backoff_ms
        self.all_topics = all_topics                       # Invariant: True means "ask for every topic"
        self.wanted: set[str] = set()
        self.brokers: dict[int, BrokerNode] = {}
        self.topics: dict[str, TopicMetadata] = {}
        self.partitions: dict[TopicPartition, PartitionMetadata] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.last_refresh_ms: int | None = None
        self.last_attempt_ms: int | None = None
        self._need_update = True
        self.version = 0                                   # bumped on every applied response

    # -- what to ask for -------------------------------------------------

    def want(self, topics: Iterable[str]) -> bool:
        """Add topics to the wanted set; returns True (and asks for a refresh) if any is new."""
        new = set(topics) - self.wanted
        if new:
            self.wanted |= new
            self._need_update = True
        return bool(new)

    def request_topics(self) -> list[str] | None:
        """The `topics` field of the next Metadata request (None = all)."""
        return None if self.all_topics else sorted(self.wanted)

    def request_update(self) -> None:
        """Called on any error of the InvalidMetadata family, or when a leader is unknown."""
        self._need_update = True

    @property
    def update_requested(self) -> bool:
        return self._need_update

    def time_to_next_update(self, now_ms: int) -> int:
        """0 when a refresh should be sent now; else ms until one is due."""
        if self.last_refresh_ms is None and self.last_attempt_ms is None:
            return 0
        backoff_left = 0
        if self.last_attempt_ms is not None:
            backoff_left = max(0, self.last_attempt_ms + self.refresh_backoff_ms - now_ms)
        if self._need_update:
            return backoff_left
        assert self.last_refresh_ms is not None
        return max(backoff_left, self.last_refresh_ms + self.max_age_ms - now_ms)

    # -- applying responses ----------------------------------------------

    def attempt(self, now_ms: int) -> None:
        """A Metadata request is being sent now."""
        self.last_attempt_ms = now_ms

    def failed_update(self, now_ms: int) -> None:
        """The Metadata request failed (network or top-level error)."""
        self.last_attempt_ms = now_ms
        self._need_update = True

    def update(self, resp: dict[str, Any], now_ms: int) -> list[TopicPartition]:
        """Apply a Metadata response; returns the partitions whose leader or epoch changed."""
        self.brokers = {b["node_id"]: BrokerNode(b["node_id"], b["host"], b["port"], b.get("rack") or None)
                        for b in resp.get("brokers", ())}
        self.cluster_id = resp.get("cluster_id")
        self.controller_id = resp.get("controller_id", -1)
        changed: list[TopicPartition] = []
        retry_soon = False
        seen: set[str] = set()
        for t in resp.get("topics") or ():
            tm = parse_topic(t)
            seen.add(tm.topic)
            old_topic = self.topics.get(tm.topic)
            same_topic = old_topic is None or old_topic.topic_id is None or tm.topic_id is None \
                or old_topic.topic_id == tm.topic_id
            if tm.error:
                retry_soon |= _retriable(tm.error)
                if tm.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self._drop_topic(tm.topic)
                    self.topics[tm.topic] = tm
                continue
            kept: list[PartitionMetadata] = []
            for pm in tm.partitions:
                tp = pm.tp
                old = self.partitions.get(tp)
                if old is not None and same_topic and pm.leader_epoch < old.leader_epoch:
                    kept.append(old)                     # a stale broker answered: keep the newer view
                    continue
                if pm.error or pm.leader < 0:
                    retry_soon = True
                if old is None or (old.leader, old.leader_epoch) != (pm.leader, pm.leader_epoch):
                    changed.append(tp)
                self.partitions[tp] = pm
                kept.append(pm)
            for stale in [tp for tp in self.partitions if tp.topic == tm.topic and tp.partition >= len(tm.partitions)]:
                del self.partitions[stale]
            self.topics[tm.topic] = TopicMetadata(tm.topic, tm.error, tm.topic_id, tm.configs, tuple(kept))
        if resp.get("topics") is not None and self.all_topics:
            for gone in [t for t in self.topics if t not in seen]:
                self._drop_topic(gone)
        self.last_refresh_ms = now_ms
        self.last_attempt_ms = now_ms
        self._need_update = retry_soon
        self.version += 1
        return changed

    def update_leader(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> bool:
        """A Fetch/Produce response named the current leader (KIP-951); apply it if newer."""
        old = self.partitions.get(tp)
        if old is None or leader_epoch <= old.leader_epoch or leader_id < 0:
            return False
        self.partitions[tp] = PartitionMetadata(
            old.topic, old.partition, 0, leader_id, leader_epoch, old.partition_epoch,
            old.replicas, old.isr, old.elr, old.last_known_elr, old.offline_replicas)
        self.version += 1
        return True

    def _drop_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        for tp in [tp for tp in self.partitions if tp.topic == topic]:
            del self.partitions[tp]

    # -- lookups -----------------------------------------------------------

    def leader_id(self, tp: TopicPartition) -> int | None:
        pm = self.partitions.get(tp)
        if pm is None or pm.leader < 0 or pm.leader not in self.brokers:
            return None
        return pm.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        pm = self.partitions.get(tp)
        return -1 if pm is None else pm.leader_epoch

    def leader(self, tp: TopicPartition) -> BrokerNode | None:
        lid = self.leader_id(tp)
        return None if lid is None else self.brokers[lid]

    def partition_count(self, topic: str) -> int | None:
        tm = self.topics.get(topic)
        if tm is None or tm.error:
            return None
        return len(tm.partitions)

    def topic_error(self, topic: str) -> int:
        tm = self.topics.get(topic)
        return 0 if tm is None else tm.error

    def available_partitions(self, topic: str) -> list[int]:
        tm = self.topics.get(topic)
        if tm is None:
            return []
        return [pm.partition for pm in tm.partitions if self.leader_id(pm.tp) is not None]

    def node(self, node_id: int) -> BrokerNode | None:
        return self.brokers.get(node_id)
