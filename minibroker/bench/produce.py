"""`minibroker bench produce`: the three classic figures of one run, on one RF=3 topic.

With acks=all and 100-byte records:
  1. batched load: records/s and MB/s of a producer sending as fast as the
     buffer allows (linger.ms and batch.size as given);
  2. awaited single records: one record in flight at a time, p50/p99 latency,
     and the CPU each process spent per record (this producer, the leader, the
     followers: one awaited record's latency is those processes' work in turn);
  3. consumption: reading everything back from the beginning, records/s.
Their three lines are parsed by other tools: their format does not change.
The cluster, the runs and the other figures are runner.py's.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from minibroker.bench.partitions import cpu_s
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.consumer import Consumer
from minibroker.client.producer import Producer
from minibroker.client.types import TopicPartition
from minibroker.errors import KafkaError


@dataclass
class AwaitedCpu:
    """The CPU (user + system) each process spent on the awaited run, per record, in us."""
    client_us: float
    leader: int | None = None                          # the partition's leader when the run began
    brokers_us: dict[int, float] = field(default_factory=dict)     # node id -> us per record

    @property
    def leader_us(self) -> float | None:
        return self.brokers_us.get(self.leader) if self.leader is not None else None

    @property
    def followers_us(self) -> list[float]:
        return [us for b, us in sorted(self.brokers_us.items()) if b != self.leader]

    def line(self) -> str:
        parts = [f"client {self.client_us:,.0f} us"]
        if self.leader_us is not None:
            parts.append(f"leader (broker {self.leader}) {self.leader_us:,.0f} us")
            if self.followers_us:
                parts.append("followers " + " and ".join(f"{us:,.0f}" for us in self.followers_us) + " us")
        return "awaited CPU per record: " + ", ".join(parts)


@dataclass
class BenchResult:
    batched_records: int = 0
    batched_failed: int = 0
    batched_seconds: float = 0.0
    awaited: int = 0
    latencies_ms: list[float] | None = None
    awaited_cpu: AwaitedCpu | None = None
    consumed: int = 0
    consume_seconds: float = 0.0

    @property
    def batched_rate(self) -> float:
        return self.batched_records / self.batched_seconds if self.batched_seconds else 0.0

    @property
    def consume_rate(self) -> float:
        return self.consumed / self.consume_seconds if self.consume_seconds else 0.0

    def figures(self, size: int = 100) -> dict[str, float]:
        """The run's figures by key (figures.py), leaving out what was not measured."""
        out: dict[str, float] = {}
        if self.batched_seconds:
            out["batched_rate"] = self.batched_rate
            out["batched_mb_s"] = self.batched_rate * size / 1e6
        if self.latencies_ms:
            lat = self.latencies_ms
            out["awaited_rate"] = len(lat) / (sum(lat) / 1000)
            out["awaited_p50_ms"] = statistics.median(lat)
            out["awaited_p99_ms"] = pct(lat, 0.99)
        cpu = self.awaited_cpu
        if cpu is not None:
            out["awaited_cpu_client_us"] = cpu.client_us
            if cpu.leader_us is not None:
                out["awaited_cpu_leader_us"] = cpu.leader_us
                if cpu.followers_us:
                    out["awaited_cpu_follower_us"] = statistics.fmean(cpu.followers_us)     # as the ceiling's
        if self.consume_seconds:
            out["consume_rate"] = self.consume_rate
        return out


async def produce_batched(bootstrap: str, topic: str, count: int, size: int,
                          cfg: dict[str, Any]) -> tuple[int, int, float]:
    acked = failed = 0
    first_error: list[KafkaError] = []

    def done(batch: ProducerBatch, base: int, err: KafkaError | None) -> None:
        nonlocal acked, failed
        if err is None:
            acked += len(batch)
        else:
            failed += len(batch)
            if not first_error:
                first_error.append(err)

    async with Producer(bootstrap, {"acks": "all", **cfg}) as p:
        p.on_batch_done = done
        await p.partitions_for(topic)
        value = b"v" * size
        send = p.send
        start = time.perf_counter()
        for _ in range(count):
            await send(topic, value)
        await p.flush()
        elapsed = time.perf_counter() - start
    if first_error:
        print(f"  first error: {first_error[0]}")
    return acked, failed, elapsed


