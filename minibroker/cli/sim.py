"""`minibroker sim`: the deterministic whole-cluster simulation (minibroker/sim/).

Thin: parses seeds, runs them (in worker processes with --jobs), prints a
line per failing seed and the totals, or one seed's trace and digest."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import click


def _parse_seeds(spec: str) -> range:
    lo, sep, hi = spec.partition("-")
    try:
        a = int(lo)
        b = int(hi) if sep else a
    except ValueError:
        raise click.BadParameter(f"expected A-B (e.g. 1-500), got {spec!r}") from None
    if b < a:
        raise click.BadParameter(f"empty range {spec!r}")
    return range(a, b + 1)


def _settings(duration: float, power_loss: bool, workload: str = "idempotent", reassign: bool = False,
              throttle: bool = False) -> Any:
    from minibroker.sim.world import SimSettings
    return SimSettings(duration_s=duration, power_loss=power_loss, workload=workload,  # type: ignore[arg-type]
                       reassign=reassign or throttle, throttle=throttle)


def _one(args: tuple[int, float, bool, str, bool, bool]) -> tuple[int, list[str], str, float]:
    from minibroker.sim.world import run_seed
    seed, duration, power_loss, workload, reassign, throttle = args
    r = run_seed(seed, settings=_settings(duration, power_loss, workload, reassign, throttle))
    return seed, r.violations, r.digest, r.sim_seconds


def shrunk_plan(seed: int, settings: Any, violations: list[str]) -> Any:
    """The seed's fault plan with every fault removed that the failure does not need."""
    from minibroker.sim.faults import make_plan, shrink, violation_kinds
    from minibroker.sim.world import run_seed
    kinds = violation_kinds(violations)

    def fails(plan: Any) -> bool:
        return bool(kinds & violation_kinds(run_seed(seed, plan=plan, settings=settings).violations))
    return shrink(make_plan(seed, settings), fails)


@click.command()
@click.option("--seed", type=int, default=None, help="Run one seed: print its event trace and digest.")
@click.option("--seeds", "seeds_spec", default=None, metavar="A-B", help="Run seeds A to B; print the failing ones.")
@click.option("--duration", type=float, default=60.0, show_default=True, help="Simulated seconds per seed.")
@click.option("--power-loss", is_flag=True, help="Let the nemesis also cut a node's files back to what was fsynced.")
@click.option("--jobs", "-j", type=int, default=1, show_default=True, help="Worker processes for --seeds.")
@click.option("--shrink/--no-shrink", "do_shrink", default=None,
              help="Shrink failing plans (default: on for --seed, off for --seeds).")
@click.option("--workload", type=click.Choice(["idempotent", "verifiable"]), default="idempotent", show_default=True,
              help="The producer: idempotent with retries (Kafka's default), or Kafka's VerifiableProducer "
                   "(retries=0, no idempotence, 5 requests in flight, 10x the rate).")
@click.option("--reassign", is_flag=True, help="Let the nemesis also reassign partitions (KIP-455): a broker "
                                               "leaves a replica set, or comes back to it; some moves cancelled.")
@click.option("--throttle", is_flag=True, help="--reassign with every move throttled (KIP-73) to 3-30 B/s, "
                                               "the throttles cleared when the nemesis heals the cluster.")
def sim(seed: int | None, seeds_spec: str | None, duration: float, power_loss: bool, jobs: int,
        do_shrink: bool | None, workload: str, reassign: bool, throttle: bool) -> None:
    """Deterministic simulation of a whole cluster (controller, 3 brokers, producer, consumer) under a
    seeded nemesis, on virtual time: same seed, same trace, same digest."""
    if (seed is None) == (seeds_spec is None):
        raise click.UsageError("give exactly one of --seed N or --seeds A-B")
    settings = _settings(duration, power_loss, workload, reassign, throttle)
    if seed is not None:
        from minibroker.sim.world import run_seed
        r = run_seed(seed, settings=settings)
        for line in r.trace:
            click.echo(line)
        if r.violations:
            click.echo(f"seed={seed} FAILED with {len(r.violations)} violation(s); fault plan:")
            plan = shrunk_plan(seed, settings, r.violations) if do_shrink is not False else r.plan
            label = "shrunk" if do_shrink is not False else "full"
            click.echo(f"fault plan ({label}, {len(plan.faults)} of {len(r.plan.faults)} faults):")
            for line in plan.lines():
                click.echo(f"  {line}")
        click.echo(f"digest={r.digest}")
        sys.exit(1 if r.violations else 0)
    seeds = _parse_seeds(seeds_spec or "")
    t0 = time.monotonic()
    total_violations = failing = 0
    sim_s = 0.0
    work = [(s, duration, power_loss, workload, reassign, throttle) for s in seeds]
    results: Iterator[tuple[int, list[str], str, float]]
    if jobs > 1:
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(jobs, maxtasksperchild=50)
        results = pool.imap(_one, work)
    else:
        pool = None
        results = map(_one, work)
    try:
        for s, violations, digest, seconds in results:
            sim_s += seconds
            if violations:
                failing += 1
                total_violations += len(violations)
                click.echo(f"seed={s} violations={len(violations)} digest={digest} first: {violations[0]}")
                if do_shrink:
                    plan = shrunk_plan(s, settings, violations)
                    click.echo(f"  shrunk plan: {'; '.join(plan.lines())}")
    finally:
        if pool is not None:
            pool.terminate()
    click.echo(f"failing_seeds={failing} sim_seconds={sim_s:.0f} wall_seconds={time.monotonic() - t0:.1f}")
    click.echo(f"seeds={len(seeds)} violations={total_violations}")
    sys.exit(1 if total_violations else 0)
