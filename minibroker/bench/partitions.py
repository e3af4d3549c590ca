"""Many partitions: what idle partitions cost each broker, and batched load over all of them.

Creates one topic of N partitions, RF=3, in one CreateTopics request, waits for
every leader and a few seconds more to settle, then over `idle_s` seconds of
idleness measures each broker process: CPU as a percentage of one core
(utime+stime from /proc/PID/stat), RSS (VmRSS) and open file descriptors. The ISR
is stable when no ISR changed over the window: every partition's ISR reads the
same before and after (Metadata), and the brokers' ISR shrink and expand counters
(their metrics endpoint, read only before and after) did not move. Then (runner.py)
the batched producer writes to one new partition beside the N idle ones, and to all
N partitions for the aggregate rate: once in runs of
one full batch per partition in turn (as Kafka's sticky partitioner spreads keyless records),
once round robin (one record per partition in turn, the worst case for batching).
"""
from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from minibroker.client.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, ProducerBatch
from minibroker.client.admin import Admin
from minibroker.client.producer import Producer
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster

SETTLE_S = 5.0
ISR_COUNTERS = ("kafka_server_replicamanager_isrshrinks", "kafka_server_replicamanager_isrexpands")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")        # utime + stime


def runqueue_wait(pid: int | str) -> tuple[float, int]:
    """Seconds the process's main thread (its event loop) has waited runnable for a core, and the
    times it was put on one (/proc/PID/schedstat; "self" for this process). Their ratio is the mean
    wait per wake-up: on a machine with fewer cores than busy processes, the queueing every hop pays."""
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        _run_ns, wait_ns, slices = f.read().split()
    return int(wait_ns) / 1e9, int(slices)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass(frozen=True)
class BrokerIdle:
    node_id: int
    cpu_pct: float
    rss_mib: float
    fds: int


@dataclass
class IdleResult:
    partitions: int
    create_seconds: float
    idle_seconds: float
    brokers: list[BrokerIdle]
    isr_changed_partitions: int
    isr_counter_delta: int | None          # None: no metrics endpoint to read

    @property
    def isr_stable(self) -> bool:
        return self.isr_changed_partitions == 0 and not self.isr_counter_delta


def isr_counter_total(text: str) -> int:
    """The sum of the ISR shrink and expand counters in one metrics page."""
    total = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.split("{", 1)[0] in ISR_COUNTERS and rest:
            total += int(float(rest.split()[0]))
    return total


def _read_isr_counters(urls: list[str]) -> int | None:
    if not urls:
        return None
    total = 0
    for url in urls:
        with urllib.request.urlopen(url, timeout=30) as resp:       # a local broker's endpoint
            total += isr_counter_total(resp.read().decode())
    return total


async def _isrs(admin: Admin, topic: str) -> dict[int, tuple[int, ...]]:
    (td,) = await admin.describe_topics([topic])
    return {p.partition: tuple(sorted(p.isr)) for p in td.partitions}


async def idle_partitions(cluster: LocalCluster, admin: Admin, topic: str, n: int, idle_s: float) -> IdleResult:
    t0 = time.perf_counter()
    await admin.create_topic(topic, n, 3, {"min.insync.replicas": "2"}, wait=False)
    await admin.wait_for_leaders(topic, timeout_ms=600_000)
    created = time.perf_counter() - t0
    await asyncio.sleep(SETTLE_S)
    pids = {b.node_id: cluster.pids[b.name] for b in cluster.layout.brokers}
    live = {b: p for b, p in pids.items() if p}
    urls = [url for name, url in cluster.layout.metrics_urls() if name.startswith("broker")]
    isr_before = await _isrs(admin, topic)
    counters_before = await asyncio.to_thread(_read_isr_counters, urls)
    cpu_before = {b: cpu_s(p) for b, p in live.items()}
    start = time.perf_counter()
    await asyncio.sleep(idle_s)
    cpu_after = {b: cpu_s(p) for b, p in live.items()}
    dt = time.perf_counter() - start
    brokers = [BrokerIdle(b, 100 * (cpu_after[b] - cpu_before[b]) / dt, rss_mib(p), fd_count(p))
               for b, p in sorted(live.items())]
    counters_after = await asyncio.to_thread(_read_isr_counters, urls)
    isr_after = await _isrs(admin, topic)
    changed = sum(1 for p, isr in isr_before.items() if isr_after.get(p) != isr)
    delta = None if counters_before is None or counters_after is None else counters_after - counters_before
    return IdleResult(n, created, dt, brokers, changed, delta)


def records_per_batch(batch_size: int, size: int) -> int:
    """How many `size`-byte unkeyed records fill one producer batch of `batch_size` (the
    producer's own size estimate, so the run's last record closes the batch)."""
    return max(1, (batch_size - BATCH_OVERHEAD) // (RECORD_OVERHEAD + size))


async def produce_spread(bootstrap: str, topic: str, count: int, size: int, cfg: dict[str, Any],
                         run: int = 1) -> tuple[int, int, float]:
    """The batched run of produce.py over every partition: record i goes to partition
    (i // run) mod N. run=1 is round robin (one record per partition in turn: batches of a
    few records); run=records_per_batch loads the partitions in turn one full batch at a
    time, the way Kafka's sticky partitioner (KIP-480) spreads keyless records."""
    acked = failed = 0

    def done(batch: ProducerBatch, _base: int, err: KafkaError | None) -> None:
        nonlocal acked, failed
        if err is None:
            acked += len(batch)
        else:
            failed += len(batch)

    async with Producer(bootstrap, {"acks": "all", **cfg}) as p:
        p.on_batch_done = done
        n = await p.partitions_for(topic)
        value = b"m" * size
        send = p.send
        run = max(1, run)
        start = time.perf_counter()
        for first in range(0, count, run):      # the partition is chosen per run, not per record
            part = (first // run) % n
            for _ in range(min(run, count - first)):
                await send(topic, value, partition=part)
        await p.flush()
        elapsed = time.perf_counter() - start
    return acked, failed, elapsed
