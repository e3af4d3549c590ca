"""`minibroker bench ...` commands."""
from __future__ import annotations

import click

from minibroker.cli.common import handle_errors, parse_kv, run_async


@click.group()
def bench() -> None:
    """Benchmarks against a real local cluster (figures, not tests)."""


@bench.command()
@click.option("--count", type=int, default=1_000_000, show_default=True, help="Records for the batched run.")
@click.option("--size", type=int, default=100, show_default=True, help="Record value size in bytes.")
@click.option("--awaited", type=int, default=2000, show_default=True, help="Records for the awaited (latency) run.")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--proxy", is_flag=True, help="Route replication through the fault proxy (as `cluster up` does).")
@click.option("--producer-property", "props", multiple=True, metavar="KEY=VALUE",
              help="Producer config for the batched run [default: linger.ms=5 batch.size=262144].")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Broker/controller property.")
@click.option("--bootstrap-server", help="Use a running cluster instead of starting one (skips the figures "
              "that stop or kill brokers, confluent-kafka and idle partitions).")
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Repeat every figure this many times on the same cluster (fresh topics each run, "
                   "deleted after it), then print min / median / max.")
@click.option("--e2e/--no-e2e", "e2e", default=True, help="End-to-end latency at half the batched rate.")
@click.option("--e2e-seconds", type=float, default=5, show_default=True)
@click.option("--catch-up/--no-catch-up", "catch_up", default=True, help="Follower catch-up from zero.")
@click.option("--confluent/--no-confluent", "confluent", default=True,
              help="confluent-kafka batched through the Kafka listener.")
@click.option("--failover/--no-failover", "failover", default=True,
              help="Write gap after SIGKILL of the leader (waits out broker.session.timeout.ms).")
@click.option("--idle-partitions", type=click.IntRange(min=0), default=0, show_default=True,
              help="After the runs: per-broker CPU, RSS and fds with this many idle RF=3 partitions, "
                   "then batched load over all of them (0 = skip; issue 13 uses 1000).")
@click.option("--idle-seconds", type=float, default=30, show_default=True)
@click.option("--compare-ceiling", "ceiling_path", metavar="PATH", type=click.Path(exists=True, dir_okay=False),
              help="Run this replication-ceiling script in the same sitting, print each figure as a ratio to it "
                   "and end with issue 13's goal table.")
@click.option("--ceiling-runs", type=int, default=2, show_default=True)
@click.option("--ceiling-seconds", type=float, default=3, show_default=True)
@handle_errors
def produce(count: int, size: int, awaited: int, partitions: int, proxy: bool, props: tuple[str, ...],
            sets: tuple[str, ...], bootstrap_server: str | None, runs: int, e2e: bool, e2e_seconds: float,
            catch_up: bool, confluent: bool, failover: bool, idle_partitions: int, idle_seconds: float,
            ceiling_path: str | None, ceiling_runs: int, ceiling_seconds: float) -> None:
    """Batched acks=all throughput, awaited single-record latency, consume rate, confluent-kafka,
    end-to-end latency, follower catch-up, failover gap, idle partitions."""
    from minibroker.bench.figures import goal_rows, goal_table, summary_lines
    from minibroker.bench.runner import BenchOptions, run_bench
    cfg = {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"}
    cfg.update(parse_kv(props, "--producer-property"))
    ceiling = None
    if ceiling_path is not None:
        from minibroker.bench.ceiling import run_ceiling
        ceiling = run_ceiling(ceiling_path, ceiling_runs, ceiling_seconds, click.echo)
    opts = BenchOptions(count=count, size=size, awaited=awaited, partitions=partitions, proxied=proxy,
                        producer_cfg=cfg, overrides=parse_kv(sets, "--set"), bootstrap=bootstrap_server, runs=runs,
                        e2e=e2e, e2e_seconds=e2e_seconds, catch_up=catch_up, confluent=confluent, failover=failover,
                        idle_partitions=idle_partitions, idle_seconds=idle_seconds)
    report = run_async(run_bench(opts, click.echo))
    stats = report.stats()
    for line in summary_lines(stats, len(report.runs), after=report.after_runs()):
        click.echo(line)
    if ceiling is not None:
        from minibroker.bench.ceiling import ratio_lines
        for line in ratio_lines({k: s.median for k, s in stats.items()}, ceiling):
            click.echo(line)
        rows = goal_rows(stats, ceiling, session_timeout_ms=report.session_timeout_ms,
                         idle_partitions=report.idle_partitions)
        for line in goal_table(rows, len(report.runs)):
            click.echo(line)
