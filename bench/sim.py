"""The long simulation run: many seeds of `minibroker sim`, with figures.

Runs seeds A..B (default 1..10000) of the deterministic whole-cluster
simulation (3 brokers, 3 partitions, RF 3, 60 simulated seconds each by
default) in worker processes, and prints every failing seed with its first
violation, then the totals: seeds, simulated seconds, wall time, CPU time
per seed, violations, and the projected wall time for 10,000 seeds.

    .venv/bin/python bench/sim.py                          # 10,000 seeds, 2 workers
    .venv/bin/python bench/sim.py --seeds 1-500 --jobs 2   # a shorter run
    .venv/bin/python bench/sim.py --seeds 1-200 --duration 30

Exit status 1 if any seed failed. SIGTERM or Ctrl-C stops it with the totals so
far. Replay one with `minibroker sim --seed N`.
"""
from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time


def _worker_init() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(_sig: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _one(args: tuple[int, float, str]) -> tuple[int, list[str], float, float]:
    from minibroker.sim.world import SimSettings, run_seed
    seed, duration, workload = args
    t = time.process_time()
    r = run_seed(seed, settings=SimSettings(duration_s=duration, workload=workload))  # type: ignore[arg-type]
    return seed, r.violations, r.sim_seconds, time.process_time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="1-10000", help="A-B (inclusive)")
    ap.add_argument("--duration", type=float, default=60.0, help="simulated seconds per seed")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--workload", choices=["idempotent", "verifiable"], default="idempotent",
                    help="the producer (minibroker sim --workload)")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    t0 = time.monotonic()
    failing: list[int] = []
    violations, sim_s, cpu_s, done = 0, 0.0, 0.0, 0

    def totals() -> None:
        wall = time.monotonic() - t0
        n = max(done, 1)
        print(f"seeds={done} sim_seconds={sim_s:.0f} wall_seconds={wall:.1f} jobs={args.jobs} "
              f"wall_per_seed={wall / n:.3f} cpu_per_seed={cpu_s / n:.3f} "
              f"projected_10000_seeds_wall_minutes={wall / n * 10000 / 60:.0f} failing_seeds={len(failing)}",
              flush=True)

    pool = multiprocessing.get_context("fork").Pool(args.jobs, initializer=_worker_init, maxtasksperchild=50)
    signal.signal(signal.SIGTERM, _stop)        # a background job ignores SIGINT: stop it with SIGTERM
    try:
        for seed, v, secs, cpu in pool.imap(_one, [(s, args.duration, args.workload) for s in seeds]):
            done += 1
            sim_s += secs
            cpu_s += cpu
            if v:
                failing.append(seed)
                violations += len(v)
                print(f"seed={seed} violations={len(v)} first: {v[0]}", flush=True)
            if done % 100 == 0:
                totals()
    except KeyboardInterrupt:
        print(f"interrupted after {done} seeds", flush=True)
    finally:
        pool.terminate()
    totals()
    print(f"seeds={done} violations={violations}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