async def produce_awaited(bootstrap: str, topic: str, count: int, size: int,
                          broker_pids: Mapping[int, int] | None = None) -> tuple[list[float], AwaitedCpu]:
    """`count` records to partition 0 of `topic`, one at a time: each one's latency (ms) and the CPU this
    process and each broker in `broker_pids` (node id -> pid, on this host) spent over them."""
    lat: list[float] = []
    async with Producer(bootstrap, {"acks": "all", "linger.ms": "0"}) as p:
        await p.partitions_for(topic)
        value = b"a" * size
        for _ in range(min(50, count)):                  # warm up connections
            await p.send_and_wait(topic, value, partition=0)
        leader = p.net.cache.leader_id(TopicPartition(topic, 0))
        pids = dict(broker_pids or {})
        before = {b: cpu_s(pid) for b, pid in pids.items()}
        client_before = time.process_time()
        for _ in range(count):
            t0 = time.perf_counter()
            await p.send_and_wait(topic, value, partition=0)
            lat.append((time.perf_counter() - t0) * 1000)
        client_s = time.process_time() - client_before
        brokers = {b: (cpu_s(pid) - before[b]) * 1e6 / max(count, 1) for b, pid in pids.items()}
    return lat, AwaitedCpu(client_s * 1e6 / max(count, 1), leader, brokers)


async def consume_all(bootstrap: str, topic: str, expected: int) -> tuple[int, float]:
    async with Consumer(bootstrap, {"auto.offset.reset": "earliest", "max.poll.records": "100000",
                                    "fetch.max.wait.ms": "100"}) as c:
        await c.assign_topic(topic)
        n = 0
        start = time.perf_counter()
        deadline = start + 300
        while n < expected and time.perf_counter() < deadline:
            n += len(await c.poll(timeout_ms=1000))
        return n, time.perf_counter() - start


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


async def run_classic(bootstrap: str, topic: str, *, count: int, size: int, awaited: int,
                      producer_cfg: dict[str, Any], out: Callable[[str], None],
                      broker_pids: Mapping[int, int] | None = None) -> BenchResult:
    """Batched, awaited, consume on `topic` (created by the caller), printing the three lines, and the
    awaited run's CPU per record (the brokers' when `broker_pids` names them)."""
    res = BenchResult()
    acked, failed, secs = await produce_batched(bootstrap, topic, count, size, producer_cfg)
    res.batched_records, res.batched_failed, res.batched_seconds = acked, failed, secs
    cfg_s = ", ".join(f"{k}={v}" for k, v in producer_cfg.items())
    out(f"batched ({cfg_s}): {acked:,} records in {secs:.2f} s = {res.batched_rate:,.0f} records/s, "
        f"{res.batched_rate * size / 1e6:.1f} MB/s" + (f" ({failed} failed)" if failed else ""))

    if awaited:
        lat, cpu = await produce_awaited(bootstrap, topic, awaited, size, broker_pids)
        res.awaited, res.latencies_ms, res.awaited_cpu = len(lat), lat, cpu
        out(f"awaited single records: {len(lat):,} records, {len(lat) / (sum(lat) / 1000):,.0f} records/s, "
            f"p50 {statistics.median(lat):.3f} ms, p99 {pct(lat, 0.99):.3f} ms")
        out(cpu.line())

    total = acked + res.awaited + min(50, awaited)
    n, secs = await consume_all(bootstrap, topic, total)
    res.consumed, res.consume_seconds = n, secs
    out(f"consume from the beginning: {n:,} records in {secs:.2f} s = {res.consume_rate:,.0f} records/s")
    return res
