"""Profiles are named switches over one leader class."""
from __future__ import annotations

import dataclasses

import pytest

from minibroker.replication.profile import KAFKA, LESSON, profile_by_name


def test_profiles_are_found_by_name() -> None:
    assert profile_by_name("lesson") is LESSON
    assert profile_by_name("kafka") is KAFKA


def test_unknown_profile_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown profile 'raft'.*kafka, lesson"):
        profile_by_name("raft")


def test_lesson_and_kafka_differ_in_every_switch() -> None:
    for f in dataclasses.fields(LESSON):
        if f.name != "name":
            assert getattr(LESSON, f.name) != getattr(KAFKA, f.name), f.name


def test_lesson_commits_isr_changes_at_once_and_kafka_does_not() -> None:
    assert LESSON.commit_isr_immediately and not KAFKA.commit_isr_immediately


def test_profiles_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LESSON.strict_min_isr = True  # type: ignore[misc]
