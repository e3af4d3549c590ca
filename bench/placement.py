"""The awaited acks=all path under two placements of the same processes on this 2-core machine (issue 13).

    .venv/bin/python bench/placement.py                    # minibroker only
    .venv/bin/python bench/placement.py --ceiling ../shared/bench/replication_ceiling.py

Sends one record at a time with acks=all (as `minibroker bench`'s awaited figure) to an RF=3 topic led by
broker 1 of a local cluster (no fault proxy), in rounds of --records records, alternating two placements
of the client, the leader and the two followers:

    free     every process may run on either core (as everywhere else: the scheduler places them)
    split    one follower alone on core 1, the client, the leader and the other follower on core 0

and prints, per round, the p50 and each process's CPU per record (from /proc). Nothing else changes
between the rounds: the same processes, code and records. With --ceiling PATH the replication-ceiling
script's awaited case gets the same two placements (its processes found by their command lines), so the
two can be compared placement by placement.

A diagnostic, not a setting: minibroker never pins its processes. It measures how much of a process's CPU
per record is the cost of running cold (caches and TLBs left by the other processes, a migration to the
other core) rather than the work itself: split keeps one follower's caches its own between records.
Needs 2 cores or more.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from minibroker.bench.partitions import cpu_s
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.testing.cluster import LocalCluster

TOPIC = "placement"
ROLES = ("client", "leader", "follower 1", "follower 2")
PLACEMENTS: dict[str, dict[str, set[int]]] = {
    "free": {r: {0, 1} for r in ROLES},
    "split": {"client": {0}, "leader": {0}, "follower 1": {1}, "follower 2": {0}},
}


def place(pids: dict[str, int], placement: dict[str, set[int]]) -> None:
    """Every thread of each role's process onto its cores."""
    for role, pid in pids.items():
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), placement[role])
            except ProcessLookupError:
                pass


async def awaited_round(p: Producer, n: int) -> float:
    """n awaited records; their p50 in microseconds."""
    lat = []
    value = b"a" * 100
    for _ in range(n):
        t = time.perf_counter()
        await p.send_and_wait(TOPIC, value, partition=0)
        lat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1e6


async def minibroker_rounds(rounds: int, records: int) -> list[tuple[str, float, dict[str, float]]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="minibroker-placement-") as tmp:
        cluster = LocalCluster.create(os.path.join(tmp, "cluster"), free_ports=True, proxied=False)
        try:
            await cluster.up()
            async with Admin(cluster.bootstrap) as admin:
                await admin.create_topic(TOPIC, -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
            async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
                await p.partitions_for(TOPIC)
                await awaited_round(p, 300)
                pids = {"client": os.getpid(), "leader": cluster.pids["broker-1"],
                        "follower 1": cluster.pids["broker-2"], "follower 2": cluster.pids["broker-3"]}
                for i in range(rounds):
                    name = "free" if i % 2 == 0 else "split"
                    place(pids, PLACEMENTS[name])
                    before = {r: cpu_s(pid) for r, pid in pids.items()}
                    p50 = await awaited_round(p, records)
                    cpu = {r: (cpu_s(pid) - before[r]) / records * 1e6 for r, pid in pids.items()}
                    out.append((name, p50, cpu))
                place(pids, PLACEMENTS["free"])
        finally:
            cluster.destroy()
    return out


def _ceiling_pids(root: int) -> dict[str, int]:
    """The ceiling's processes by role: its leader and followers are children of `root`, the producer."""
    found = {"client": root}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if ppid != root:
            continue
        if b"leader" in argv:
            found["leader"] = int(entry)
        elif b"follower" in argv:
            fid = argv[argv.index(b"--fid") + 1].decode() if b"--fid" in argv else "1"
            found[f"follower {fid}"] = int(entry)
    return found


def ceiling_round(path: str, placement: dict[str, set[int]], seconds: float) -> tuple[float, dict[str, float]]:
    """One run of the ceiling's awaited case with its processes placed as they start."""
    proc = subprocess.Popen([sys.executable, path, "all", "--cases", "0", "--runs", "1", "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    done = threading.Event()

    def keep_placing() -> None:
        placed: set[int] = set()
        while not done.is_set():
            pids = _ceiling_pids(proc.pid)
            fresh = {r: pid for r, pid in pids.items() if pid not in placed}
            if fresh:
                place(fresh, placement)
                placed |= set(fresh.values())
            done.wait(0.005)
    placer = threading.Thread(target=keep_placing, daemon=True)
    placer.start()
    try:
        out, _ = proc.communicate(timeout=seconds + 60)
    finally:
        done.set()
        placer.join()
    line = next(json.loads(x) for x in out.splitlines() if x.startswith("{"))
    return line["p50_us"], {"client": line["producer_cpu_us_per_req"], "leader": line["leader_cpu_us_per_req"],
                            "follower (mean)": line["follower_cpu_us_per_req"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="rounds, alternating free and split")
    ap.add_argument("--records", type=int, default=3000, help="awaited records per round")
    ap.add_argument("--ceiling", metavar="PATH", help="also the replication-ceiling script at PATH")
    ap.add_argument("--ceiling-seconds", type=float, default=3.0)
    args = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        print("placement needs 2 cores or more", file=sys.stderr)
        return 2
    for name, p50, cpu in run_async(minibroker_rounds(args.rounds, args.records)):
        per = ", ".join(f"{r} {v:.0f}" for r, v in cpu.items())
        print(f"minibroker {name:5s}: p50 {p50:.0f} us; CPU per record (us): {per}", flush=True)
    if args.ceiling:
        for i in range(args.rounds):
            name = "free" if i % 2 == 0 else "split"
            p50, cpu = ceiling_round(args.ceiling, PLACEMENTS[name], args.ceiling_seconds)
            per = ", ".join(f"{r} {v:.0f}" for r, v in cpu.items())
            print(f"ceiling    {name:5s}: p50 {p50:.0f} us; CPU per record (us): {per}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
