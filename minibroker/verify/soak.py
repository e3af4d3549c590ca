"""The randomised soak: Jepsen-style random faults under load, then the checker (S19).

Two halves, as everywhere in minibroker:

* `plan_faults` is pure: from a seed, the fault kinds and a duration it
  returns the schedule (kind, target, how long it lasts, the pause after
  it), so a failing run is replayed by its seed;
* `run_soak` drives a `FaultRig` through the schedule while a `Workload`
  produces, undoing each fault before the next (so at most one node is
  faulted at a time and min.insync.replicas=2 of 3 stays reachable), waits
  after each for the cluster to heal (every partition led with a full ISR,
  I6), and at the end runs the checker with the byte comparison.

Fault kinds: kill (SIGKILL, restart after the hold), stop (SIGTERM, restart
after the hold), bounce (SIGTERM and start at once), hard-bounce (SIGKILL
and start at once), pause (SIGSTOP for the hold), isolate (every path of
the node cut for the hold), partition (the two directions between two
brokers cut for the hold). Targets: the leader of a random partition, a
random follower, a random broker, or the controller (not for partition).
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from collections.abc import Callable

from minibroker import clock
from minibroker.testing.layout import CONTROLLER_ID
from minibroker.verify.checker import Report
from minibroker.verify.faults import FaultRig

KINDS = ("kill", "stop", "bounce", "hard-bounce", "pause", "isolate", "partition")
TARGETS = ("leader", "follower", "any", "controller")


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str          # leader | follower | any | controller
    partition: int       # whose leader/follower (for those targets)
    hold_s: float        # how long the fault stays in place
    gap_s: float         # quiet time after it healed


def plan_faults(seed: int, duration_s: float, kinds: tuple[str, ...] = KINDS, *, partitions: int = 3,
                hold_s: tuple[float, float] = (1.0, 5.0), gap_s: tuple[float, float] = (0.5, 3.0),
                controller_share: float = 0.2, heal_estimate_s: float = 1.0) -> list[Fault]:
    """A schedule whose holds, gaps and an estimated heal time per fault fill `duration_s`
    (generous: `run_soak` stops at its own deadline)."""
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown fault kind {k!r} (known: {', '.join(KINDS)})")
    rng = random.Random(seed)
    out: list[Fault] = []
    t = 0.0
    while t < duration_s:
        kind = rng.choice(kinds)
        if kind != "partition" and rng.random() < controller_share:
            target = "controller"
        else:
            target = rng.choice(("leader", "follower", "any"))
        hold = 0.0 if kind in ("bounce", "hard-bounce") else round(rng.uniform(*hold_s), 2)
        gap = round(rng.uniform(*gap_s), 2)
        out.append(Fault(kind, target, rng.randrange(partitions), hold, gap))
        t += hold + gap + heal_estimate_s
    return out


@dataclass
class SoakResult:
    report: Report
    timeline: list[str] = field(default_factory=list)
    heal_times_s: list[float] = field(default_factory=list)
    longest_ack_gap_s: float = 0.0
    unhealed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.unhealed


async def _resolve(rig: FaultRig, f: Fault, rng: random.Random) -> tuple[int, int | None]:
    """(node, other) the fault hits; `other` is the second broker of a partition fault."""
    ids = rig.c.broker_ids
    if f.kind == "partition":
        a, b = rng.sample(ids, 2)
        return a, b
    if f.target == "controller":
        return CONTROLLER_ID, None
    if f.target == "any":
        return rng.choice(ids), None
    view = await rig.freshest(f.partition)
    lead = view["leader"] if view else -1
    if f.target == "leader" and lead > 0:
        return lead, None
    followers = [b for b in ids if b != lead]
    return rng.choice(followers), None


async def apply(rig: FaultRig, f: Fault, node: int, other: int | None) -> None:
    """Put the fault in place, hold it, undo it."""
    if f.kind == "partition":
        assert other is not None
        for a, b in ((node, other), (other, node)):
            rig.c.block(a, b)
        await asyncio.sleep(f.hold_s)          # the fault's length, not a synchronisation
        for a, b in ((node, other), (other, node)):
            rig.c.unblock(a, b)
        return
    if f.kind in ("kill", "hard-bounce"):
        rig.kill(node)
    elif f.kind in ("stop", "bounce"):
        rig.stop(node)
    elif f.kind == "pause":
        rig.pause(node)
    elif f.kind == "isolate":
        rig.isolate(node)
    if f.hold_s:
        await asyncio.sleep(f.hold_s)          # the fault's length
    if f.kind == "pause":
        rig.resume(node)
    elif f.kind == "isolate":
        rig.heal(node)
    else:
        rig.start(node)


async def run_soak(rig: FaultRig, schedule: list[Fault], *, seed: int = 0, rate: float = 500.0,
                   duration_s: float | None = None, heal_timeout_s: float = 60.0,
                   log: Callable[[str], None] = print) -> SoakResult:
    """Run `schedule` under load on `rig`'s topic (created beforehand), stopping early once
    `duration_s` of wall-clock time passed, and check the outcome."""
    rng = random.Random(seed ^ 0x5EED)
    wl = await rig.start_load(rate=rate)
    result = SoakResult(Report())
    start = clock.monotonic()
    sampler = asyncio.ensure_future(_sample_acks(wl, result))
    try:
        await wl.progress(20, timeout_s=30)
        for i, f in enumerate(schedule):
            if duration_s is not None and clock.monotonic() - start >= duration_s:
                break
            node, other = await _resolve(rig, f, rng)
            what = (f"partition b{node}<->b{other}" if f.kind == "partition"
                    else f"{f.kind} {'controller' if node == CONTROLLER_ID else f'broker {node}'}")
            line = f"{clock.monotonic() - start:7.1f}s  #{i:<3} {what} for {f.hold_s:.1f}s  (acked {wl.acked})"
            result.timeline.append(line)
            log(line)
            await apply(rig, f, node, other)
            t0 = clock.monotonic()
            try:
                await rig.wait_running()
                await rig.wait_isr_full(heal_timeout_s)
                result.heal_times_s.append(clock.monotonic() - t0)
            except Exception as exc:                 # a liveness failure: report it, go on
                msg = f"#{i} {what}: not healed after {heal_timeout_s:.0f}s: {exc}"
                result.unhealed.append(msg)
                log("  " + msg)
                await rig.restore()
            await asyncio.sleep(f.gap_s)             # quiet time under load between faults
    finally:
        sampler.cancel()
    result.report = await rig.finish()
    return result


async def _sample_acks(wl, result: SoakResult) -> None:
    last_count, last_change = wl.acked, clock.monotonic()
    while True:
        await asyncio.sleep(0.1)
        now = clock.monotonic()
        if wl.acked != last_count:
            last_count, last_change = wl.acked, now
        result.longest_ack_gap_s = max(result.longest_ack_gap_s, now - last_change)
