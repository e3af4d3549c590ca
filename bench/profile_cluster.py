"""cProfile of every broker of a real 3-broker cluster under one workload (issue 13).

    .venv/bin/python bench/profile_cluster.py --awaited 3000            # one record in flight
    .venv/bin/python bench/profile_cluster.py --batched 300000          # batched acks=all
    .venv/bin/python bench/profile_cluster.py --awaited 3000 --top 25 --keep /tmp/prof
    .venv/bin/python bench/profile_cluster.py --idle-partitions 1000 --seconds 20   # a window of idleness
    .venv/bin/python bench/profile_cluster.py --awaited 3000 --clock cpu            # CPU time, not wall time

Starts a local cluster (no fault proxy) whose brokers run under cProfile
(MB_CPROFILE_DIR), creates an RF=3 topic led by broker 1 (replicas 1,2,3),
runs the workload from this process (profiled too), stops the cluster
cleanly so each broker writes its profile, and prints the top entries by own
time for the leader, one follower and the client, with the CPU each used per
request from /proc. cProfile slows Python code about 2x: read the shares, not
the absolute times. With --idle-partitions the brokers' profiles cover only a
window of idleness (cut by SIGUSR1, see minibroker/broker/main.py) after the
partitions settled. The wall clock (the default) charges a socket write that
wakes a peer on the same core with the peer's run; --clock cpu does not, but
inflates every call.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import signal
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


IDLE_SETTLE_S = 20.0


def idle(args: argparse.Namespace) -> int:
    """Create the partitions, let them settle, then profile every broker over one window of idleness."""
    with tempfile.TemporaryDirectory(prefix="minibroker-profile-") as tmp:
        prof_dir = args.keep or os.path.join(tmp, "prof")
        os.makedirs(prof_dir, exist_ok=True)
        os.environ["MB_CPROFILE_DIR"] = prof_dir
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        try:
            run_async(cluster.up())

            async def create() -> None:
                async with Admin(cluster.bootstrap) as admin:
                    await admin.create_topic(TOPIC, args.idle_partitions, 3, {"min.insync.replicas": "2"},
                                             wait=False)
                    await admin.wait_for_leaders(TOPIC, timeout_ms=600_000)
            run_async(create())
            time.sleep(IDLE_SETTLE_S)            # the workload here is time itself: nothing happens in it
            pids = {b: cluster.pids[f"broker-{b}"] for b in (1, 2, 3)}
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR1)     # the window starts: broker-N.prof.1 is the set-up
            before = {b: cpu_s(pid) for b, pid in pids.items()}
            time.sleep(args.seconds)             # the idle window being profiled
            after = {b: cpu_s(pid) for b, pid in pids.items()}
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR1)     # the window ends: broker-N.prof.2
            paths = {b: os.path.join(prof_dir, f"broker-{b}.prof.2") for b in pids}
            deadline = time.monotonic() + 30
            while not all(os.path.exists(p) for p in paths.values()) and time.monotonic() < deadline:
                time.sleep(0.1)                  # each broker writes its window at its next bytecode
        finally:
            cluster.down(timeout_s=30)
        print(f"{args.idle_partitions} idle partitions, RF=3, profiled over {args.seconds:.0f} s after "
              f"{IDLE_SETTLE_S:.0f} s to settle; CPU (profiled, so higher than without): " + ", ".join(
                  f"broker {b} {100 * (after[b] - before[b]) / args.seconds:.1f}%" for b in sorted(pids)))
        for b, path in sorted(paths.items()):
            if os.path.exists(path):
                print(f"\n== broker-{b} (leads a third, follows two thirds), top {args.top} by own time")
                print(top(pstats.Stats(path), args.top))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--awaited", type=int, default=0, help="awaited single records (one in flight)")
    ap.add_argument("--batched", type=int, default=0, help="records of a batched acks=all run")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--keep", help="directory to keep the .prof files in")
    ap.add_argument("--idle-partitions", type=int, default=0, help="profile this many idle RF=3 partitions")
    ap.add_argument("--seconds", type=float, default=20.0, help="the idle window (with --idle-partitions)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = ap.parse_args()
    if args.clock == "cpu":
        os.environ["MB_CPROFILE_CLOCK"] = "cpu"
    if args.idle_partitions:
        return idle(args)
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
