"""Fault plans: what the nemesis does and when, drawn from a seed, and shrinking.

Pure: a `Plan` is a list of `Fault`s (start time, kind, target, how long it
holds); `make_plan` draws one from a seed; `shrink` removes faults one at a
time while a predicate (the run still fails) holds.

Kinds: kill/restart, power_loss (kill, dropping what was not fsynced),
pause past the session timeout, isolate, cut (one path, one way), reset
(one connection), shutdown (controlled, then restart), elect (preferred),
rebalance (the controller's automatic rebalance, now), create_topic,
ctl_kill (controller kill and restart), quiet (nothing is written), move (a
leadership move in which nothing is written), and, with `settings.reassign`,
reassign (a partition's replicas change, KIP-455: one broker leaves a full
replica set, or the missing one comes back first in the order; cancelled after
`hold` when that is under a second). Reassignments come from a second stream of
the seed, so a seed's other faults are the same with or without them.

Must not know: how a fault is carried out (the world does that).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS: tuple[tuple[str, int], ...] = (
    ("kill", 10), ("pause", 6), ("isolate", 6), ("cut", 6), ("reset", 4), ("shutdown", 5), ("elect", 8),
    ("rebalance", 5), ("create_topic", 2), ("ctl_kill", 3), ("quiet", 8), ("move", 4),
)


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    target: int | str = 0
    hold: float = 0.0
    other: int | str = 0

    def describe(self) -> str:
        extra = f" other={self.other}" if self.kind in ("cut", "move", "create_topic", "reassign") else ""
        tgt = f"b{self.target}" if isinstance(self.target, int) and self.kind not in ("ctl_kill",) else self.target
        return f"{self.kind} {tgt}{extra} at={self.at:.2f} hold={self.hold:.2f}"


@dataclass(frozen=True)
class Plan:
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        return [f.describe() for f in self.faults] or ["(no faults)"]

    def without(self, i: int) -> Plan:
        return Plan(self.faults[:i] + self.faults[i + 1:])


def make_plan(seed: int, settings: Any, *, power_loss: bool | None = None) -> Plan:
    """Faults from t=3 s (the cluster is up) until the heal time, 0.3-4 s apart."""
    rng = random.Random(seed * 2_654_435_761 % (1 << 61))
    use_power = settings.power_loss if power_loss is None else power_loss
    kinds = [k for k, w in KINDS for _ in range(w)] + (["power_loss"] * 3 if use_power else [])
    brokers = list(range(1, settings.brokers + 1))
    session_s = settings.session_timeout_ms / 1000
    t = 3.0 + rng.uniform(0, 2)
    faults = []
    while t < settings.heal_at_s - 1:
        kind = rng.choice(kinds)
        target: int | str = rng.choice(brokers)
        other: int | str = 0
        hold = rng.uniform(0.5, 5.0)
        if kind == "pause":
            hold = session_s + rng.uniform(0.2, 3.0)
        elif kind == "cut":
            other = rng.choice([b for b in brokers if b != target] + ["ctl"])
        elif kind == "ctl_kill":
            target = "ctl"
            hold = rng.uniform(0.2, 3.0)
        elif kind in ("elect", "rebalance", "reset"):
            hold = 0.0
        elif kind == "create_topic":
            other = rng.randrange(3)
            hold = 0.0
        elif kind == "quiet":
            hold = rng.uniform(3.0, 12.0)
        elif kind == "move":
            other = rng.randrange(settings.partitions)
            hold = rng.uniform(0.2, 2.0)
        faults.append(Fault(round(t, 3), kind, target, round(hold, 3), other))
        t += rng.uniform(0.3, 4.0)
    if getattr(settings, "reassign", False):
        faults = sorted(faults + _reassignments(seed, settings, brokers), key=lambda f: f.at)
    return Plan(tuple(faults))


def _reassignments(seed: int, settings: Any, brokers: list[int]) -> list[Fault]:
    rng = random.Random((seed * 2_654_435_761 + 97) % (1 << 61))
    out = []
    t = 4.0 + rng.uniform(0, 2)
    while t < settings.heal_at_s - 1:
        out.append(Fault(round(t, 3), "reassign", rng.choice(brokers), round(rng.uniform(0.3, 3.0), 3),
                         rng.randrange(settings.partitions)))
        t += rng.uniform(2.0, 6.0)
    return out


def shrink(plan: Plan, fails: Callable[[Plan], bool], budget: int = 48) -> Plan:
    """Remove faults while the run still fails: chunks of halving size (latest first), down to
    single faults, until no single fault can go or `budget` runs are spent (ddmin, simplified)."""
    size = max(1, len(plan.faults) // 2)
    while budget > 0 and plan.faults:
        removed = False
        i = len(plan.faults)
        while i > 0 and budget > 0:
            lo = max(0, i - size)
            candidate = Plan(plan.faults[:lo] + plan.faults[i:])
            budget -= 1
            if fails(candidate):
                plan, removed = candidate, True
            i = lo
        if size == 1 and not removed:
            break
        size = max(1, size // 2) if not removed or size > 1 else 1
    return plan


def violation_kinds(violations: list[str]) -> set[str]:
    """The kinds of a run's violations ('t=12.3 LIVENESS ...' -> 'LIVENESS')."""
    return {v.split(" ", 2)[1] for v in violations if " " in v}
