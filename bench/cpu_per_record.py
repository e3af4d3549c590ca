"""CPU cost per record of produce and consume on a real 3-broker cluster.

Wall-clock rates on a shared machine measure the neighbours as much as the
code; CPU time does not (much). This starts a local 3-broker cluster (no
fault proxy), creates an RF=3 topic (min.insync.replicas=2), and reports,
for a batched acks=all produce of --records records of --size bytes and for
reading them all back:

* client CPU: this process's user+system time (the producer's send path and
  encoding; the consumer's decoding);
* broker CPU: the user+system time of the three broker processes together
  (the leader's validation and append, replication to two followers, the
  fetches), from /proc/<pid>/stat.

Both as microseconds per record. With --awaited N it sends N single records
one at a time (acks=all, as `minibroker bench`'s awaited figure) to a
partition led by broker 1 and prints each process's user and system CPU per
record: the client, the leader and the two followers. Run it against two
source trees to compare:

    .venv/bin/python bench/cpu_per_record.py
    .venv/bin/python bench/cpu_per_record.py --awaited 5000
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/cpu_per_record.py
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time

from minibroker.bench.produce import consume_all, produce_batched
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.testing.cluster import LocalCluster

_TICK = os.sysconf("SC_CLK_TCK")


def proc_user_sys_s(pid: int | None) -> tuple[float, float]:
    """User and system CPU seconds of process `pid` (from /proc), or of this process when None."""
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK      # utime, stime


def proc_cpu_s(pid: int) -> float:
    return sum(proc_user_sys_s(pid))


def self_cpu_s() -> float:
    return sum(proc_user_sys_s(None))


async def awaited(records: int, size: int, warm: int = 300) -> None:
    with tempfile.TemporaryDirectory(prefix="minibroker-cpu-") as tmp:
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        try:
            await cluster.up()
            procs: dict[str, int | None] = {"client": None, "leader (broker 1)": cluster.pids["broker-1"],
                                            "follower (broker 2)": cluster.pids["broker-2"],
                                            "follower (broker 3)": cluster.pids["broker-3"]}
            async with Admin(cluster.bootstrap) as admin:
                await admin.create_topic("awaited", -1, -1, {"min.insync.replicas": "2"}, assignments=[[1, 2, 3]])
            value = b"a" * size
            async with Producer(cluster.bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
                await p.partitions_for("awaited")
                for _ in range(warm):
                    await p.send_and_wait("awaited", value, partition=0)
                before = {k: proc_user_sys_s(pid) for k, pid in procs.items()}
                t0 = time.perf_counter()
                for _ in range(records):
                    await p.send_and_wait("awaited", value, partition=0)
                secs = time.perf_counter() - t0
                after = {k: proc_user_sys_s(pid) for k, pid in procs.items()}
        finally:
            cluster.destroy()
    print(f"{records:,} awaited records of {size} B, acks=all, RF=3, one in flight: {records / secs:,.0f} records/s")
    for k in procs:
        user, sys_ = ((a - b) / records * 1e6 for a, b in zip(after[k], before[k], strict=True))
        print(f"  {k}: {user + sys_:.0f} us/record ({user:.0f} user, {sys_:.0f} system)")


async def main(records: int, size: int, cfg: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="minibroker-cpu-") as tmp:
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False)
        try:
            await cluster.up()
            brokers = [pid for name, pid in cluster.pids.items() if name.startswith("broker") and pid]
            assert len(brokers) == 3, cluster.pids
            async with Admin(cluster.bootstrap) as admin:
                topic = f"cpu-{int(time.time())}"
                await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})

            def snap() -> tuple[float, float]:
                return self_cpu_s(), sum(proc_cpu_s(p) for p in brokers)
            c0, b0 = snap()
            acked, failed, secs = await produce_batched(cluster.bootstrap, topic, records, size, cfg)
            await asyncio.sleep(1)                    # followers finish replicating the tail
            c1, b1 = snap()
            n, csecs = await consume_all(cluster.bootstrap, topic, acked)
            c2, b2 = snap()
        finally:
            cluster.destroy()
    cfg_s = " ".join(f"{k}={v}" for k, v in cfg.items())
    print(f"{records:,} records of {size} B, acks=all, RF=3, {cfg_s}")
    print(f"produce: {acked:,} acked ({failed} failed) in {secs:.2f} s; "
          f"client {(c1 - c0) / acked * 1e6:.2f} us/record, brokers {(b1 - b0) / acked * 1e6:.2f} us/record")
    print(f"consume: {n:,} records in {csecs:.2f} s; client {(c2 - c1) / n * 1e6:.2f} us/record, "
          f"brokers {(b2 - b1) / n * 1e6:.2f} us/record")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--awaited", type=int, default=0, metavar="N", help="N single records one at a time instead")
    ap.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    cfg = {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"}
    cfg.update(dict(kv.split("=", 1) for kv in a.producer_property))
    if a.awaited:
        run_async(awaited(a.awaited, a.size))
    else:
        run_async(main(a.records, a.size, cfg))     # as `minibroker bench` runs: uvloop, the allocator thresholds
