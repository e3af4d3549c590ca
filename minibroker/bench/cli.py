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
@click.option("--bootstrap-server", help="Use a running cluster instead of starting one.")
@click.option("--compare-ceiling", "ceiling_path", metavar="PATH", type=click.Path(exists=True, dir_okay=False),
              help="Run this replication-ceiling script in the same sitting and print each figure as a ratio to it.")
@click.option("--ceiling-runs", type=int, default=2, show_default=True)
@click.option("--ceiling-seconds", type=float, default=3, show_default=True)
@handle_errors
def produce(count: int, size: int, awaited: int, partitions: int, proxy: bool, props: tuple[str, ...],
            sets: tuple[str, ...], bootstrap_server: str | None, ceiling_path: str | None, ceiling_runs: int,
            ceiling_seconds: float) -> None:
    """Batched acks=all throughput, awaited single-record latency, consume rate."""
    from minibroker.bench.produce import run_bench
    cfg = {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"}
    cfg.update(parse_kv(props, "--producer-property"))
    ceiling = None
    if ceiling_path is not None:
        from minibroker.bench.ceiling import run_ceiling
        ceiling = run_ceiling(ceiling_path, ceiling_runs, ceiling_seconds, click.echo)
    res = run_async(run_bench(count=count, size=size, awaited=awaited, partitions=partitions, proxied=proxy,
                              producer_cfg=cfg, overrides=parse_kv(sets, "--set"), bootstrap=bootstrap_server,
                              out=click.echo))
    if ceiling is not None:
        from minibroker.bench.ceiling import ratio_lines
        for line in ratio_lines(res, ceiling):
            click.echo(line)
