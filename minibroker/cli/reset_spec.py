"""Where `consumer-groups --reset-offsets` moves each partition, as kafka-consumer-groups decides it.

Pure: from option strings and the offsets the cluster reported (committed, log start, high
watermark, the offset for a time) to the new offset of each partition.
  --to-earliest / --to-latest          the log start offset / the high watermark
  --to-offset N                        N, clamped to [log start, high watermark]
  --shift-by N                         the committed offset + N, clamped likewise (a committed offset is needed)
  --to-current                         the committed offset (the high watermark where there is none)
  --to-datetime YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]   the first offset at or after that time (no zone: local time)
  --by-duration PnDTnHnMnS             the first offset at or after now minus that ISO-8601 duration
A time after every record (ListOffsets answers -1) falls back to the high watermark, with Kafka's warning.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from minibroker.client.types import TopicPartition

ResetKind = Literal["earliest", "latest", "offset", "shift", "current", "datetime", "duration"]

_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?"
                       r"(?:T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
                       re.IGNORECASE)


class ResetError(ValueError):
    """An option value or a partition state kafka-consumer-groups would refuse; the message says why."""


@dataclass(frozen=True)
class ResetSpec:
    kind: ResetKind
    value: int = 0          # the offset (offset), the shift (shift), the time in ms (datetime, duration)

    @property
    def by_time(self) -> bool:
        return self.kind in ("datetime", "duration")


def parse_datetime(text: str) -> int:
    """Kafka's Utils.getDateTime: ISO 8601 with a 'T', optional milliseconds and zone; no zone is local time."""
    if "T" not in text:
        raise ResetError(f"--to-datetime {text!r}: error parsing timestamp, it does not contain a 'T' according "
                         "to ISO8601 format")
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ResetError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally followed by Z "
                         "or +hh:mm") from None
    if when.tzinfo is None:
        when = when.astimezone()            # the local zone, as Kafka's tool
    return int(when.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """Java's Duration.parse (PnDTnHnMn.nS, signs allowed) in milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.group(i) for i in range(2, 6)) or (text.upper().endswith("T")):
        raise ResetError(f"--by-duration {text!r}: expected an ISO-8601 duration such as PT1H, PT30M or P1DT2H30M")
    sign = -1 if m.group(1) == "-" else 1
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in range(2, 6))
    fraction = m.group(6) or ""
    ms = int((fraction + "000")[:3]) * (-1 if (m.group(5) or "").startswith("-") else 1)
    total = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds, milliseconds=ms)
    return sign * int(total / timedelta(milliseconds=1))


def parse_spec(*, earliest: bool, latest: bool, to_offset: int | None, shift_by: int | None, current: bool,
               to_datetime: str | None, by_duration: str | None, now_ms: int) -> ResetSpec:
    """The one reset the options ask for (ResetError unless exactly one)."""
    chosen: list[ResetSpec] = []
    if earliest:
        chosen.append(ResetSpec("earliest"))
    if latest:
        chosen.append(ResetSpec("latest"))
    if to_offset is not None:
        chosen.append(ResetSpec("offset", to_offset))
    if shift_by is not None:
        chosen.append(ResetSpec("shift", shift_by))
    if current:
        chosen.append(ResetSpec("current"))
    if to_datetime is not None:
        chosen.append(ResetSpec("datetime", parse_datetime(to_datetime)))
    if by_duration is not None:
        chosen.append(ResetSpec("duration", now_ms - parse_duration_ms(by_duration)))
    if len(chosen) != 1:
        raise ResetError("Option --reset-offsets takes exactly one of these options: --to-datetime, --by-duration, "
                         "--to-earliest, --to-latest, --shift-by, --to-current, --to-offset")
    return chosen[0]


def parse_topics(specs: Sequence[str]) -> list[tuple[str, list[int] | None]]:
    """--topic values: TOPIC (every partition) or TOPIC:P,Q."""
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        name, colon, parts = spec.partition(":")
        if not name:
            raise ResetError(f"--topic {spec!r}: no topic name")
        if not colon:
            out.append((name, None))
            continue
        try:
            out.append((name, [int(p) for p in parts.split(",")]))
        except ValueError:
            raise ResetError(f"--topic {spec!r}: partitions must be integers (TOPIC:0,1)") from None
    return out


def new_offsets(tps: Sequence[TopicPartition], spec: ResetSpec, committed: Mapping[TopicPartition, int],
                log_start: Mapping[TopicPartition, int], high_watermark: Mapping[TopicPartition, int],
                for_time: Mapping[TopicPartition, int]) -> tuple[dict[TopicPartition, int], list[str]]:
    """(the offset each partition is reset to, Kafka's warning lines). `for_time` holds ListOffsets'
    answer for the spec's time (-1: no record at or after it) when the spec is by time."""
    out: dict[TopicPartition, int] = {}
    warnings: list[str] = []
    for tp in tps:
        lo, hi = log_start[tp], high_watermark[tp]
        if spec.kind == "earliest":
            out[tp] = lo
        elif spec.kind == "latest":
            out[tp] = hi
        elif spec.kind == "offset":
            out[tp] = min(max(spec.value, lo), hi)
        elif spec.kind == "shift":
            if tp not in committed:
                raise ResetError(f"Expected a valid current offset for topic partition: {tp.topic}-{tp.partition}")
            out[tp] = min(max(committed[tp] + spec.value, lo), hi)
        elif spec.kind == "current":
            out[tp] = committed.get(tp, hi)
        else:
            found = for_time[tp]
            if found < 0:
                warnings.append(f"Warn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to "
                                "latest known offset.")
                found = hi
            out[tp] = found
    return out, warnings
