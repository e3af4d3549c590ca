"""The soak's schedule is pure: replayed exactly by its seed, and only the kinds asked for."""
import pytest

from minibroker.verify.soak import KINDS, plan_faults


def test_fault_plans_are_replayed_by_their_seed():
    assert plan_faults(5, 60) == plan_faults(5, 60)
    assert plan_faults(5, 60) != plan_faults(6, 60)


def test_a_plan_uses_only_the_kinds_asked_for_and_fills_the_duration():
    plan = plan_faults(1, 300, ("pause", "partition"))
    assert {f.kind for f in plan} == {"pause", "partition"}
    assert sum(f.hold_s + f.gap_s + 1.0 for f in plan) >= 300
    assert all(f.target != "controller" for f in plan if f.kind == "partition")
    assert {f.kind for f in plan_faults(2, 3000)} == set(KINDS)


def test_bounces_have_no_hold_and_unknown_kinds_are_refused():
    assert all(f.hold_s == 0 for f in plan_faults(3, 200, ("bounce", "hard-bounce")))
    with pytest.raises(ValueError, match="unknown fault kind"):
        plan_faults(1, 10, ("meteor",))
