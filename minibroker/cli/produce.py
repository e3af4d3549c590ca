"""`minibroker produce` (kafka-console-producer, plus a synthetic load mode)."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import Counter
from typing import Any

import click

from minibroker.cli.common import bootstrap_option, handle_errors, parse_kv, resolve_bootstrap, run_async
from minibroker.cli.format import produce_error_line
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.producer import Producer
from minibroker.errors import KafkaError

MAX_ERROR_LINES = 20


class _Report:
    """Counts acknowledged and failed records, printing the first errors as Kafka does."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.acked = 0
        self.failed = 0
        self.codes: Counter[str] = Counter()
        self.printed = 0

    def on_batch(self, batch: ProducerBatch, base_offset: int, error: KafkaError | None) -> None:
        if error is None:
            self.acked += len(batch)
            return
        self.failed += len(batch)
        self.codes[error.name] += len(batch)
        for key, value, _ts, _h in batch.records:
            if self.printed < MAX_ERROR_LINES:
                click.echo(produce_error_line(self.topic, key, value, error), err=True)
                self.printed += 1

    def summary(self) -> str:
        by_code = ", ".join(f"{n} x {c}" for c, n in self.codes.most_common())
        return f"{self.failed} record(s) failed ({by_code})"


async def _stdin_chunks():
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    while True:
        chunk = await loop.run_in_executor(None, os.read, fd, 1 << 16)
        if not chunk:
            return
        yield chunk


@click.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--acks", "--request-required-acks", "acks", default="all", show_default=True,
              type=click.Choice(["all", "-1", "0", "1"]), help="Acknowledgements the leader must gather.")
@click.option("--partition", type=int, help="Send every record to this partition.")
@click.option("--key-separator", help="Lines are KEY<sep>VALUE (as parse.key=true key.separator=<sep>).")
@click.option("--count", type=int, help="Synthetic load: send COUNT generated records instead of reading stdin.")
@click.option("--size", type=int, default=100, show_default=True, help="Synthetic record size in bytes.")
@click.option("--producer-property", "props", multiple=True, metavar="KEY=VALUE",
              help="Producer config by Kafka name, e.g. linger.ms=5 (repeatable).")
@click.option("--message-send-max-retries", "retries", type=int, default=3, show_default=True,
              help="Retries of a retriable error (kafka-console-producer's default is 3); "
                   "--producer-property retries=N overrides it.")
@click.option("--compression-codec", "--compression-type", "compression", is_flag=False, flag_value="gzip",
              type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default=None,
              help="Compress batches (kafka-console-producer's --compression-codec; gzip if given without a "
                   "value); --producer-property compression.type=... overrides it.")
@click.option("--no-progress", is_flag=True, help="Synthetic load without the progress bar.")
@handle_errors
def produce(bootstrap_server: str | None, topic: str, acks: str, partition: int | None, key_separator: str | None,
            count: int | None, size: int, props: tuple[str, ...], retries: int, compression: str | None,
            no_progress: bool) -> None:
    """Send stdin lines (or --count synthetic records) to TOPIC.

    Failed records are reported by error code name on stderr; the exit status
    is 1 if any record failed."""
    cfg: dict[str, Any] = {"acks": acks, "max.block.ms": "30000", "retries": str(retries)}
    if compression:
        cfg["compression.type"] = compression
    cfg.update(parse_kv(props, "--producer-property"))
    report = _Report(topic)
    if count is not None:
        elapsed = run_async(_synthetic(resolve_bootstrap(bootstrap_server), cfg, topic, partition, count, size,
                                       report, not no_progress))
        rate = report.acked / elapsed if elapsed > 0 else 0.0
        click.echo(f"{report.acked} records sent, {report.failed} failed, {rate:,.0f} records/s "
                   f"({rate * size / 1e6:.2f} MB/s) in {elapsed:.2f} s", err=True)
    else:
        run_async(_lines(resolve_bootstrap(bootstrap_server), cfg, topic, partition, key_separator, report))
    if report.failed:
        click.echo(report.summary(), err=True)
        sys.exit(1)


async def _send(producer: Producer, report: _Report, topic: str, value: bytes, key: bytes | None,
                partition: int | None) -> None:
    try:
        await producer.send(topic, value, key, partition=partition)
    except KafkaError as exc:
        report.failed += 1
        report.codes[exc.name] += 1
        if report.printed < MAX_ERROR_LINES:
            click.echo(produce_error_line(topic, key, value, exc), err=True)
            report.printed += 1


async def _lines(bootstrap: str, cfg: dict[str, Any], topic: str, partition: int | None,
                 sep: str | None, report: _Report) -> None:
    async with Producer(bootstrap, cfg) as producer:
        producer.on_batch_done = report.on_batch
        await producer.partitions_for(topic, 10_000)
        pending = b""
        sep_b = sep.encode() if sep else None
        async for chunk in _stdin_chunks():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                key, value = _split(line.rstrip(b"\r"), sep_b)
                await _send(producer, report, topic, value, key, partition)
        if pending:
            key, value = _split(pending.rstrip(b"\r"), sep_b)
            await _send(producer, report, topic, value, key, partition)
        await producer.flush()


def _split(line: bytes, sep: bytes | None) -> tuple[bytes | None, bytes]:
    if sep is None:
        return None, line
    k, found, v = line.partition(sep)
    if not found:
        raise click.ClickException(f"No key separator found on line: {line[:60]!r}")
    return k, v


async def _synthetic(bootstrap: str, cfg: dict[str, Any], topic: str, partition: int | None, count: int,
                     size: int, report: _Report, progress: bool) -> float:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    async with Producer(bootstrap, cfg) as producer:
        producer.on_batch_done = report.on_batch
        await producer.partitions_for(topic, 10_000)
        start = time.perf_counter()
        prog = Progress(TextColumn("producing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[rate]}"), console=None, transient=False,
                        disable=not progress or not sys.stderr.isatty())
        with prog:
            task = prog.add_task("produce", total=count, rate="")
            pad = b"x" * max(0, size - 10)
            last = 0.0
            for i in range(count):
                value = (b"%010d" % i)[:size] + pad
                try:
                    await producer.send(topic, value, partition=partition)
                except KafkaError as exc:
                    report.failed += 1
                    report.codes[exc.name] += 1
                now = time.perf_counter()
                if now - last > 0.2:
                    last = now
                    done = report.acked + report.failed
                    prog.update(task, completed=done, rate=f"{done / (now - start):,.0f} rec/s")
            await producer.flush()
            prog.update(task, completed=report.acked + report.failed)
        return time.perf_counter() - start
