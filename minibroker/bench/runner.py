"""`minibroker bench produce`: one sitting on one cluster, run after run, then the figures.

Owns the cluster's lifetime (a 3-broker cluster of real processes in a temporary
directory, the `cluster up` code, free ports, no fault proxy unless asked; or a
running cluster given by --bootstrap-server), the order of the measurements
within a run, a fresh set of topics per run, and what each run prints. Each
figure is measured by its own module (produce, e2e, catchup, confluent,
failover, partitions); a figure that fails prints why and the sitting goes on.

A run: the classic three (batched, awaited, consume), end-to-end latency at half
that run's batched rate, follower catch-up from zero, confluent-kafka through the
Kafka listener, and last the failover gap (it kills and restarts a broker). After
the runs, the idle-partitions figures (they leave N partitions behind, which would
weigh on later runs): the idle window once, then LOADED_ROUNDS rounds of one
partition beside the idle ones followed at once by all of them (each judged
against the runs' batched median, the single-partition rate; a round also
prints the two against each other), then round robin once.
"""
from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from minibroker.bench import confluent
from minibroker.bench.catchup import follower_catch_up
from minibroker.bench.e2e import end_to_end
from minibroker.bench.failover import failover_gap, session_timeout_ms
from minibroker.bench.figures import Stat, summarize
from minibroker.bench.partitions import SETTLE_S, idle_partitions, produce_spread, records_per_batch
from minibroker.bench.produce import pct, produce_batched, run_classic
from minibroker.client.admin import Admin
from minibroker.errors import KafkaError
from minibroker.testing.cluster import LocalCluster

Out = Callable[[str], None]
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
# The end-to-end topic keeps about a second of data (and the bench's brokers check retention every
# second), so its brokers' page cache stays the size a long-running broker's is instead of growing by
# the run's gigabyte: see minibroker.bench.e2e on what growth costs on a VM.
E2E_TOPIC_CONFIGS = {**TOPIC_CONFIGS, "segment.bytes": str(32 << 20), "retention.bytes": str(64 << 20),
                     "file.delete.delay.ms": "0"}
BENCH_BROKER_CONFIGS = {"log.retention.check.interval.ms": "1000"}
LOADED_ROUNDS = 3           # rounds of (one partition beside the idle ones, then all of them)


@dataclass
class BenchOptions:
    count: int = 1_000_000
    size: int = 100
    awaited: int = 2000
    partitions: int = 1
    proxied: bool = False
    producer_cfg: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    bootstrap: str | None = None
    runs: int = 1
    e2e: bool = True
    e2e_seconds: float = 5.0
    catch_up: bool = True
    confluent: bool = True
    failover: bool = True
    idle_partitions: int = 0
    idle_seconds: float = 30.0


@dataclass
class BenchReport:
    runs: list[dict[str, float]] = field(default_factory=list)
    once: dict[str, float] = field(default_factory=dict)        # measured once, after the runs
    rounds: list[dict[str, float]] = field(default_factory=list)  # the loaded rounds, after the runs
    session_timeout_ms: int | None = None
    idle_partitions: int = 0

    def stats(self) -> dict[str, Stat]:
        return {**summarize(self.runs), **summarize(self.rounds), **summarize([self.once] if self.once else [])}

    def after_runs(self) -> dict[str, int]:
        """Each figure measured after the runs -> how many times."""
        counts = {k: 1 for k in self.once}
        for r in self.rounds:
            for k in r:
                counts[k] = counts.get(k, 0) + 1
        return counts


async def _guarded(name: str, out: Out, step: Awaitable[None]) -> None:
    """Run one figure's step; if it fails, say so and go on with the next figure."""
    try:
        await step
    except Exception as exc:        # a bench prints what broke and measures the rest
        out(f"{name}: failed: {type(exc).__name__}: {exc}")


