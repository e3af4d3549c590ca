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
@handle_errors
def produce(count: int, size: int, awaited: int, partitions: int, proxy: bool, props: tuple[str, ...],
            sets: tuple[str, ...], bootstrap_server: str | None) -> None:
    """Batched acks=all throughput, awaited single-record latency, consume rate."""
    from minibroker.bench.produce import run_bench
    cfg = {"linger.ms": "5", "batch.size": "262144", "max.request.size": "4194304"}
    cfg.update(parse_kv(props, "--producer-property"))
    run_async(run_bench(count=count, size=size, awaited=awaited, partitions=partitions, proxied=proxy,
                        producer_cfg=cfg, overrides=parse_kv(sets, "--set"), bootstrap=bootstrap_server,
                        out=click.echo))
