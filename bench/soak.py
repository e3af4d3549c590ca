"""Soak: random faults under load for minutes, then the checker (S19, the long
variant of tests/failures).

Starts a local cluster of real processes (controller, 3 brokers, the fault
proxy; fast timings: fencing after 2 s, ISR shrink after 2 s of lag),
creates a topic (3 partitions, RF=3, min.insync.replicas=2, unclean
election off), produces numbered records with acks=all and follows them
with a live reader, and injects a seeded random schedule of faults (kill,
stop, bounce, hard-bounce, pause, isolate, partition; aimed at a leader, a
follower, any broker or the controller), healing after each. At the end:
every fault undone, replicas converged, every partition read from offset 0,
replica logs compared byte for byte.

    .venv/bin/python bench/soak.py                              # 5 minutes, all fault kinds
    .venv/bin/python bench/soak.py --duration 120 --faults pause,kill --seed 7
    .venv/bin/python bench/soak.py --keep --data-dir /tmp/soak   # keep the cluster's logs

Prints the fault timeline, the checker's report, heal times (time until every
partition is led with a full ISR after a fault is undone), and the longest
stretch without an acknowledgement. Exit status 1 when the report FAILs or a
fault never healed. Replay a failure with the same --seed.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

from minibroker.testing.cluster import LocalCluster
from minibroker.verify.faults import FaultRig
from minibroker.verify.soak import KINDS, plan_faults, run_soak


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=300, help="seconds of faults (default 300)")
    ap.add_argument("--seed", type=int, default=None, help="schedule seed (default: random, printed)")
    ap.add_argument("--faults", default=",".join(KINDS), help=f"comma-separated kinds (default: {','.join(KINDS)})")
    ap.add_argument("--rate", type=float, default=500, help="records per second (default 500)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--data-dir", default=None, help="cluster directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (logs, segments)")
    return ap.parse_args(argv)


async def soak(args: argparse.Namespace, data_dir: str) -> int:
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    schedule = plan_faults(seed, args.duration, kinds, partitions=args.partitions)
    print(f"soak: seed {seed}, up to {len(schedule)} faults over {args.duration:.0f}s, kinds {','.join(kinds)}, "
          f"data dir {data_dir}")
    c = LocalCluster.create(data_dir, free_ports=True, fast=True,
                            overrides={"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    try:
        await c.up()
        rig = FaultRig(c, "soak", args.partitions)
        try:
            await rig.create_topic([[1 + (p + i) % 3 for i in range(3)] for p in range(args.partitions)])
            t0 = time.monotonic()
            res = await run_soak(rig, schedule, seed=seed, rate=args.rate, duration_s=args.duration)
            elapsed = time.monotonic() - t0
        finally:
            await rig.close()
    finally:
        c.destroy()
    print()
    for line in res.report.lines(limit=20):
        print(line)
    heal = res.heal_times_s
    print(f"run: {elapsed:.0f}s, {len(res.timeline)} faults, {res.report.acked} acked "
          f"({res.report.acked / max(elapsed, 1e-9):.0f}/s), {res.report.failed_definite} definite and "
          f"{res.report.failed_indeterminate} indeterminate failures")
    if heal:
        print(f"heal time after a fault: median {statistics.median(heal):.1f}s, max {max(heal):.1f}s")
    print(f"longest stretch without an acknowledgement: {res.longest_ack_gap_s:.1f}s")
    for u in res.unhealed:
        print(f"UNHEALED {u}")
    print(f"seed {seed}: " + ("PASS" if res.ok else "FAIL"))
    return 0 if res.ok else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = None
    data_dir = args.data_dir
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="minibroker-soak-")
        data_dir = os.path.join(tmp, "cluster")
    try:
        try:
            import uvloop
            return uvloop.run(soak(args, data_dir))
        except ImportError:  # pragma: no cover
            return asyncio.run(soak(args, data_dir))
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif args.keep:
            print(f"kept {data_dir}")


if __name__ == "__main__":
    sys.exit(main())
