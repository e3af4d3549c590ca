"""`minibroker produce` (kafka-console-producer, plus a synthetic load mode)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

import click

from minibroker.cli.common import bootstrap_option, handle_errors, parse_kv, reachable_bootstrap, run_async
from minibroker.cli.format import produce_error_line
from minibroker.cli.progress import bar, interrupt_event, wanted
from minibroker.client.accumulator import ProducerBatch
from minibroker.client.producer import Producer
from minibroker.errors import ErrorCode, KafkaError

MAX_ERROR_LINES = 20


class _Report:
    """Counts acknowledged and failed records, printing the first errors as Kafka does."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.acked = 0
        self.failed = 0
        self.codes: Counter[str] = Counter()
        self.printed = 0
        self.sent = 0
        self.interrupted = False

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


async def _stdin_chunks(stop: asyncio.Event):
    """Chunks of stdin until EOF, or until `stop` is set (the first Ctrl-C). A daemon
    thread reads: a read blocked on a terminal or pipe must not keep the process alive."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)
    fd = sys.stdin.fileno()

    def reader() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(chunks.put(chunk), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                return                          # the loop is gone: the command has finished
            if not chunk:
                return
    threading.Thread(target=reader, name="stdin", daemon=True).start()
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            got = asyncio.ensure_future(chunks.get())
            await asyncio.wait([got, stopped], return_when=asyncio.FIRST_COMPLETED)
            if not got.done():
                got.cancel()
                return
            chunk = got.result()
            if not chunk:
                return
            yield chunk
    finally:
        stopped.cancel()


@click.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--acks", "--request-required-acks", "acks", default="all", show_default=True,
              type=click.Choice(["all", "-1", "0", "1"]), help="Acknowledgements the leader must gather.")
@click.option("--partition", type=int, help="Send every record to this partition.")
@click.option("--key-separator", help="Lines are KEY<sep>VALUE (as --property parse.key=true key.separator=<sep>).")
@click.option("--property", "reader_props", multiple=True, metavar="KEY=VALUE",
              help="Line reader property, as kafka-console-producer's: parse.key=true, key.separator=SEP "
                   "(default a tab).")
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
            reader_props: tuple[str, ...], count: int | None, size: int, props: tuple[str, ...], retries: int,
            compression: str | None,
            no_progress: bool) -> None:
    """Send stdin lines (or --count synthetic records) to TOPIC.

    Failed records are reported by error code name on stderr; the exit status
    is 1 if any record failed."""
    key_separator = _key_separator(key_separator, parse_kv(reader_props, "--property", strip_values=False))
    cfg: dict[str, Any] = {"acks": acks, "max.block.ms": "30000", "retries": str(retries)}
    if compression:
        cfg["compression.type"] = compression
    cfg.update(parse_kv(props, "--producer-property"))
    report = _Report(topic)
    if count is not None:
        elapsed = run_async(_synthetic(reachable_bootstrap(bootstrap_server), cfg, topic, partition, count, size,
                                       report, not no_progress))
        rate = report.acked / elapsed if elapsed > 0 else 0.0
        if report.interrupted:
            unacked = report.sent - report.acked - report.failed
            click.echo(f"Interrupted (Ctrl-C) after {report.sent} of {count} records: {report.acked} acknowledged, "
                       f"{report.failed} failed, {unacked} without an answer", err=True)
        click.echo(f"{report.acked} records sent, {report.failed} failed, {rate:,.0f} records/s "
                   f"({rate * size / 1e6:.2f} MB/s) in {elapsed:.2f} s", err=True)
    else:
        run_async(_lines(reachable_bootstrap(bootstrap_server), cfg, topic, partition, key_separator, report))
        if report.interrupted:
            unacked = report.sent - report.acked - report.failed
            click.echo(f"Interrupted (Ctrl-C) after {report.sent} records: {report.acked} acknowledged, "
                       f"{report.failed} failed, {unacked} without an answer", err=True)
    if report.failed:
        click.echo(report.summary(), err=True)
        sys.exit(1)
    if report.interrupted:
        sys.exit(130)


async def _require_topic(producer: Producer, topic: str, attempts: int = 3) -> None:
    """Fail at once with UNKNOWN_TOPIC_OR_PARTITION when no broker knows the topic (topics
    are never auto-created); `attempts` metadata answers (from rotating brokers) must agree,
    so a broker that has not yet replayed a just-created topic does not cause a false error."""
    await producer.start()
    for _ in range(attempts):
        producer.net.want_topics([topic])
        await producer.net.refresh_metadata()
        if producer.net.cache.topic_error(topic) != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            await producer.partitions_for(topic, 10_000)
            return
        await asyncio.sleep(producer.net.cache.refresh_backoff_ms / 1000)
    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     f"Topic {topic} not present in metadata: it does not exist (topics are not auto-created; "
                     f"create it with `minibroker topics create --topic {topic}`)")


def _key_separator(explicit: str | None, props: dict[str, str]) -> str | None:
    """The separator lines are split on: --key-separator, else key.separator (default a tab)
    when parse.key=true (LineMessageReader), else None (whole lines are values)."""
    unknown = sorted(set(props) - {"parse.key", "key.separator"})
    if unknown:
        raise click.BadParameter(f"unknown reader properties {', '.join(unknown)}; known: parse.key, key.separator",
                                 param_hint="--property")
    if explicit is not None:
        return explicit
    if props.get("parse.key", "false").strip().lower() == "true":
        return props.get("key.separator", "\t") or "\t"
    return None


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
        await _require_topic(producer, topic)
        stop = interrupt_event()
        pending = b""
        sep_b = sep.encode() if sep else None
        async for chunk in _stdin_chunks(stop):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                key, value = _split(line.rstrip(b"\r"), sep_b)
                await _send(producer, report, topic, value, key, partition)
                report.sent += 1
        if pending and not stop.is_set():      # a partial last line is sent at EOF, not on Ctrl-C
            key, value = _split(pending.rstrip(b"\r"), sep_b)
            await _send(producer, report, topic, value, key, partition)
            report.sent += 1
        try:
            await asyncio.wait_for(producer.flush(), 10 if stop.is_set() else None)
        except TimeoutError:
            pass
        report.interrupted = stop.is_set()


def _split(line: bytes, sep: bytes | None) -> tuple[bytes | None, bytes]:
    if sep is None:
        return None, line
    k, found, v = line.partition(sep)
    if not found:
        raise click.ClickException(f"No key separator found on line: {line[:60]!r}")
    return k, v


async def _synthetic(bootstrap: str, cfg: dict[str, Any], topic: str, partition: int | None, count: int,
                     size: int, report: _Report, progress: bool) -> float:
    """Send `count` generated records; the first Ctrl-C stops sending, waits up to 10 s
    for what is in flight and returns, so the summary covers what was sent."""
    async with Producer(bootstrap, cfg) as producer:
        producer.on_batch_done = report.on_batch
        await _require_topic(producer, topic)
        stop = interrupt_event()
        start = time.perf_counter()
        with bar("producing", count, wanted(not progress)) as update:
            pad = b"x" * max(0, size - 10)
            last = 0.0
            for i in range(count):
                if stop.is_set():
                    break
                value = (b"%010d" % i)[:size] + pad
                try:
                    await producer.send(topic, value, partition=partition)
                except KafkaError as exc:
                    report.failed += 1
                    report.codes[exc.name] += 1
                report.sent += 1
                now = time.perf_counter()
                if now - last > 0.2:
                    last = now
                    done = report.acked + report.failed
                    update(done, f"{done / (now - start):,.0f} rec/s")
            try:
                await asyncio.wait_for(producer.flush(), 10 if stop.is_set() else None)
            except TimeoutError:
                pass
            update(report.acked + report.failed)
        report.interrupted = stop.is_set()
        return time.perf_counter() - start
