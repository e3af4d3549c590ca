"""Per-log configuration, with Kafka's topic-level property names.

`LogConfig.from_properties({"segment.bytes": "1048576", ...})` accepts the
topic-level names (and the broker-level `log.*` spellings); attribute names
are the snake_case of the topic-level names. Unknown or out-of-range values
raise KafkaError(INVALID_CONFIG).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any
from collections.abc import Mapping

from minibroker import codec
from minibroker.config import TIMESTAMP_TYPES
from minibroker.errors import ErrorCode, KafkaError
from minibroker.record_check import LONG_MAX, timestamp_window

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30                 # segment.bytes / log.segment.bytes
    segment_ms: int = 7 * DAY_MS                 # segment.ms / log.roll.ms
    index_interval_bytes: int = 4096             # index.interval.bytes / log.index.interval.bytes
    retention_bytes: int = -1                    # retention.bytes / log.retention.bytes (-1: unlimited)
    retention_ms: int = 7 * DAY_MS               # retention.ms / log.retention.ms (-1: unlimited)
    flush_messages: int = LONG_MAX               # flush.messages / log.flush.interval.messages
    flush_ms: int = LONG_MAX                     # flush.ms / log.flush.interval.ms
    max_message_bytes: int = 1048588             # max.message.bytes / message.max.bytes
    file_delete_delay_ms: int = 60000            # file.delete.delay.ms / log.segment.delete.delay.ms
    compression_type: str = "producer"           # compression.type: a key of codec.TOPIC_COMPRESSION_TYPES
    # message.timestamp.type / log.message.timestamp.type: one of TIMESTAMP_TYPES. LogAppendTime: the
    # leader stamps each batch with its clock (records.with_log_append_time).
    message_timestamp_type: str = "CreateTime"
    # message.timestamp.before.max.ms / after.max.ms (KIP-937; Kafka 4.0's defaults, KIP-1030): how far
    # before and after the leader's clock a CreateTime record's timestamp may be (else INVALID_TIMESTAMP).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    # minibroker's own switch: fsync the log before an acks=all response is sent.
    flush_on_acks_all: bool = False              # minibroker.flush.on.acks.all

    def __post_init__(self) -> None:
        checks = [
            (self.segment_bytes >= 64, "segment.bytes must be at least 64"),
            (self.segment_bytes <= 2**31 - 1, "segment.bytes must fit in 31 bits"),
            (self.segment_ms >= 1, "segment.ms must be at least 1"),
            (self.index_interval_bytes >= 0, "index.interval.bytes must be >= 0"),
            (self.retention_bytes >= -1, "retention.bytes must be >= -1"),
            (self.retention_ms >= -1, "retention.ms must be >= -1"),
            (self.flush_messages >= 1, "flush.messages must be at least 1"),
            (self.flush_ms >= 0, "flush.ms must be >= 0"),
            (self.max_message_bytes >= 0, "max.message.bytes must be >= 0"),
            (self.file_delete_delay_ms >= 0, "file.delete.delay.ms must be >= 0"),
            (self.compression_type in codec.TOPIC_COMPRESSION_TYPES,
             f"compression.type must be one of {', '.join(codec.TOPIC_COMPRESSION_TYPES)}"),
            (self.message_timestamp_type in TIMESTAMP_TYPES,
             f"message.timestamp.type must be one of {', '.join(TIMESTAMP_TYPES)}"),
            (self.message_timestamp_before_max_ms >= 0, "message.timestamp.before.max.ms must be >= 0"),
            (self.message_timestamp_after_max_ms >= 0, "message.timestamp.after.max.ms must be >= 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise KafkaError(ErrorCode.INVALID_CONFIG, msg)

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka property names; values may be strings. Properties
        not given keep the values of `base` (or the defaults)."""
        updates: dict[str, Any] = {}
        for name, raw in props.items():
            attr = PROPERTY_NAMES.get(name)
            if attr is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown log config {name!r}")
            updates[attr] = _coerce(name, attr, raw)
        return replace(base or cls(), **updates)

    @property
    def target_codec(self) -> int | None:
        """The codec the leader stores batches in, or None to keep the producer's."""
        return codec.TOPIC_COMPRESSION_TYPES[self.compression_type]

    @property
    def log_append_time(self) -> bool:
        """Whether the leader gives every batch its own clock's time (message.timestamp.type=LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    def timestamp_window(self, now_ms: int) -> tuple[int, int] | None:
        """The record timestamps a leader append at `now_ms` accepts (None: any), for a CreateTime log."""
        if self.message_timestamp_type != "CreateTime":
            return None
        return timestamp_window(now_ms, self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms)

    def to_properties(self) -> dict[str, str]:
        out = {}
        for prop, attr in PROPERTY_NAMES.items():
            if prop in _TOPIC_NAMES:
                v = getattr(self, attr)
                out[prop] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


_TOPIC_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "retention.bytes": "retention_bytes",
    "retention.ms": "retention_ms",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "max.message.bytes": "max_message_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "compression.type": "compression_type",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "minibroker.flush.on.acks.all": "flush_on_acks_all",
}
PROPERTY_NAMES: dict[str, str] = {
    **_TOPIC_NAMES,
    "log.segment.bytes": "segment_bytes",
    "log.roll.ms": "segment_ms",
    "log.index.interval.bytes": "index_interval_bytes",
    "log.retention.bytes": "retention_bytes",
    "log.retention.ms": "retention_ms",
    "log.flush.interval.messages": "flush_messages",
    "log.flush.interval.ms": "flush_ms",
    "message.max.bytes": "max_message_bytes",
    "log.segment.delete.delay.ms": "file_delete_delay_ms",
    "log.message.timestamp.type": "message_timestamp_type",
    "log.message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "log.message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}
_BOOL_ATTRS = {f.name for f in fields(LogConfig) if f.type in ("bool", bool)}
_STR_ATTRS = {f.name for f in fields(LogConfig) if f.type in ("str", str)}


def _coerce(name: str, attr: str, raw: Any) -> Any:
    if attr in _STR_ATTRS:
        return str(raw).strip()
    if attr in _BOOL_ATTRS:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be true or false, got {raw!r}")
    if isinstance(raw, bool):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be an integer, got {raw!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{name} must be an integer, got {raw!r}") from None
