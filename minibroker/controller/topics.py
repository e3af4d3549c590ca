"""Topics and partitions as the controller holds them, and what a topic may be.

Owns: the latest `TopicRecord` per topic and `PartitionRecord` per partition
(replayed from the metadata log); Kafka's legal-topic-name rule
(`Topic.validate`, plus the '.'/'_' collision check) and validation of the
topic-level configs minibroker understands.

Must not know: brokers' liveness, elections, the log's storage, sockets or
the clock.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from minibroker.codec import TOPIC_COMPRESSION_TYPES
from minibroker.config import TIMESTAMP_TYPES, TOPIC_CONFIGS, TOPIC_ONLY_CONFIGS
from minibroker.metadata import PartitionRecord, RemoveTopicRecord, TopicRecord
from minibroker.replication.throttle import throttled_replicas_error

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
_INT = (-(2 ** 31), 2 ** 31 - 1)
_LONG = (-(2 ** 63), 2 ** 63 - 1)

# Topic config -> (type, minimum); Kafka's LogConfig definitions.
CONFIG_TYPES: dict[str, tuple[str, int | None]] = {
    "min.insync.replicas": ("int", 1),
    "unclean.leader.election.enable": ("bool", None),
    "segment.bytes": ("int", 14),
    "segment.ms": ("long", 1),
    "retention.bytes": ("long", None),
    "retention.ms": ("long", -1),
    "flush.messages": ("long", 1),
    "flush.ms": ("long", 0),
    "max.message.bytes": ("int", 0),
    "index.interval.bytes": ("int", 0),
    "file.delete.delay.ms": ("long", 0),
    "compression.type": ("string", None),
    "cleanup.policy": ("list", None),
    "message.timestamp.type": ("string", None),
    "message.timestamp.before.max.ms": ("long", 0),
    "message.timestamp.after.max.ms": ("long", 0),
}
# String topic configs with a closed set of values, in Kafka's order (its ConfigDef.ValidString message).
CONFIG_CHOICES: dict[str, tuple[str, ...]] = {"compression.type": tuple(TOPIC_COMPRESSION_TYPES),
                                              "message.timestamp.type": TIMESTAMP_TYPES}


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate message for an illegal name, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_NAME_LENGTH:
        return (f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
                f"topic name: {name}")
    if not _LEGAL.match(name):
        return (f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
                "'.', '_' and '-'")
    return None


def topic_config_error(configs: Mapping[str, str], max_message_bytes_limit: int | None = None) -> str | None:
    """Why these topic configs are unacceptable (unknown name, wrong type, out of range), or None.
    max.message.bytes above `max_message_bytes_limit` is refused: no follower could fetch such a batch."""
    for key, raw in configs.items():
        if key in TOPIC_ONLY_CONFIGS:
            err = throttled_replicas_error(key, raw)
            if err is not None:
                return err
            continue
        if key not in TOPIC_CONFIGS:
            return f"Unknown topic config name: {key}"
        kind, minimum = CONFIG_TYPES.get(key, ("string", None))
        v = raw.strip()
        if key == "cleanup.policy" and {p.strip() for p in v.split(",")} != {"delete"}:
            return (f"Invalid value {raw} for configuration {key}: minibroker serves only delete "
                    "(it has no log cleaner, so compact is not supported)")
        if key in CONFIG_CHOICES and v not in CONFIG_CHOICES[key]:
            choices = ", ".join(CONFIG_CHOICES[key])
            return f"Invalid value {raw} for configuration {key}: String must be one of: {choices}"
        if kind == "bool":
            if v.lower() not in ("true", "false"):
                return f"Invalid value {raw} for configuration {key}: Expected value to be either true or false"
            continue
        if kind in ("int", "long"):
            lo, hi = _INT if kind == "int" else _LONG
            try:
                n = int(v)
            except ValueError:
                return f"Invalid value {raw} for configuration {key}: Not a number of type {kind.upper()}"
            if not lo <= n <= hi:
                return f"Invalid value {raw} for configuration {key}: Not a number of type {kind.upper()}"
            if minimum is not None and n < minimum:
                return f"Invalid value {raw} for configuration {key}: Value must be at least {minimum}"
            if key == "max.message.bytes" and max_message_bytes_limit is not None and n > max_message_bytes_limit:
                return (f"Invalid value {raw} for configuration {key}: Value must be at most "
                        f"{max_message_bytes_limit} (socket.request.max.bytes minus 1 MiB), or followers "
                        "could not fetch a batch this large")
    return None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


class TopicTable:
    """Invariant: every partition's topic is in `topics`, and a topic with
    `num_partitions == n` has partitions exactly 0..n-1 once its creation
    records are applied."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicRecord] = {}
        self.partitions: dict[str, dict[int, PartitionRecord]] = {}

    def apply(self, rec: TopicRecord | PartitionRecord | RemoveTopicRecord) -> None:
        if isinstance(rec, TopicRecord):
            self.topics[rec.topic] = rec
            self.partitions.setdefault(rec.topic, {})
        elif isinstance(rec, PartitionRecord):
            if rec.topic not in self.topics:
                raise ValueError(f"partition record for unknown topic {rec.topic!r}")
            self.partitions[rec.topic][rec.partition] = rec
        else:
            self.topics.pop(rec.topic, None)
            self.partitions.pop(rec.topic, None)

    def get(self, topic: str, partition: int) -> PartitionRecord | None:
        return self.partitions.get(topic, {}).get(partition)

    def all_partitions(self) -> Iterator[PartitionRecord]:
        for topic in sorted(self.partitions):
            parts = self.partitions[topic]
            for p in sorted(parts):
                yield parts[p]

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic whose name differs only by '.' vs '_', if any."""
        if "." not in name and "_" not in name:
            return None
        key = _collision_key(name)
        for t in self.topics:
            if t != name and _collision_key(t) == key:
                return t
        return None
