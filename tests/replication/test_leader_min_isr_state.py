"""The leader core keeps `effective_min_isr` and `under_min_isr` as plain attributes, set whenever
min.insync.replicas, the replicas or the committed ISR change. These tests check them against the
rule computed from scratch after every event: the property machines of test_leader_properties,
with config changes of min.insync.replicas added, and a replica set shrinking below it."""
from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from .test_leader_properties import KafkaMachine, LessonMachine, _settings

from minibroker.replication.leader import PartitionLeader
from minibroker.replication.profile import KAFKA, LESSON, Profile


def from_scratch(lead: PartitionLeader) -> tuple[int, bool]:
    """The min ISR rule as it was computed on every call (min.insync.replicas capped at RF per profile)."""
    effective = min(lead.min_isr, len(lead.replicas)) if lead.profile.cap_min_isr_at_rf else lead.min_isr
    return effective, len(lead.isr) < effective


class _MinIsrChecks:
    lead: PartitionLeader
    now: int

    @rule(min_isr=st.integers(1, 6))
    def min_isr_changes(self, min_isr: int) -> None:
        self._do(self.lead.on_min_isr_changed, min_isr, self.now)     # type: ignore[attr-defined]

    @invariant()
    def min_isr_state_is_the_rule_of_the_current_state(self) -> None:
        assert (self.lead.effective_min_isr, self.lead.under_min_isr) == from_scratch(self.lead)


class LessonMinIsrMachine(_MinIsrChecks, LessonMachine):
    pass


class KafkaMinIsrMachine(_MinIsrChecks, KafkaMachine):
    pass


TestLessonMinIsrState = LessonMinIsrMachine.TestCase
TestLessonMinIsrState.settings = _settings
TestKafkaMinIsrState = KafkaMinIsrMachine.TestCase
TestKafkaMinIsrState.settings = _settings


def _leader(profile: Profile, min_isr: int) -> PartitionLeader:
    return PartitionLeader("p-0", [1, 2, 3], 1, leader_epoch=0, partition_epoch=0, isr=[1, 2, 3], leo=0, hw=0,
                           lag_max_ms=200, min_isr=min_isr, profile=profile, now_ms=0)


def test_metadata_shrinking_the_replicas_and_the_isr_updates_the_min_isr_state() -> None:
    for profile in (KAFKA, LESSON):
        lead = _leader(profile, 3)
        assert (lead.effective_min_isr, lead.under_min_isr) == (3, False)
        lead.on_metadata([1], 1, 0, [1, 2], 0)                  # RF 2: kafka caps min ISR at 2
        assert (lead.effective_min_isr, lead.under_min_isr) == from_scratch(lead)
        assert lead.effective_min_isr == (2 if profile is KAFKA else 3) and lead.under_min_isr
        lead.on_metadata([1, 2], 2, 0, [1, 2], 0)
        assert (lead.effective_min_isr, lead.under_min_isr) == from_scratch(lead)
        assert lead.under_min_isr == (profile is LESSON)


def test_an_isr_shrink_committed_by_the_controller_updates_under_min_isr() -> None:
    lead = _leader(KAFKA, 3)
    d = lead.maybe_shrink_isr(1_000)                            # no follower fetched: both leave
    assert d.isr_proposal == [1] and not lead.under_min_isr     # proposed only: the committed ISR holds
    lead.apply_committed_isr([1], 1, 1_000, leader_epoch=0)
    assert lead.isr == (1,) and lead.under_min_isr and (lead.effective_min_isr, True) == from_scratch(lead)
