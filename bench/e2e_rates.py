"""End-to-end latency at several offered rates on one local cluster (issue 13): where the
5 ms p99 holds, and where the paced producer or the consumer saturates its process.

    .venv/bin/python bench/e2e_rates.py --rates 10000,50000,100000,200000,330000 --seconds 4
    .venv/bin/python bench/e2e_rates.py --rates 100000,300000,500000 --rtt   # and the producer's round trips

Each rate gets a new RF=3 topic led by broker 1 and runs `minibroker.bench.e2e.end_to_end`
(the same measurement as `minibroker bench produce`'s end-to-end line: a paced acks=all
producer in this process and a consumer in one of its own). Prints p50 / p90 / p99 / max and
the CPU the producer, the consumer and each broker used, as % of a core (the consumer's over
the sending and draining only; the others' over the whole rate, start-up included). Each rate's topic is
deleted after it, so later rates do not compete with the kernel writing earlier data back.

--rtt also times every Produce request of the paced producer, from the moment its batches
are drained to its answer (the acks=all round trip: the leader's append, the followers'
fetches, the HW move), and prints its p50 / p90 / p99 and the records per request. It does
so by wrapping the producer's private `_write` and `_answered`: an instrument of this script only.
"""
from __future__ import annotations

import argparse
import tempfile
import time

from minibroker.bench.e2e import end_to_end
from minibroker.bench.runner import BENCH_BROKER_CONFIGS, E2E_TOPIC_CONFIGS
from minibroker.client.producer import Producer
from minibroker.bench.partitions import cpu_s, runqueue_wait
from minibroker.cli.common import run_async
from minibroker.client.admin import Admin
from minibroker.testing.cluster import LocalCluster


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def time_requests(rtts_ms: list[float], records: list[int]) -> None:
    """Record each Produce request's round trip (ms) and record count, for --rtt."""
    write, answered = Producer._write, Producer._answered
    sent_at: dict[int, float] = {}          # id of a request's batch list -> when it was written

    def timed_write(self: Producer, node: int, batches: list) -> None:
        records.append(sum(len(b) for b in batches))
        sent_at[id(batches)] = time.perf_counter()
        write(self, node, batches)

    def timed_answered(self: Producer, node: int, batches: list, resp: dict | None, error: Exception | None) -> None:
        t0 = sent_at.pop(id(batches), None)
        if t0 is not None:
            rtts_ms.append((time.perf_counter() - t0) * 1000)
        answered(self, node, batches, resp, error)      # type: ignore[arg-type]
    Producer._write = timed_write                   # type: ignore[method-assign]
    Producer._answered = timed_answered             # type: ignore[method-assign]


async def sweep(cluster: LocalCluster, rates: list[float], seconds: float, linger_ms: int,
                rtts_ms: list[float] | None = None, records: list[int] | None = None) -> None:
    pids = {b: cluster.pids[f"broker-{b}"] for b in (1, 2, 3)}
    async with Admin(cluster.bootstrap) as admin:
        for i, rate in enumerate(rates):
            topic = f"e2e-{i}"
            await admin.create_topic(topic, -1, -1, E2E_TOPIC_CONFIGS, assignments=[[1, 2, 3]])
            if rtts_ms is not None and records is not None:
                rtts_ms.clear()
                records.clear()
            c0, p0, t0 = {b: cpu_s(p) for b, p in pids.items() if p}, time.process_time(), time.perf_counter()
            w0 = {b: runqueue_wait(p) for b, p in pids.items() if p}
            r = await end_to_end(cluster.bootstrap, topic, rate=rate, seconds=seconds, size=100, linger_ms=linger_ms)
            wall = time.perf_counter() - t0
            cpu = {b: 100 * (cpu_s(p) - c0[b]) / wall for b, p in pids.items() if p}
            waits = {b: (w[0] - w0[b][0], w[1] - w0[b][1]) for b, w in
                     ((b, runqueue_wait(p)) for b, p in pids.items() if p)}
            lat = r.latencies_ms
            print(f"offered {rate:>9,.0f}/s achieved {r.achieved_rate:>9,.0f}/s: p50 {pct(lat, .5):7.3f} ms "
                  f"p90 {pct(lat, .9):7.3f} ms p99 {pct(lat, .99):7.3f} ms max {max(lat, default=0):7.3f} ms; "
                  f"CPU % producer {100 * (time.process_time() - p0) / wall:.0f}, "
                  f"consumer {100 * r.consumer_cpu_s / (r.send_seconds + r.drain_seconds):.0f}, "
                  + ", ".join(f"broker {b} {v:.0f}" for b, v in sorted(cpu.items()))
                  + (f"; {r.failed} failed ({r.first_error})" if r.failed else ""), flush=True)
            brokers = ", ".join(f"broker {b} {w / max(n, 1) * 1e6:,.0f} us ({100 * w / wall:.0f} %)"
                                for b, (w, n) in sorted(waits.items()))
            print(f"  {r.wait_line()}; {brokers}", flush=True)
            if rtts_ms and records:
                print(f"  {len(rtts_ms):,} produce requests of {sum(records) / len(records):,.0f} records on average: "
                      f"round trip p50 {pct(rtts_ms, .5):.3f} ms, p90 {pct(rtts_ms, .9):.3f} ms, "
                      f"p99 {pct(rtts_ms, .99):.3f} ms", flush=True)
            await admin.delete_topics([topic])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="10000,50000,100000,200000,330000")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--linger-ms", type=int, default=1)
    ap.add_argument("--rtt", action="store_true", help="also time the producer's Produce requests")
    args = ap.parse_args()
    rtts_ms: list[float] | None = [] if args.rtt else None
    records: list[int] | None = [] if args.rtt else None
    if rtts_ms is not None and records is not None:
        time_requests(rtts_ms, records)
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="minibroker-e2e-") as tmp:
        cluster = LocalCluster.create(tmp + "/cluster", free_ports=True, proxied=False, overrides=BENCH_BROKER_CONFIGS)
        try:
            run_async(cluster.up())
            run_async(sweep(cluster, rates, args.seconds, args.linger_ms, rtts_ms, records))
        finally:
            cluster.down(timeout_s=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
