"""Semantic profiles: which of Kafka's rules the partition leader applies.

One `PartitionLeader` class serves both profiles; each difference between
the lesson's rules and Kafka 4.x is one named switch here, never a second
copy of the code.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    # ISR changes take effect at once (the caller acts as a controller that
    # accepts everything). Off: a change becomes a pending AlterPartition
    # proposal; expansions count at once through the maximal ISR, shrinks
    # only once `apply_committed_isr` says the controller committed them.
    commit_isr_immediately: bool
    # H2/P7 (Kafka 3.7+): the HW does not move while the committed ISR is
    # below the effective min ISR.
    strict_min_isr: bool
    # Effective min ISR = min(min.insync.replicas, replication factor).
    cap_min_isr_at_rf: bool
    # I3: a follower joins only once its LEO reached the leader epoch's
    # start offset (as well as the HW).
    expand_requires_epoch_start: bool
    # H1: caught-up, ISR-eligible replicas outside the ISR hold the HW too
    # (otherwise the HW is the minimum LEO over the ISR only).
    hw_counts_caught_up_eligible: bool
    # L3: a follower whose LEO equals the leader's is caught up however long
    # ago it last fetched (otherwise caught up means only
    # now - last_caught_up <= lag).
    leo_equal_is_caught_up: bool
    # L4/H3: on becoming leader, follower LEOs are unknown (-1) until each
    # fetches, which freezes the HW. Off: followers start at the HW.
    unknown_follower_leo_after_election: bool


LESSON = Profile(
    name="lesson",
    commit_isr_immediately=True,
    strict_min_isr=False,
    cap_min_isr_at_rf=False,
    expand_requires_epoch_start=False,
    hw_counts_caught_up_eligible=False,
    leo_equal_is_caught_up=False,
    unknown_follower_leo_after_election=False,
)

KAFKA = Profile(
    name="kafka",
    commit_isr_immediately=False,
    strict_min_isr=True,
    cap_min_isr_at_rf=True,
    expand_requires_epoch_start=True,
    hw_counts_caught_up_eligible=True,
    leo_equal_is_caught_up=True,
    unknown_follower_leo_after_election=True,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (LESSON, KAFKA)}


def profile_by_name(name: str) -> Profile:
    """The profile called `name` ('lesson' or 'kafka'); ValueError otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown profile {name!r} (known: {known})") from None
