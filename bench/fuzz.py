"""Long frame-fuzzing run against a local cluster (issue 10).

    python bench/fuzz.py --frames 1000000 [--seed 7] [--concurrency 24]

Starts a 3-broker cluster in a temporary directory, measures a probe client's
latency (ApiVersions + an acks=all produce on its own connection) for a
while, then fuzzes every broker with seeded hostile frames
(minibroker.testing.fuzz) from `--workers` separate processes (so the
fuzzer's own CPU use does not sit in the probe's event loop) while the probe
keeps running, and prints frames sent, connections, responses, crashes
(UNKNOWN_SERVER_ERROR answers or dead processes) and the probe's p50/p99/max
before and during the run.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import statistics
import sys
import tempfile
import time

from minibroker.client import Admin, Producer
from minibroker.net.connection import Connection
from minibroker.protocol.api import ApiKey
from minibroker.testing.fixtures import start_cluster
from minibroker.testing.fuzz import FuzzStats, fuzz_connection


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def fuzz_worker(brokers: list[tuple[str, int]], seed: int, frames: int, concurrency: int, burst: int) -> FuzzStats:
    """One fuzzing process: `frames` frames over connections to every broker in turn."""
    return asyncio.run(_fuzz(brokers, seed, frames, concurrency, burst))


async def _fuzz(brokers: list[tuple[str, int]], seed: int, frames: int, concurrency: int, burst: int) -> FuzzStats:
    rng = random.Random(seed)
    stats = FuzzStats()
    pending: set[asyncio.Task] = set()
    i = 0

    async def one(host: str, port: int, r: random.Random) -> None:
        try:
            await fuzz_connection(host, port, r, stats, burst=burst)
        except OSError:
            stats.resets += 1
    while stats.frames < frames:
        while len(pending) < concurrency and stats.frames < frames:
            host, port = brokers[i % len(brokers)]
            t = asyncio.ensure_future(one(host, port, random.Random(rng.random())))
            pending.add(t)
            t.add_done_callback(pending.discard)
            i += 1
        await asyncio.sleep(0.005)
    await asyncio.gather(*pending, return_exceptions=True)
    return stats


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="mb-fuzz-") as d:
        c = start_cluster(d + "/cluster")
        try:
            return await run(c, args)
        finally:
            c.destroy()


async def run(c, args: argparse.Namespace) -> int:
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("fuzz", assignments=[[1, 2, 3]])
        await admin.create_topic("probe", assignments=[[2, 3, 1]])
    spec = c.layout.broker(1)
    conn = await Connection.open(spec.host, spec.port, client_id="probe")
    phase: dict[str, list[float]] = {"before": [], "during": []}
    current = ["before"]
    stop = asyncio.Event()
    async with Producer(c.bootstrap, {"acks": "all", "linger.ms": 0}) as producer:
        async def probe() -> None:
            loop = asyncio.get_running_loop()
            while not stop.is_set():
                t0 = loop.time()
                await conn.request(ApiKey.API_VERSIONS, {})
                await producer.send_and_wait("probe", b"p")
                phase[current[0]].append(loop.time() - t0)
                await asyncio.sleep(0.02)
        ptask = asyncio.ensure_future(probe())
        await asyncio.sleep(args.baseline_s)
        current[0] = "during"
        t0 = time.monotonic()
        brokers = [(c.layout.broker(b).host, c.layout.broker(b).port) for b in c.broker_ids]
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.workers) as pool:
            per = args.frames // args.workers + 1
            results = pool.starmap_async(fuzz_worker, [(brokers, args.seed * 1000 + w, per, args.concurrency,
                                                        args.burst) for w in range(args.workers)])
            while not results.ready():
                await asyncio.sleep(0.2)
            parts = results.get()
        stats = FuzzStats()
        for st in parts:
            stats.frames += st.frames
            stats.connections += st.connections
            stats.responses += st.responses
            stats.crashes += st.crashes
            stats.resets += st.resets
            for k, v in st.errors.items():
                stats.errors[k] = stats.errors.get(k, 0) + v
        elapsed = time.monotonic() - t0
        stop.set()
        await ptask
    conn.close()
    dead = [n for n in c.process_names() if not c._alive(n)]
    b, du = phase["before"], phase["during"]
    print(f"frames {stats.frames}  connections {stats.connections}  responses {stats.responses}  "
          f"resets {stats.resets}  crashes {stats.crashes}  dead processes {dead or 'none'}  ({elapsed:.0f} s, "
          f"{stats.frames / elapsed:.0f} frames/s)")
    print(f"probe latency ms before: p50 {pct(b, .5):.1f} p99 {pct(b, .99):.1f} max {max(b) * 1000:.1f} (n={len(b)})")
    print(f"probe latency ms during: p50 {pct(du, .5):.1f} p99 {pct(du, .99):.1f} max {max(du) * 1000:.1f} "
          f"(n={len(du)})  mean {statistics.mean(du) * 1000:.1f}")
    print("error codes answered:", dict(sorted(stats.errors.items())))
    return 1 if stats.crashes or dead else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--concurrency", type=int, default=8, help="connections in flight per worker")
    ap.add_argument("--workers", type=int, default=2, help="fuzzing processes")
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--baseline-s", type=float, default=10.0)
    sys.exit(asyncio.run(main(ap.parse_args())))
