"""Which partitions `minibroker offsets` asks for, as kafka-get-offsets (GetOffsetShell) selects them.

Pure: from option strings and the cluster's topic -> partition ids to a
sorted list of TopicPartitions (topics in text order, partitions by number).
  --topic REGEX [--partitions 0,2]     a regular expression matched against the whole name
  --topic-partitions PATTERN,...       REGEX[:N | :N-M | :N- | :-M] (M exclusive); no REGEX = every topic
  --time                               -1 latest, -2 earliest, -3 max-timestamp, -4 earliest-local, or ms
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minibroker.client.types import TopicPartition
from minibroker.protocol.api import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

_NAMED_TIMES = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "max-timestamp": MAX_TIMESTAMP,
                "earliest-local": EARLIEST_TIMESTAMP}
# No tiered storage: the local log starts where the log starts, so -4 is -2.
_NUMBERED_TIMES = {-1: LATEST_TIMESTAMP, -2: EARLIEST_TIMESTAMP, -3: MAX_TIMESTAMP, -4: EARLIEST_TIMESTAMP}
_PATTERN = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


class SpecError(ValueError):
    """An option value kafka-get-offsets would refuse; the message says why."""


def parse_time(text: str) -> int:
    t = text.strip().lower()
    if t in _NAMED_TIMES:
        return _NAMED_TIMES[t]
    try:
        n = int(t)
    except ValueError:
        raise SpecError(f"--time {text!r}: expected a timestamp in ms, -1 (latest), -2 (earliest), "
                        f"-3 (max-timestamp) or -4 (earliest-local)") from None
    if n >= 0:
        return n
    if n in _NUMBERED_TIMES:
        return _NUMBERED_TIMES[n]
    raise SpecError(f"--time {text!r}: negative values other than -1, -2, -3, -4 are not supported")


@dataclass(frozen=True)
class _Filter:
    topic: re.Pattern[str] | None
    low: int = 0
    high: int | None = None        # exclusive

    def matches(self, tp: TopicPartition) -> bool:
        return ((self.topic is None or self.topic.fullmatch(tp.topic) is not None)
                and self.low <= tp.partition and (self.high is None or tp.partition < self.high))


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise SpecError(f"{text!r} is not a valid regular expression: {exc}") from None


def _filters(topic: str | None, partitions: str | None, topic_partitions: str | None) -> list[_Filter]:
    if topic_partitions is not None:
        if topic is not None or partitions is not None:
            raise SpecError("--topic-partitions cannot be used with --topic or --partitions")
        out = []
        for item in topic_partitions.split(","):
            m = _PATTERN.fullmatch(item.strip())
            if m is None or not item.strip():
                raise SpecError(f"--topic-partitions {item!r}: expected TOPIC-REGEX[:N|:N-M|:N-|:-M]")
            rx = _regex(m.group(1)) if m.group(1) else None
            if m.group(2):
                out.append(_Filter(rx, int(m.group(2)), int(m.group(2)) + 1))
            elif m.group(3) or m.group(4):
                out.append(_Filter(rx, int(m.group(3) or 0), int(m.group(4)) if m.group(4) else None))
            else:
                out.append(_Filter(rx))
        return out
    rx = _regex(topic) if topic is not None else None
    if partitions is None:
        return [_Filter(rx)]
    if topic is None:
        raise SpecError("--partitions can only be used with --topic")
    try:
        ids = [int(p) for p in partitions.split(",")]
    except ValueError:
        raise SpecError(f"--partitions {partitions!r}: expected comma-separated partition ids") from None
    return [_Filter(rx, p, p + 1) for p in ids]


def select_partitions(topic_partition_ids: Mapping[str, Sequence[int]], *, topic: str | None = None,
                      partitions: str | None = None,
                      topic_partitions: str | None = None) -> list[TopicPartition]:
    """The matching partitions, sorted (topics as text, then partition number); SpecError if none match."""
    filters = _filters(topic, partitions, topic_partitions)
    out = [tp for name in sorted(topic_partition_ids) for tp in (TopicPartition(name, p)
                                                                  for p in sorted(topic_partition_ids[name]))
           if any(f.matches(tp) for f in filters)]
    if not out:
        raise SpecError("Could not match any topic-partitions with the specified filters")
    return out
