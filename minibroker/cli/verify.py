"""`minibroker verify`: a verifiable producer and consumer, then the checker's report."""
from __future__ import annotations

import os
import sys
from typing import Any

import click

from minibroker.cli.common import bootstrap_option, handle_errors, resolve_bootstrap, run_async
from minibroker.cli.progress import bar, interrupt_event, wanted
from minibroker.testing.cluster import ClusterError, state_path


@click.command()
@bootstrap_option
@click.option("--topic", required=True, help="Topic to write and read (created when missing).")
@click.option("--records", type=int, default=None, help="Stop after sending this many records.")
@click.option("--duration", type=float, default=None, help="Stop sending after this many seconds.")
@click.option("--throughput", type=float, default=0, show_default=True,
              help="Records per second (0 = as fast as acknowledgements come).")
@click.option("--partitions", type=int, default=3, show_default=True, help="For a topic created here.")
@click.option("--replication-factor", type=int, default=3, show_default=True, help="For a topic created here.")
@click.option("--min-insync-replicas", type=int, default=2, show_default=True,
              help="min.insync.replicas of a topic created here.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="A local cluster's data directory (`minibroker cluster up`): also compare the "
                   "replicas' logs byte for byte once they converged.")
@click.option("--converge-timeout", type=float, default=30, show_default=True,
              help="Seconds to wait for every replica to reach its leader's LEO.")
@click.option("--no-progress", is_flag=True, help="No progress line on stderr (there is none in pipes anyway).")
@click.option("--idempotent", is_flag=True,
              help="Produce with enable.idempotence=true and retries (Kafka clients' default since 3.0) instead "
                   "of Kafka's VerifiableProducer settings (retries=0); duplicates still fail the run.")
@handle_errors
def verify(bootstrap_server: str | None, topic: str, records: int | None, duration: float | None,
           throughput: float, partitions: int, replication_factor: int, min_insync_replicas: int,
           data_dir: str | None, converge_timeout: float, no_progress: bool, idempotent: bool) -> None:
    """Produce numbered records with acks=all (every ack and failure logged), read every
    partition from offset 0, and report lost acknowledged records, duplicates, reordering,
    reads of definitely failed produces and (with --data-dir) replicas that diverge.
    Exit status 1 when the result is FAIL. Ctrl-C stops sending and still checks and
    reports what was sent (a second Ctrl-C aborts)."""
    from minibroker.verify.replicas import ReplicaDirs
    from minibroker.verify.runner import run_verify

    if records is None and duration is None:
        raise click.UsageError("give --records N and/or --duration SECONDS")
    dirs = None
    if data_dir is not None:
        d = os.path.abspath(data_dir)
        if not os.path.exists(state_path(d)):
            raise ClusterError(f"{d} holds no local cluster (no cluster.json); --data-dir needs "
                               f"the directory given to `minibroker cluster up`")
        dirs = ReplicaDirs.of_local_cluster(d)
        if bootstrap_server is None:
            import json
            with open(state_path(d), encoding="utf-8") as f:
                bootstrap_server = json.load(f)["bootstrap"]
    bootstrap = resolve_bootstrap(bootstrap_server)
    interrupted = [False]

    async def main() -> Any:
        stop = interrupt_event()
        with bar("verify", records, wanted(no_progress)) as update:
            def tick(wl: Any, phase: str) -> None:
                p = wl.producer
                update(p.sent, f"{phase}: {wl.acked} acked, {len(p.failures)} failed"
                               + (f", {len(wl.live.reads)} read" if wl.live is not None else ""))
            rep = await run_verify(bootstrap, topic, records=records, duration_s=duration,
                                   partitions=partitions, replication_factor=replication_factor,
                                   min_isr=min_insync_replicas, rate=throughput, replica_dirs=dirs,
                                   converge_timeout_s=converge_timeout, stop=stop, tick=tick,
                                   idempotent=idempotent)
        interrupted[0] = stop.is_set()
        return rep
    report = run_async(main())
    if interrupted[0]:
        click.echo("Interrupted (Ctrl-C): stopped sending; the report covers every record sent until then.")
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        sys.exit(1)