async def run_bench(opts: BenchOptions, out: Out) -> BenchReport:
    report = BenchReport(idle_partitions=opts.idle_partitions)
    cluster: LocalCluster | None = None
    tmp: tempfile.TemporaryDirectory | None = None
    try:
        bootstrap = opts.bootstrap
        if bootstrap is None:
            tmp = tempfile.TemporaryDirectory(prefix="minibroker-bench-")
            cluster = LocalCluster.create(tmp.name + "/cluster", free_ports=True, proxied=opts.proxied,
                                          overrides={**BENCH_BROKER_CONFIGS, **opts.overrides})
            out(f"starting a 3-broker cluster in {cluster.data_dir} ...")
            await cluster.up()
            bootstrap = cluster.bootstrap
            report.session_timeout_ms = session_timeout_ms(cluster)
        stamp = int(time.time())
        async with Admin(bootstrap) as admin:
            for i in range(opts.runs):
                if opts.runs > 1:
                    out(f"-- run {i + 1} of {opts.runs}")
                topic = f"bench-{stamp}" if opts.runs == 1 else f"bench-{stamp}-{i + 1}"
                report.runs.append(await one_run(opts, cluster, admin, bootstrap, topic, out))
            if opts.idle_partitions:
                if cluster is None:
                    out("idle partitions: skipped (needs the bench's own cluster, not --bootstrap-server)")
                else:
                    single = statistics.median(r["batched_rate"] for r in report.runs if "batched_rate" in r) \
                        if any("batched_rate" in r for r in report.runs) else 0.0
                    await _guarded("idle partitions", out, _idle(opts, cluster, admin, f"bench-{stamp}-idle",
                                                                   single, report, out))
    finally:
        if cluster is not None:
            cluster.down(timeout_s=10)
        if tmp is not None:
            tmp.cleanup()
    return report


async def one_run(opts: BenchOptions, cluster: LocalCluster | None, admin: Admin, bootstrap: str, topic: str,
                  out: Out) -> dict[str, float]:
    await admin.create_topic(topic, opts.partitions, 3, TOPIC_CONFIGS)
    out(f"topic {topic}: {opts.partitions} partition(s), RF=3, min.insync.replicas=2, acks=all, "
        f"{opts.size}-byte records")
    res = await run_classic(bootstrap, topic, count=opts.count, size=opts.size, awaited=opts.awaited,
                            producer_cfg=opts.producer_cfg, out=out, broker_pids=_broker_pids(cluster))
    fig = res.figures(opts.size)
    own = "skipped (needs the bench's own cluster, not --bootstrap-server)"
    # confluent-kafka next, so that its ratio compares two producers in the same state of the machine:
    # after the end-to-end run's gigabyte, page cache growing into fresh memory slows every write.
    if opts.confluent:
        if not confluent.available():
            out("confluent-kafka acks=all batched: skipped (confluent_kafka is not importable)")
        elif cluster is None or not cluster.kafka_bootstrap:
            out(f"confluent-kafka acks=all batched: {own}")
        else:
            await _guarded("confluent-kafka acks=all batched", out,
                           _confluent(opts, cluster, admin, topic + "-confluent", fig, out))
    if opts.e2e:
        await _guarded("end-to-end", out, _e2e(opts, admin, bootstrap, topic + "-e2e", fig, out))
    if opts.catch_up:
        if cluster is None:
            out(f"follower catch-up from zero: {own}")
        else:
            await _guarded("follower catch-up from zero", out, _catch_up(opts, cluster, admin, topic + "-catchup",
                                                                          fig, out))
    if opts.failover:
        if cluster is None:
            out(f"failover after SIGKILL of the leader: {own}")
        else:
            await _guarded("failover after SIGKILL of the leader", out,
                           _failover(cluster, admin, topic + "-failover", opts.size, fig, out))
    await _delete_run_topics(admin, topic)
    return fig


def _broker_pids(cluster: LocalCluster | None) -> dict[int, int]:
    """Node id -> pid of each running broker of the bench's own cluster (none with --bootstrap-server)."""
    if cluster is None:
        return {}
    return {b.node_id: pid for b in cluster.layout.brokers if (pid := cluster.pids.get(b.name))}


