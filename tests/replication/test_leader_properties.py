"""Property tests: random event sequences through the leader core, both profiles.

Invariants checked after every event:
  - the HW never decreases and never passes the leader's LEO;
  - the HW is <= the LEO of every (known) member of the maximal ISR, hence of
    the committed ISR once a change is committed (lesson: HW == min LEO over ISR);
  - the leader is always in the ISR; the ISR is a subset of the replicas;
  - an acks=all waiter never completes OK while the HW is below its offset,
    completes at most once, and never after it was removed;
  - kafka: one ISR change in flight; strict min ISR freezes the HW.
Followers fetch monotonically, except in `fetch_below_the_hw` (as after an
unclean truncation); such a follower is exempt from the HW <= LEO check until
it is back at the HW, and the HW must not come down to it.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from minibroker.errors import ErrorCode
from minibroker.events import Event
from minibroker.replication.leader import Decision, PartitionLeader
from minibroker.replication.profile import KAFKA, LESSON, Profile

REPLICAS = [1, 2, 3, 4]
FOLLOWERS = REPLICAS[1:]


@dataclass(eq=False)
class Waiter:
    required: int
    removed: bool = False
    done: bool = False


class LeaderMachine(RuleBasedStateMachine):
    profile: Profile = LESSON

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.events: list[Event] = []
        self.lead = PartitionLeader(
            "p-0", REPLICAS, 1, leader_epoch=0, partition_epoch=0, isr=list(REPLICAS),
            leo=0, hw=0, lag_max_ms=200, min_isr=3, profile=self.profile, now_ms=0,
            sink=self.events.append)
        self.last_hw = self.lead.hw
        self.waiters: list[Waiter] = []
        # followers that fetched below the HW (as after a truncation): the HW
        # may be above their LEO, and it must not come down to it
        self.lowered: set[int] = set()
        self.last_caught_up: dict[int, int] = {}
        self.last_fetch_leader_leo = {r: f.last_fetch_leader_leo
                                      for r, f in self.lead.followers.items()}

    # ------------------------------------------------------------------ events

    def _apply(self, d: Decision, pending_before: object) -> None:
        lead = self.lead
        assert d.new_hw == lead.hw and d.hw_moved == (d.old_hw != d.new_hw)
        if self.profile.strict_min_isr and lead.under_min_isr:
            assert not d.hw_moved
        for token, code in d.completed:
            assert isinstance(token, Waiter)
            assert not token.done and not token.removed
            if code == ErrorCode.NONE:
                assert lead.hw >= token.required
                assert len(lead.maximal_isr) >= lead.effective_min_isr
            token.done = True
        offsets = [t.required for t, _ in d.completed]
        assert offsets == sorted(offsets)
        if self.profile.commit_isr_immediately:
            assert d.isr_proposal is None and lead.pending is None
        elif d.isr_proposal is not None and pending_before is not None:
            assert lead.pending is pending_before  # a resend, not a second change
        assert all(e in self.events for e in d.events)

    def _do(self, fn, *args, **kw) -> Decision:
        before = self.lead.pending
        d = fn(*args, **kw)
        self._apply(d, before)
        return d

    @rule(dt=st.integers(0, 300))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule(n=st.integers(0, 5))
    def append(self, n: int) -> None:
        self._do(self.lead.on_append, self.lead.leo + n, self.now)

    @rule(replica=st.sampled_from(FOLLOWERS), gain=st.integers(0, 6))
    def fetch(self, replica: int, gain: int) -> None:
        f = self.lead.followers[replica]
        offset = min(max(f.leo, 0) + gain, self.lead.leo)
        if offset >= self.lead.hw:
            self.lowered.discard(replica)
        d = self._do(self.lead.on_follower_fetch, replica, offset, self.now)
        assert d.error == ErrorCode.NONE
        g = self.lead.followers[replica]
        assert g.leo == offset and g.last_fetch_ms == self.now
        if g.last_caught_up_ms is not None:
            assert g.last_caught_up_ms <= self.now
            assert g.last_caught_up_ms >= self.last_caught_up.get(replica, g.last_caught_up_ms)
            self.last_caught_up[replica] = g.last_caught_up_ms
        assert g.last_fetch_leader_leo >= self.last_fetch_leader_leo[replica]
        self.last_fetch_leader_leo[replica] = g.last_fetch_leader_leo

    @precondition(lambda self: self.lead.hw > 0)
    @rule(replica=st.sampled_from(FOLLOWERS), down=st.integers(1, 3))
    def fetch_below_the_hw(self, replica: int, down: int) -> None:
        offset = max(self.lead.hw - down, 0)
        self._do(self.lead.on_follower_fetch, replica, offset, self.now)
        self.lowered.add(replica)

    @rule(replica=st.sampled_from(FOLLOWERS), offset=st.integers(-3, 3))
    def fetch_out_of_range(self, replica: int, offset: int) -> None:
        bad = offset if offset < 0 else self.lead.leo + 1 + offset
        before = (dict(self.lead.followers), self.lead.isr, self.lead.pending)
        d = self._do(self.lead.on_follower_fetch, replica, bad, self.now)
        assert d.error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (dict(self.lead.followers), self.lead.isr, self.lead.pending) == before

    @rule()
    def isr_check(self) -> None:
        self._do(self.lead.maybe_shrink_isr, self.now)

    @rule(back=st.integers(0, 4))
    def produce_all(self, back: int) -> None:
        w = Waiter(max(self.lead.leo - back, 0) + 1)
        if self.lead.check_produce(-1) == ErrorCode.NONE:
            self._do(self.lead.on_append, max(self.lead.leo, w.required), self.now)
            self.waiters.append(w)
            self._do(self.lead.add_waiter, w.required, w, self.now)
        else:
            assert self.lead.under_min_isr

    @precondition(lambda self: any(not w.done and not w.removed for w in self.waiters))
    @rule(data=st.data())
    def time_out_a_waiter(self, data: st.DataObject) -> None:
        live = [w for w in self.waiters if not w.done and not w.removed]
        w = data.draw(st.sampled_from(live))
        assert self.lead.remove_waiter(w)
        w.removed = True

    @rule(replica=st.sampled_from(FOLLOWERS), eligible=st.booleans())
    def eligibility(self, replica: int, eligible: bool) -> None:
        self._do(self.lead.set_replica_eligibility, replica, eligible, -1, self.now)

    @precondition(lambda self: self.lead.pending is not None)
    @rule(accept=st.booleans())
    def controller_answers(self, accept: bool) -> None:
        p = self.lead.pending
        assert p is not None
        if accept:
            self._do(self.lead.apply_committed_isr, list(p.isr),
                     self.lead.partition_epoch + 1, self.now, self.lead.leader_epoch)
            assert self.lead.isr == p.isr and self.lead.pending is None
        else:
            self._do(self.lead.on_alter_partition_error, ErrorCode.INELIGIBLE_REPLICA, self.now)
            assert self.lead.pending is None

    @precondition(lambda self: self.lead.pending is not None)
    @rule(code=st.sampled_from([ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.REQUEST_TIMED_OUT]))
    def controller_errs(self, code: ErrorCode) -> None:
        p = self.lead.pending
        d = self._do(self.lead.on_alter_partition_error, code, self.now)
        assert self.lead.pending is p
        assert (d.isr_proposal is None) == (code == ErrorCode.FENCED_LEADER_EPOCH)

    @rule()
    def metadata_confirms_isr(self) -> None:
        # Metadata catching up with the committed ISR (discards a pending change).
        self._do(self.lead.on_metadata, list(self.lead.isr), self.lead.partition_epoch,
                 self.lead.leader_epoch, REPLICAS, self.now)
        assert self.lead.pending is None

    @rule()
    def reelected(self) -> None:
        self._do(self.lead.on_metadata, list(self.lead.isr), self.lead.partition_epoch + 1,
                 self.lead.leader_epoch + 1, REPLICAS, self.now)
        assert self.lead.epoch_start_offset == self.lead.leo

    # --------------------------------------------------------------- invariants

    @invariant()
    def hw_never_decreases_and_stays_within_the_log(self) -> None:
        assert self.last_hw <= self.lead.hw <= self.lead.leo
        self.last_hw = self.lead.hw

    @invariant()
    def hw_is_at_most_the_leo_of_every_isr_member(self) -> None:
        lead = self.lead
        for r in lead.maximal_isr:
            if r not in self.lowered and r != lead.leader_id and lead.followers[r].leo != -1:
                assert lead.hw <= lead.followers[r].leo
        if lead.pending is None:
            for r in lead.isr:
                if r not in self.lowered and r != lead.leader_id and lead.followers[r].leo != -1:
                    assert lead.hw <= lead.followers[r].leo

    @invariant()
    def lesson_hw_is_exactly_the_minimum_leo_over_the_isr(self) -> None:
        lead = self.lead
        if self.profile is LESSON and not self.lowered:
            leos = [lead.leo] + [lead.followers[r].leo for r in lead.isr if r != lead.leader_id]
            assert lead.hw == min(leos)

    @invariant()
    def leader_is_in_the_isr_and_the_isr_is_within_the_replicas(self) -> None:
        lead = self.lead
        assert lead.leader_id in lead.isr and lead.leader_id in lead.maximal_isr
        assert set(lead.isr) <= set(lead.replicas)
        assert set(lead.maximal_isr) <= set(lead.replicas)
        assert len(set(lead.isr)) == len(lead.isr)          # ordered as committed, no duplicates

    @invariant()
    def maximal_isr_matches_the_pending_change(self) -> None:
        lead, p = self.lead, self.lead.pending
        if p is None or p.kind == "shrink":
            assert lead.maximal_isr == lead.isr
        else:
            assert p.kind == "expand" and set(lead.isr) < set(lead.maximal_isr) == set(p.isr)

    @invariant()
    def no_live_waiter_is_already_satisfied(self) -> None:
        lead = self.lead
        live = [w for w in self.waiters if not w.done and not w.removed]
        assert lead.waiting == len(live)
        if not (self.profile.strict_min_isr and lead.under_min_isr):
            assert all(w.required > lead.hw for w in live)


class LessonMachine(LeaderMachine):
    profile = LESSON


class KafkaMachine(LeaderMachine):
    profile = KAFKA


_settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestLessonLeaderProperties = LessonMachine.TestCase
TestLessonLeaderProperties.settings = _settings
TestKafkaLeaderProperties = KafkaMachine.TestCase
TestKafkaLeaderProperties.settings = _settings
