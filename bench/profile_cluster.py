"""cProfile of every broker of a real 3-broker cluster under one workload (issue 13).

    .venv/bin/python bench/profile_cluster.py --awaited 3000            # one record in flight
    .venv/bin/python bench/profile_cluster.py --batched 300000          # batched acks=all
    .venv/bin/python bench/profile_cluster.py --awaited 3000 --top 25 --keep /tmp/prof

Starts a local cluster (no fault proxy) whose brokers run under cProfile
(MB_CPROFILE_DIR), creates an RF=3 topic led by broker 1 (replicas 1,2,3),
runs the workload from this process (profiled too), stops the cluster
cleanly so each broker writes its profile, and prints the top entries by own
time for the leader, one follower and the client, with the CPU each used per
request from /proc. cProfile slows Python code about 2x: read the shares, not
the absolute times.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time

from minibroker.bench.partitions import cpu_s
from minibroker.bench.produce import produce_batched
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.testing.cluster import LocalCluster

TOPIC = "profiled"


async def workload(bootstrap: str, awaited: int, batched: int, prof: cProfile.Profile) -> int:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(TOPIC, -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
    if awaited:
        async with Producer(bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
            await p.partitions_for(TOPIC)
            for _ in range(200):
                await p.send_and_wait(TOPIC, b"a" * 100, partition=0)
            prof.enable()
            for _ in range(awaited):
                await p.send_and_wait(TOPIC, b"a" * 100, partition=0)
            prof.disable()
        return awaited
    prof.enable()
    acked, _, _ = await produce_batched(bootstrap, TOPIC, batched, 100,
                                        {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"})
    prof.disable()
    return acked


def top(stats: pstats.Stats, n: int) -> str:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(n)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:start + n + 1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--awaited", type=int, default=0, help="awaited single records (one in flight)")
    ap.add_argument("--batched", type=int, default=0, help="records of a batched acks=all run")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--keep", help="directory to keep the .prof files in")
    args = ap.parse_args()
    if not args.awaited and not args.batched:
        args.awaited = 3000
    with tempfile.TemporaryDirectory(prefix="minibroker-profile-") as tmp:
        prof_dir = args.keep or os.path.join(tmp, "prof")
        os.makedirs(prof_dir, exist_ok=True)
        os.environ["MB_CPROFILE_DIR"] = prof_dir
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        client = cProfile.Profile(time.thread_time)
        try:
            run_async(cluster.up())
            pids = {b: cluster.pids.get(f"broker-{b}") for b in (1, 2, 3)}
            before = {b: cpu_s(pid) for b, pid in pids.items() if pid}
            t0, c0 = time.perf_counter(), time.process_time()
            n = run_async(workload(cluster.bootstrap, args.awaited, args.batched, client))
            wall, ccpu = time.perf_counter() - t0, time.process_time() - c0
            after = {b: cpu_s(pid) for b, pid in pids.items() if pid}
        finally:
            cluster.down(timeout_s=30)
        what = f"{args.awaited} awaited records" if args.awaited else f"{args.batched} batched records"
        unit = 1 if args.awaited else 1000
        per = "request" if args.awaited else "1000 records"
        print(f"workload: {what} in {wall:.2f} s (cProfile on: slower than without)")
        print(f"CPU per {per}: client {ccpu / n * unit * 1e6:.0f} us, " + ", ".join(
            f"broker {b}{' (leader)' if b == 1 else ''} {(after[b] - before[b]) / n * unit * 1e6:.0f} us"
            for b in sorted(after)))
        for name in ("broker-1", "broker-2"):
            path = os.path.join(prof_dir, f"{name}.prof")
            if os.path.exists(path):
                role = "leader" if name == "broker-1" else "follower"
                print(f"\n== {name} ({role}), top {args.top} by own time")
                print(top(pstats.Stats(path), args.top))
        print(f"\n== client, top {args.top} by own time")
        print(top(pstats.Stats(client), args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
