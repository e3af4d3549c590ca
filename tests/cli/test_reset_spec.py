"""consumer-groups --reset-offsets' choices, as kafka-consumer-groups makes them (minibroker.cli.reset_spec)."""
from __future__ import annotations

from datetime import datetime, timezone, UTC

import pytest

from minibroker.cli.reset_spec import (ResetError, ResetSpec, new_offsets, parse_datetime, parse_duration_ms,
                                       parse_spec, parse_topics)
from minibroker.client.types import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_datetimes_are_iso_8601_with_an_optional_zone_and_local_time_without_one() -> None:
    utc = int(datetime(2026, 12, 7, 10, 0, tzinfo=UTC).timestamp() * 1000)
    assert parse_datetime("2026-12-07T10:00:00.000Z") == utc
    assert parse_datetime("2026-12-07T10:00:00.250Z") == utc + 250
    assert parse_datetime("2026-12-07T11:00:00+01:00") == utc
    assert parse_datetime("2026-12-07T10:00:00") == int(datetime(2026, 12, 7, 10, 0).astimezone().timestamp() * 1000)
    with pytest.raises(ResetError, match="does not contain a 'T'"):
        parse_datetime("2026-12-07 10:00:00")
    with pytest.raises(ResetError, match="expected YYYY-MM-DDTHH:mm:SS.sss"):
        parse_datetime("yesterdayTnoon")


@pytest.mark.parametrize("text,ms", [("PT1H", 3_600_000), ("P1DT2H30M", 95_400_000), ("PT0.5S", 500),
                                     ("pt15m", 900_000), ("-PT1M", -60_000), ("PT-90S", -90_000), ("P2D", 172_800_000)])
def test_durations_are_javas_duration_parse(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["PT", "P", "1H", "PT1H30", "P1H", "PT1.5M", ""])
def test_a_duration_java_refuses_is_refused(text: str) -> None:
    with pytest.raises(ResetError, match="ISO-8601 duration"):
        parse_duration_ms(text)


def test_exactly_one_reset_is_chosen() -> None:
    none = dict(earliest=False, latest=False, to_offset=None, shift_by=None, current=False, to_datetime=None,
                by_duration=None, now_ms=10_000_000)
    assert parse_spec(**{**none, "shift_by": -3}) == ResetSpec("shift", -3)
    assert parse_spec(**{**none, "by_duration": "PT1H"}) == ResetSpec("duration", 10_000_000 - 3_600_000)
    assert parse_spec(**{**none, "to_offset": 0}) == ResetSpec("offset", 0)
    for bad in (none, {**none, "earliest": True, "current": True}):
        with pytest.raises(ResetError, match="takes exactly one of these options"):
            parse_spec(**bad)


def test_topics_name_every_partition_or_some() -> None:
    assert parse_topics(["a", "b:0,2"]) == [("a", None), ("b", [0, 2])]
    for bad in ("b:x", ":0"):
        with pytest.raises(ResetError):
            parse_topics([bad])


def test_each_reset_and_its_clamping() -> None:
    committed, lo, hi = {T0: 5}, {T0: 2, T1: 0}, {T0: 10, T1: 4}
    tps = [T0, T1]

    def reset(spec: ResetSpec, at: dict | None = None, parts: list = tps) -> dict:
        return new_offsets(parts, spec, committed, lo, hi, at or {})[0]
    assert reset(ResetSpec("earliest")) == {T0: 2, T1: 0}
    assert reset(ResetSpec("latest")) == {T0: 10, T1: 4}
    assert reset(ResetSpec("offset", 7)) == {T0: 7, T1: 4}
    assert reset(ResetSpec("offset", -5)) == {T0: 2, T1: 0}
    assert reset(ResetSpec("shift", -4), parts=[T0]) == {T0: 2}       # 5 - 4 = 1, below the log start
    assert reset(ResetSpec("shift", 3), parts=[T0]) == {T0: 8}
    assert reset(ResetSpec("current")) == {T0: 5, T1: 4}             # no committed offset: the high watermark
    with pytest.raises(ResetError, match="Expected a valid current offset for topic partition: t-1"):
        reset(ResetSpec("shift", 1))
    targets, warnings = new_offsets(tps, ResetSpec("datetime", 123), committed, lo, hi, {T0: 6, T1: -1})
    assert targets == {T0: 6, T1: 4}
    assert warnings == ["Warn: Partition 1 from topic t is empty. Falling back to latest known offset."]