RUN_TOPIC_SUFFIXES = ("", "-e2e", "-catchup", "-confluent", "-failover")


async def _delete_run_topics(admin: Admin, topic: str) -> None:
    """Delete the topics a run created (all named after `topic`), so that the next run does
    not compete with the kernel writing this run's gigabytes back to disk: on this project's
    VMs every later run of a sitting was slower than the first until the data went."""
    names = [topic + s for s in RUN_TOPIC_SUFFIXES]
    try:
        await admin.delete_topics(names, timeout_ms=60_000)
    except KafkaError:
        pass


async def _e2e(opts: BenchOptions, admin: Admin, bootstrap: str, topic: str, fig: dict[str, float],
               out: Out) -> None:
    rate = fig.get("batched_rate", 0.0) / 2
    if rate <= 0:
        out("end-to-end: skipped (no batched rate to take half of)")
        return
    await admin.create_topic(topic, 1, 3, E2E_TOPIC_CONFIGS)
    r = await end_to_end(bootstrap, topic, rate=rate, seconds=opts.e2e_seconds, size=opts.size)
    if not r.latencies_ms:
        raise RuntimeError(f"no record came back within the time allowed ({r.sent:,} sent)")
    p50, p99 = statistics.median(r.latencies_ms), pct(r.latencies_ms, 0.99)
    notes = []
    if r.achieved_rate < 0.95 * rate:
        notes.append(f"the producer reached only {r.achieved_rate:,.0f} records/s")
    if r.failed:
        notes.append(f"{r.failed:,} of {r.sent:,} records failed to send, first: {r.first_error}")
    if r.received < r.sent - r.failed:
        notes.append(f"only {r.received:,} of {r.sent - r.failed:,} written records came back")
    if r.drain_seconds > max(1.0, 0.2 * opts.e2e_seconds):
        notes.append(f"the last record came back {r.drain_seconds:.1f} s after the last send: producer, brokers "
                     f"and consumer together did not keep up with this rate")
    out(f"end-to-end at {rate:,.0f} records/s (half the batched rate): p50 {p50:.3f} ms, p99 {p99:.3f} ms"
        + (f" ({'; '.join(notes)})" if notes else ""))
    out(f"  {r.wait_line()}")
    fig.update(e2e_rate=rate, e2e_p50_ms=p50, e2e_p99_ms=p99)


async def _catch_up(opts: BenchOptions, cluster: LocalCluster, admin: Admin, topic: str, fig: dict[str, float],
                    out: Out) -> None:
    c = await follower_catch_up(cluster, admin, topic, count=opts.count, size=opts.size,
                                producer_cfg=opts.producer_cfg)
    out(f"follower catch-up from zero: {c.records:,} records in {c.seconds:.2f} s = {c.rate:,.0f} records/s")
    fig["catchup_rate"] = c.rate


async def _confluent(opts: BenchOptions, cluster: LocalCluster, admin: Admin, topic: str, fig: dict[str, float],
                     out: Out) -> None:
    await admin.create_topic(topic, 1, 3, TOPIC_CONFIGS)
    acked, failed, secs = await asyncio.to_thread(confluent.produce_batched, cluster.kafka_bootstrap, topic,
                                                  opts.count, opts.size, opts.producer_cfg)
    rate = acked / secs if secs else 0.0
    mine = fig.get("batched_rate", 0.0)
    ratio = rate / mine if mine else 0.0
    out(f"confluent-kafka acks=all batched: {acked:,} records in {secs:.2f} s = {rate:,.0f} records/s "
        f"(ratio to minibroker's producer: {ratio:.2f})" + (f" ({failed} failed)" if failed else ""))
    fig["confluent_rate"] = rate
    if mine:
        fig["confluent_ratio"] = ratio


async def _failover(cluster: LocalCluster, admin: Admin, topic: str, size: int, fig: dict[str, float],
                    out: Out) -> None:
    f = await failover_gap(cluster, admin, topic, size=size)
    out(f"failover after SIGKILL of the leader: writes succeed again after {f.gap_ms:,.0f} ms "
        f"(broker.session.timeout.ms={f.session_timeout_ms})")
    fig["failover_ms"] = f.gap_ms


