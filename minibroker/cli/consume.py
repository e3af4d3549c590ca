"""`minibroker consume` (kafka-console-consumer, with explicit partitions and follower reads)."""
from __future__ import annotations

import contextlib
import signal

import sys
from collections.abc import Callable
from typing import Any

import click

from minibroker import clock
from minibroker.cli.common import bootstrap_option, fail, handle_errors, parse_kv, reachable_bootstrap, run_async
from minibroker.cli.progress import bar, interrupt_event, wanted
from minibroker.client.consumer import Consumer
from minibroker.client.group import GroupConsumer
from minibroker.client.types import ConsumerRecord, TopicPartition

_PRINT_PROPS = ("print.timestamp", "print.partition", "print.offset", "print.headers", "print.key", "print.value")


class RecordFormat:
    """Kafka's DefaultMessageFormatter (timestamp, partition, offset, headers, key, value, tab-separated),
    its properties read once: `line` formats one record, `lines` a poll's records in one bytes."""

    __slots__ = ("on", "sep", "value_only")

    def __init__(self, props: dict[str, str]) -> None:
        on = {k: props.get(k, "true" if k == "print.value" else "false").lower() == "true" for k in _PRINT_PROPS}
        self.on = on
        self.sep = props.get("key.separator", "\t").encode()
        self.value_only = on["print.value"] and not any(v for k, v in on.items() if k != "print.value")

    def line(self, rec: ConsumerRecord) -> bytes:
        on = self.on
        parts: list[bytes] = []
        if on["print.timestamp"]:
            parts.append((b"LogAppendTime:%d" if rec.timestamp_type else b"CreateTime:%d") % rec.timestamp)
        if on["print.partition"]:
            parts.append(b"Partition:%d" % rec.partition)
        if on["print.offset"]:
            parts.append(b"Offset:%d" % rec.offset)
        if on["print.headers"]:
            parts.append(b",".join(k.encode() + b":" + (v if v is not None else b"null") for k, v in rec.headers)
                         or b"NO_HEADERS")
        if on["print.key"]:
            parts.append(b"null" if rec.key is None else rec.key)
        if on["print.value"]:
            parts.append(b"null" if rec.value is None else rec.value)
        return self.sep.join(parts) + b"\n"

    def lines(self, records: list[ConsumerRecord]) -> bytes:
        """Every record's line, in order (the default format, the value alone, without a call per record)."""
        if not records:
            return b""
        if self.value_only:
            return b"\n".join([b"null" if (v := r.value) is None else v for r in records]) + b"\n"
        return b"".join([self.line(r) for r in records])


def format_record(rec: ConsumerRecord, props: dict[str, str]) -> bytes:
    """One record as `RecordFormat(props)` prints it."""
    return RecordFormat(props).line(rec)


@click.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--group", help="Consume as a member of this consumer group: start at its committed offsets "
                              "and commit as kafka-console-consumer does (enable.auto.commit).")
@click.option("--partition", type=int, help="Only this partition [default: all].")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset (else at the high watermark).")
@click.option("--offset", help="Start offset: a number (needs --partition), earliest or latest.")
@click.option("--follow", is_flag=True, help="Keep waiting for new records (until Ctrl-C or --max-messages).")
@click.option("--client-rack", default="", help="client.rack: lets the leader name a same-rack replica to read from.")
@click.option("--timeout-ms", type=int, help="Exit when no record arrived for this long.")
@click.option("--max-messages", type=int, help="Exit after this many records.")
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              help="Formatter property: print.key, print.offset, print.partition, print.timestamp, "
                   "print.headers, print.value, key.separator.")
@click.option("--consumer-property", "cprops", multiple=True, metavar="KEY=VALUE",
              help="Consumer config by Kafka name.")
@click.option("--verbose", "-v", is_flag=True,
              help="Report which replica serves each partition, and resets, on stderr.")
