"""Where each process's CPU goes on the awaited acks=all path, by binary (issue 13).

    .venv/bin/python bench/perf_split.py                         # minibroker, 8 s of awaited records
    .venv/bin/python bench/perf_split.py --ceiling ../shared/bench/replication_ceiling.py   # and the ceiling's

Starts a local 3-broker cluster (no fault proxy), creates an RF=3 topic led by broker 1 and sends one
record at a time with acks=all (as `minibroker bench`'s awaited line) while `perf record` samples the
leader and both followers at --frequency Hz. Each process's samples are then split by the binary they
ran in: the CPython interpreter (libpython), the kernel (syscalls, TCP over loopback, the scheduler),
the event loop (uvloop), libc, and the C extensions (msgpack, minibroker's _speedups, crc32c...).
Printed as microseconds of CPU per record (the process's CPU time from /proc, shared out by the
samples). With --ceiling PATH the replication-ceiling script's leader and followers run as processes
of their own and get the same treatment, driven by the script's own awaited producer, so the two
splits can be read side by side: where minibroker spends more than the ceiling, and in which binary.

cProfile (bench/profile_cluster.py) says which Python functions run; this says whether the time is
Python at all. Needs Debian's linux-perf and the right to trace the processes (root).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from minibroker.bench.partitions import cpu_s
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.testing.cluster import LocalCluster

TOPIC = "perf-split"
WARM_RECORDS = 300
CATEGORIES = ("CPython", "kernel", "event loop", "libc", "C extensions")
_REPORT_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S.*?)\s*$")


def category(dso: str) -> str:
    """The binary a sample ran in, as one of CATEGORIES."""
    if dso.startswith("[kernel") or dso in ("[vdso]", "[unknown]"):
        return "kernel"
    if dso.startswith("libpython") or dso.startswith("python3"):
        return "CPython"
    if dso.startswith("loop.cpython"):
        return "event loop"
    if dso.startswith("libc.") or dso.startswith("libm."):
        return "libc"
    return "C extensions"


def dso_shares(data: str) -> dict[str, float]:
    """The share (0-1) of `data`'s samples in each category, from `perf report --sort dso`."""
    out = subprocess.run(["perf", "report", "-i", data, "--sort", "dso", "--stdio", "--no-children", "-q"],
                         capture_output=True, text=True, check=True).stdout
    shares = dict.fromkeys(CATEGORIES, 0.0)
    for line in out.splitlines():
        m = _REPORT_LINE.match(line)
        if m:
            shares[category(m.group(2))] += float(m.group(1)) / 100
    return shares


@dataclass
class Split:
    name: str
    cpu_us: float                       # CPU per record (from /proc)
    shares: dict[str, float]

    def line(self) -> str:
        parts = ", ".join(f"{c} {self.cpu_us * self.shares[c]:.0f} ({100 * self.shares[c]:.0f} %)"
                          for c in CATEGORIES)
        return f"  {self.name}: {self.cpu_us:.0f} us/record = {parts}"


async def sampled(pids: dict[str, int], seconds: float, frequency: int, out_dir: str,
                  drive: Callable[[Callable[[], bool]], Awaitable[int]]) -> tuple[int, float, list[Split]]:
    """`drive` sends records until told to stop, while perf samples each of `pids` for `seconds`."""
    perfs = {name: subprocess.Popen(["perf", "record", "-q", "-F", str(frequency), "-p", str(pid),
                                     "-o", os.path.join(out_dir, f"{name}.data"), "--", "sleep", str(seconds)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for name, pid in pids.items()}
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    t0 = time.perf_counter()
    records = await drive(lambda: any(p.poll() is None for p in perfs.values()))
    secs = time.perf_counter() - t0
    after = {name: cpu_s(pid) for name, pid in pids.items()}
    for name, p in perfs.items():
        if p.wait() != 0:
            raise RuntimeError(f"perf record on {name} failed (exit {p.returncode}): is linux-perf installed, "
                               "and may this user trace the process?")
    splits = [Split(name, (after[name] - before[name]) / max(records, 1) * 1e6,
                    dso_shares(os.path.join(out_dir, f"{name}.data"))) for name in pids]
    return records, secs, splits


async def minibroker_split(seconds: float, frequency: int, tmp: str) -> tuple[int, float, list[Split]]:
    cluster = LocalCluster.create(os.path.join(tmp, "cluster"), free_ports=True, proxied=False)
    try:
        await cluster.up()
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_topic(TOPIC, -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
        value = b"a" * 100
        async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
            await p.partitions_for(TOPIC)
            for _ in range(WARM_RECORDS):
                await p.send_and_wait(TOPIC, value, partition=0)

            async def drive(running: Callable[[], bool]) -> int:
                n = 0
                while running():
                    await p.send_and_wait(TOPIC, value, partition=0)
                    n += 1
                return n
            pids = {"leader (broker 1)": cluster.pids["broker-1"], "follower (broker 2)": cluster.pids["broker-2"],
                    "follower (broker 3)": cluster.pids["broker-3"]}
            return await sampled({k: v for k, v in pids.items() if v}, seconds, frequency, tmp, drive)
    finally:
        cluster.destroy()


def ceiling_split(path: str, seconds: float, frequency: int, tmp: str) -> tuple[int, float, list[Split]]:
    """The ceiling script's own leader and followers, driven by its own awaited producer (1 record, 1 in flight)."""
    spec = importlib.util.spec_from_file_location("replication_ceiling", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    port = mod.free_port()
    logdir = os.path.join(tmp, "ceiling")
    os.makedirs(logdir)
    common = ["--port", str(port), "--logdir", logdir, "--fsync", "0", "--max-seconds", str(seconds + 60)]
    procs: list[subprocess.Popen[str]] = []
    try:
        for args in (["leader"], ["follower", "--fid", "1"], ["follower", "--fid", "2"]):
            procs.append(subprocess.Popen([sys.executable, path, *args, *common], stdout=subprocess.PIPE, text=True))
            assert procs[-1].stdout is not None
            if procs[-1].stdout.readline().strip() != "READY":
                raise SystemExit(f"the ceiling's {args[0]} did not start")
        pids = {"leader": procs[0].pid, "follower 1": procs[1].pid, "follower 2": procs[2].pid}

        async def run() -> tuple[int, float, list[Split]]:
            async def drive(running: Callable[[], bool]) -> int:
                # the script's producer: a 0.5 s warm-up, then `seconds` measured; perf samples all of it
                r = await mod.produce(port, 1, 1, seconds)
                return int(r["req_s"] * (seconds + 0.5))
            return await sampled(pids, seconds + 0.5, frequency, tmp, drive)
        return run_async(run())
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="how long perf samples")
    ap.add_argument("--frequency", type=int, default=2000, help="samples per second per process")
    ap.add_argument("--ceiling", metavar="PATH", help="also split the replication-ceiling script at PATH")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="minibroker-perf-split-") as tmp:
        records, secs, splits = run_async(minibroker_split(args.seconds, args.frequency, tmp))
        print(f"minibroker: {records:,} awaited records in {secs:.1f} s ({records / secs:,.0f} records/s)")
        for s in splits:
            print(s.line())
        if args.ceiling:
            records, secs, splits = ceiling_split(args.ceiling, args.seconds, args.frequency, tmp)
            print(f"ceiling: about {records:,} awaited records in {secs:.1f} s ({records / secs:,.0f} records/s)")
            for s in splits:
                print(s.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