async def _idle(opts: BenchOptions, cluster: LocalCluster, admin: Admin, topic: str, single_rate: float,
                report: BenchReport, out: Out) -> None:
    once = report.once
    r = await idle_partitions(cluster, admin, topic, opts.idle_partitions, opts.idle_seconds)
    out(f"idle partitions: {r.partitions:,} partitions, RF=3, every leader in {r.create_seconds:.1f} s; "
        f"measured over {r.idle_seconds:.0f} s of idleness after {SETTLE_S:.0f} s to settle")
    for b in r.brokers:
        out(f"  broker {b.node_id}: CPU {b.cpu_pct:.1f}% of a core, RSS {b.rss_mib:,.0f} MiB, fds {b.fds:,}")
    counters = "no metrics endpoint" if r.isr_counter_delta is None else \
        f"{r.isr_counter_delta} ISR shrinks/expands counted by the brokers"
    out(f"ISR stable: {'yes' if r.isr_stable else 'no'} ({r.isr_changed_partitions} partitions changed ISR; "
        f"{counters})")
    if r.brokers:
        once.update(idle_cpu_pct=max(b.cpu_pct for b in r.brokers), idle_rss_mib=max(b.rss_mib for b in r.brokers),
                    idle_fds=max(b.fds for b in r.brokers))
    run = records_per_batch(int(opts.producer_cfg.get("batch.size", 16384)), opts.size)
    count = max(opts.count, run * r.partitions)          # every partition takes at least one full batch
    alone = f" ({single_rate:,.0f} records/s alone)" if single_rate else ""
    for i in range(LOADED_ROUNDS):
        out(f"loaded round {i + 1} of {LOADED_ROUNDS}:")
        fig: dict[str, float] = {}
        beside = f"{topic}-beside-{i + 1}"                # a busy partition among the idle ones
        await admin.create_topic(beside, 1, 3, TOPIC_CONFIGS)
        acked, failed, secs = await produce_batched(cluster.bootstrap, beside, opts.count, opts.size,
                                                    opts.producer_cfg)
        one = acked / secs if secs else 0.0
        out(f"  batched on one partition beside the {r.partitions:,} idle ones: {acked:,} records in {secs:.2f} s = "
            f"{one:,.0f} records/s" + (f"; {one / single_rate:.2f} of the runs' batched median{alone}"
                                       if single_rate else "") + (f" ({failed} failed)" if failed else ""))
        fig["beside_rate"] = one
        if single_rate:
            fig["beside_ratio"] = one / single_rate
        await admin.delete_topics([beside])
        acked, failed, secs = await produce_spread(cluster.bootstrap, topic, count, opts.size, opts.producer_cfg, run)
        rate = acked / secs if secs else 0.0
        out(f"  batched over all {r.partitions:,} partitions (runs of {run:,} records, one full batch each, as "
            f"Kafka's sticky partitioner): {acked:,} records in {secs:.2f} s = {rate:,.0f} records/s; "
            + (f"{rate / single_rate:.2f} of the runs' batched median" if single_rate else "-")
            + (f", {rate / one:.2f} of the one partition just before" if one else "")
            + (f" ({failed} failed)" if failed else ""))
        fig["multi_rate"] = rate
        if single_rate:
            fig["multi_ratio"] = rate / single_rate
        report.rounds.append(fig)
    acked, failed, secs = await produce_spread(cluster.bootstrap, topic, opts.count, opts.size, opts.producer_cfg, 1)
    rate = acked / secs if secs else 0.0
    out(f"batched over all {r.partitions:,} partitions (round robin, one record each in turn; once): {acked:,} "
        f"records in {secs:.2f} s = {rate:,.0f} records/s; "
        + (f"{rate / single_rate:.2f} of the runs' batched median" if single_rate else "-")
        + (f" ({failed} failed)" if failed else ""))
    once["rr_rate"] = rate
    if single_rate:
        once["rr_ratio"] = rate / single_rate