@handle_errors
def consume(bootstrap_server: str | None, topic: str, group: str | None, partition: int | None, from_beginning: bool,
            offset: str | None, follow: bool, client_rack: str, timeout_ms: int | None, max_messages: int | None,
            props: tuple[str, ...], cprops: tuple[str, ...], verbose: bool) -> None:
    """Print records of TOPIC, one per line.

    Without --follow or --timeout-ms it stops once it has read up to the high
    watermark of every partition. Only records below the high watermark of
    the replica that served them are ever printed.

    With --group, partitions are assigned by the group (range assignor),
    reading starts at the group's committed offsets (--from-beginning only
    applies to partitions without one), offsets are committed every
    auto.commit.interval.ms and on exit, and the member leaves the group on exit."""
    start: str | int = "earliest" if from_beginning else "latest"
    if offset is not None:
        if from_beginning:
            fail("Options --from-beginning and --offset cannot be used together")
        if offset.lower() in ("earliest", "latest"):
            start = offset.lower()
        else:
            try:
                start = int(offset)
            except ValueError:
                fail(f"--offset: expected a number, earliest or latest, got {offset!r}")
            if partition is None:
                fail("The partition is required when offset is specified.")
    cfg: dict[str, Any] = {"client.rack": client_rack,
                           "auto.offset.reset": "earliest" if start == "earliest" else "latest"}
    if group is not None:
        cfg["client.id"] = "console-consumer"      # kafka-console-consumer's client id
    cfg.update(parse_kv(cprops, "--consumer-property"))
    fmt = RecordFormat(parse_kv(props, "--property", strip_values=False))
    counter = [0]
    if group is not None:
        if partition is not None or offset is not None:
            fail("Options --group and --partition/--offset cannot be used together (the group assigns partitions)")
        cfg["group.id"] = group
        # SIGTERM ends the member as Ctrl-C does (commit, leave), as the console consumer's shutdown hook.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            run_async(_consume_group(reachable_bootstrap(bootstrap_server), cfg, topic, follow, timeout_ms,
                                     max_messages, fmt, counter))
        click.echo(f"Processed a total of {counter[0]} messages", err=True)
        return
    # Ctrl-C ends a --follow; the total is still reported, as Kafka's console consumer does.
    with contextlib.suppress(KeyboardInterrupt):
        run_async(_consume(reachable_bootstrap(bootstrap_server), cfg, topic, partition, start, follow, timeout_ms,
                           max_messages, fmt, verbose, counter))
    click.echo(f"Processed a total of {counter[0]} messages", err=True)


async def _consume(bootstrap: str, cfg: dict[str, Any], topic: str, partition: int | None, start: str | int,
                   follow: bool, timeout_ms: int | None, max_messages: int | None, fmt: RecordFormat,
                   verbose: bool, counter: list[int]) -> None:
    out = sys.stdout.buffer
    count = 0
    async with Consumer(bootstrap, cfg) as consumer:
        if verbose:
            consumer.on_note = lambda note: click.echo(note, err=True)
        tps = await consumer.assign_topic(topic, None if partition is None else [partition], timeout_ms=10_000)
        if isinstance(start, int):
            consumer.seek(TopicPartition(topic, partition), start)  # type: ignore[arg-type]
        elif start == "earliest":
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        served: dict[TopicPartition, int | None] = {}
        last_record = began = clock.monotonic()
        stop = interrupt_event()              # the first Ctrl-C ends the loop at its next poll (200 ms at most)
        with bar("consuming", max_messages, wanted(stdout_is_output=True)) as update:
            try:
                while not stop.is_set() and (max_messages is None or count < max_messages):
                    records = await consumer.poll(timeout_ms=200)
                    printed = records if max_messages is None else records[:max_messages - count]
                    out.write(fmt.lines(printed))
                    count += len(printed)
                    counter[0] = count
                    if records:
                        out.flush()
                        last_record = clock.monotonic()
                        update(count, f"{count / max(1e-3, last_record - began):,.0f} rec/s")
                    if verbose:
                        for tp in tps:
                            src = consumer.fetched_from(tp)
                            if src is not None and served.get(tp) != src:
                                served[tp] = src
                                kind = "preferred read replica" if consumer.preferred_replica(tp) == src else "leader"
                                click.echo(f"{tp}: fetching from broker {src} ({kind})", err=True)
                    if _done(records, last_record, follow, timeout_ms, consumer.caught_up):
                        break
            finally:
                out.flush()


def _done(records: list[ConsumerRecord], last_record: float, follow: bool, timeout_ms: int | None,
          caught_up: Callable[[], bool]) -> bool:
    """--timeout-ms passed without a record, or (without --follow) everything up to the HW was read."""
    if timeout_ms is not None and (clock.monotonic() - last_record) * 1000 >= timeout_ms:
        return True
    return not follow and timeout_ms is None and not records and caught_up()


async def _consume_group(bootstrap: str, cfg: dict[str, Any], topic: str, follow: bool, timeout_ms: int | None,
                         max_messages: int | None, fmt: RecordFormat, counter: list[int]) -> None:
    out = sys.stdout.buffer
    async with GroupConsumer(bootstrap, cfg) as consumer:
        consumer.subscribe([topic])
        last_record = clock.monotonic()
        try:
            while max_messages is None or counter[0] < max_messages:
                records = await consumer.poll(timeout_ms=200)
                handed = records if max_messages is None else records[:max_messages - counter[0]]
                out.write(fmt.lines(handed))
                counter[0] += len(handed)
                if len(handed) < len(records):
                    # As Kafka's console consumer: only what was printed counts as consumed.
                    consumer.consumed_only(handed, records)
                if records:
                    out.flush()
                    last_record = clock.monotonic()
                if _done(records, last_record, follow, timeout_ms, consumer.caught_up):
                    break
        finally:
            out.flush()
