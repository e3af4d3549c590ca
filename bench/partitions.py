"""Many partitions on 3 local brokers: fds, RSS and idle CPU per broker (issue 10).

    python bench/partitions.py --partitions 5000 --rf 3 [--write] [--idle-s 30]

Starts a 3-broker cluster in a temporary directory, creates one topic with
the partitions in one CreateTopics request, waits for every leader, then
(with --write) writes one record to every partition, and measures each
broker over --idle-s seconds of idleness: CPU% (utime+stime from /proc), RSS
and open file descriptors (/proc/PID/fd). Prints the soft fd limit too.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time

from minibroker.bench.partitions import cpu_s, fd_count as fds, rss_mib
from minibroker.client import Admin, Producer
from minibroker.testing.fixtures import start_cluster


async def run(c, args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    async with Admin(c.bootstrap) as admin:
        await admin.create_topic("many", num_partitions=args.partitions, replication_factor=args.rf, wait=False,
                                 if_not_exists=True)
        await admin.wait_for_leaders("many", timeout_ms=600_000)
    print(f"created {args.partitions} partitions (RF {args.rf}) with leaders in {time.monotonic() - t0:.1f} s")
    if args.write:
        t0 = time.monotonic()
        async with Producer(c.bootstrap, {"acks": "all", "linger.ms": 50}) as p:
            futs = [await p.send("many", b"x", partition=i) for i in range(args.partitions)]
            await asyncio.gather(*futs)
        print(f"wrote one record to each partition in {time.monotonic() - t0:.1f} s")
    pids = {b.node_id: c.pids[b.name] for b in c.layout.brokers}
    await asyncio.sleep(5)
    before = {b: cpu_s(p) for b, p in pids.items()}
    t0 = time.monotonic()
    await asyncio.sleep(args.idle_s)
    dt = time.monotonic() - t0
    for b, p in sorted(pids.items()):
        print(f"broker {b}: idle CPU {100 * (cpu_s(p) - before[b]) / dt:.1f}%  RSS {rss_mib(p):.0f} MiB  "
              f"fds {fds(p)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--idle-s", type=float, default=30)
    args = ap.parse_args()
    print(f"soft fd limit {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}")
    with tempfile.TemporaryDirectory(prefix="mb-parts-") as d:
        c = start_cluster(d + "/cluster", fast=False, proxied=False)
        try:
            asyncio.run(run(c, args))
        finally:
            c.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
